package reindex

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

func TestDueRebuildsThePartialIndexesLast(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	r := NewReindexer(Config{Bloat: 4, MinFreed: mib}, nil, nil, nil, slog.New(slog.DiscardHandler))
	// Every one far past its estimate (a few entries), on a small table.
	index := func(name string, bytes int64, partial bool) jobstore.IndexSize {
		return jobstore.IndexSize{Name: name, Bytes: bytes * mib, Entries: 10, KeyWidth: 16,
			TableBytes: 100 * mib, TableCounted: 10, TableLive: 10, Partial: partial}
	}
	sizes := []jobstore.IndexSize{
		index("jobs_finished_idx", 40, true),
		index("jobs_claim_idx", 300, true),
		index("jobs_pkey", 200, false),
		index("jobs_expired_lease_idx", 20, true),
		index("jobs_other_idx", 250, false),
		index("jobs_small_idx", 1, true), // gives back less than MinFreed
	}
	var names []string
	for _, s := range r.due(sizes) {
		names = append(names, s.Name)
	}
	require.Equal(t, []string{"jobs_other_idx", "jobs_pkey", "jobs_expired_lease_idx", "jobs_finished_idx", "jobs_claim_idx"}, names,
		"over every row first, most given back first; then the partial ones, most given back last")
}
