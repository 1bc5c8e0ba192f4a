package storable_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/storable"
)

// jsonCorpus mixes documents Postgres accepts with documents it refuses;
// the differential tests below hold storable.JSON to Postgres's own verdict.
var jsonCorpus = []string{
	`{}`, `{"a":1}`, `{"path":"C:\\u0000dir"}`, `{"a":"\u0000"}`, `{"\u0000":1}`,
	`{"a":"x\u0000y"}`, `{"a":"\ud83d\ude00"}`, `{"a":"\ud83d"}`, `{"a":"\ude00"}`,
	`{"a":"\ud83dx"}`, `{"a":"\ud83d\u0041"}`, "{\"a\":\"\xff\"}", "{\"\xc3\":1}",
	`{"a":1e1000000}`, `{"a":-1e1000000}`, `{"a":1e-1000000}`, `{"a":1e131071}`,
	`{"a":1e131072}`, `{"a":1e-16383}`, `{"a":1e-16384}`, `{"a":0e99999999}`,
	`{"a":0.000e-99999}`, `{"a":1.5e-16382}`, `{"a":1.5e-16383}`, `{"a":12e131070}`,
	`{"a":123e131070}`, `{"a":1e99999999999999999999}`, `{"a":[1,2,{"b":"\u00e9"}]}`,
	`{"a":"\\\\u0000"}`, `{"a":"\\"}`, `{"a":100e-16385}`, `{"a":-0.0}`,
	`{"a":"é","b":"日本"}`, `{"a":10000000000000000000000000000000000000e-16420}`,
}

func TestJSONAgreesWithPostgres(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	for _, doc := range jsonCorpus {
		checkJSONAgainstPostgres(t, pool, []byte(doc))
	}
}

func FuzzJSONAgreesWithPostgres(f *testing.F) {
	for _, doc := range jsonCorpus {
		f.Add([]byte(doc))
	}
	pool := pgtest.Pool(f)
	f.Fuzz(func(t *testing.T, doc []byte) {
		checkJSONAgainstPostgres(t, pool, doc)
	})
}

// checkJSONAgainstPostgres: whatever storable.JSON accepts, jsonb stores;
// whatever it refuses among valid JSON, jsonb refuses too.
func checkJSONAgainstPostgres(t *testing.T, pool *pgxpool.Pool, doc []byte) {
	t.Helper()
	err := storable.JSON("args", doc)
	if err != nil {
		require.ErrorIs(t, err, apierr.ErrInvalidArgument, "%q", doc)
		require.Contains(t, err.Error(), "args", "the error names the field")
	}
	var pgErr error
	if err == nil || err.Error() != "args: is not valid JSON" {
		// Text parameters cannot carry invalid UTF-8 to Postgres either:
		// send bytes and let the server convert, as the insert does.
		_, pgErr = pool.Exec(t.Context(), `SELECT convert_from($1::bytea, 'UTF8')::jsonb`, doc)
	}
	if err == nil {
		require.NoError(t, pgErr, "storable.JSON accepted %q but Postgres refused it", doc)
	} else if err.Error() != "args: is not valid JSON" {
		require.Error(t, pgErr, "storable.JSON refused %q (%v) but Postgres stores it", doc, err)
	}
}

func TestTextAgreesWithPostgres(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	for _, s := range []string{"", "plain", "é日本", "a\x00b", "\xff", "ok\xc3", "\xed\xa0\x80"} {
		err := storable.Text("reason", s)
		_, pgErr := pool.Exec(t.Context(), `SELECT convert_from($1::bytea, 'UTF8')`, []byte(s))
		if err == nil {
			require.NoError(t, pgErr, "%q", s)
			continue
		}
		require.ErrorIs(t, err, apierr.ErrInvalidArgument)
		require.Contains(t, err.Error(), "reason:")
		// Postgres's convert_from accepts NUL-free text only; a NUL it
		// refuses as "invalid byte sequence" too.
		require.Error(t, pgErr, "storable.Text refused %q (%v) but Postgres stores it", s, err)
	}
}

func TestTimeRange(t *testing.T) {
	t.Parallel()
	require.NoError(t, storable.Time("run_at", time.Now()))
	require.ErrorIs(t, storable.Time("run_at", time.Time{}), apierr.ErrInvalidArgument)
	require.ErrorContains(t, storable.Time("run_at", time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)), "run_at")
}
