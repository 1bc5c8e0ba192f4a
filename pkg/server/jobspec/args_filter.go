package jobspec

import "bytes"

// MaxArgsFilterBytes bounds an args filter (a search, a bulk action's
// filter): a filter names a few keys, not a whole document.
const MaxArgsFilterBytes = 64 << 10

// ValidateArgsFilter checks an args filter, a JSON object that the jobs
// it selects contain (jsonb @>), and returns it; nil when empty, which
// filters nothing. It is held to what Postgres can store, as args are, so
// a filter with a NUL or invalid UTF-8 is refused naming field rather
// than failing in the database.
func ValidateArgsFilter(field string, filter []byte) ([]byte, error) {
	if len(bytes.TrimSpace(filter)) == 0 {
		return nil, nil
	}
	return ValidateArgs(field, filter, MaxArgsFilterBytes)
}
