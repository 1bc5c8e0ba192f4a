package jobstore

import (
	"bytes"
	"slices"
	"strings"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// Lock order. A statement that writes several jobs its caller names (an
// insert with keys, a report, a heartbeat) takes each row's lock, or each
// key's, as it reaches it, and holds it to its commit. Two such statements
// that share two rows and reach them in opposite orders each hold one and
// wait for the other: a deadlock, which Postgres breaks after
// deadlock_timeout (a second) by failing one of them whole. Every such
// statement here reaches its rows in one order — jobs by id, keyed
// inserts by key — so one waits for the other and then goes on. Claims,
// the reaper and retention skip locked rows instead (SKIP LOCKED), and
// the workflow actions, which lock a graph's rows in the graph's order,
// retry a deadlock (workflows.go).

// inKeyOrder is jobs in the order every conflict-handling insert takes
// its keys: by idempotency key, then by id (a schedule fire's id is
// deterministic, so two fires of one occurrence share it), keyed jobs
// first. An INSERT ... ON CONFLICT that meets a key another transaction
// inserted and has not committed waits for that transaction, so two
// coalesced batches holding the same two keys in opposite orders would
// deadlock. The sort is stable: of two jobs of one batch sharing a key,
// the first submitted is still the one inserted. The unique insert claims
// its job_uniques keys in key order already (uniqueInsert's eligible).
func inKeyOrder(jobs []pulsetype.NewJob) []pulsetype.NewJob {
	sorted := slices.Clone(jobs)
	slices.SortStableFunc(sorted, func(a, b pulsetype.NewJob) int {
		if (a.IdempotencyKey == "") != (b.IdempotencyKey == "") {
			if a.IdempotencyKey != "" {
				return -1
			}
			return 1
		}
		if c := strings.Compare(a.IdempotencyKey, b.IdempotencyKey); c != 0 {
			return c
		}
		if a.IdempotencyKey != "" {
			return 0 // same key: keep the batch's order
		}
		return bytes.Compare(a.ID[:], b.ID[:])
	})
	return sorted
}

// inIDOrder returns the indexes 0..n-1 ordered by id(i), the order in
// which a statement over n named jobs reaches their rows when its arrays
// are filled in it. Equal ids keep their order.
func inIDOrder(n int, id func(i int) [16]byte) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ia, ib := id(a), id(b)
		return bytes.Compare(ia[:], ib[:])
	})
	return order
}
