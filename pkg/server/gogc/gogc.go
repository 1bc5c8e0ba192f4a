package gogc

import "runtime/debug"

// ServiceDefault is the GC target (GOGC) the hot-path services run with
// unless GOGC is set. Their live heap is a few megabytes, so at Go's default
// of 100 the collector runs every few megabytes allocated, and every job
// allocates (protobuf messages, pgx rows): in the throughput benchmark GC
// was about a third of the gateways' CPU. At 400 the heap may grow to five
// times the live heap between collections instead of twice: tens of
// megabytes, for a third less gateway CPU per job (docs/operations.md).
const ServiceDefault = 400

// Apply sets the GC target to percent unless GOGC is set in the
// environment, as read through lookup (os.LookupEnv), and reports whether
// it did. An operator's GOGC, including "off", always wins.
func Apply(lookup func(string) (string, bool), percent int) bool {
	if _, set := lookup("GOGC"); set {
		return false
	}
	debug.SetGCPercent(percent)
	return true
}
