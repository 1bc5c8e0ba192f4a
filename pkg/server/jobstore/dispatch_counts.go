package jobstore

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// QueueCounts are the live jobs per topic that pause status reports.
type QueueCounts struct {
	// Queued is PENDING plus RETRYING jobs (due or not), by topic.
	Queued map[string]int64
	// Running is RUNNING jobs, by topic.
	Running map[string]int64
}

// Totals sums every topic.
func (c QueueCounts) Totals() (queued, running int64) {
	for _, n := range c.Queued {
		queued += n
	}
	for _, n := range c.Running {
		running += n
	}
	return queued, running
}

// countsPlanSQL steers the counts onto the two partial indexes (the same
// reasoning as pinnedPlanSQL: stale statistics must not turn them into
// scans of the whole table) and keeps JIT out: a count over a large backlog
// has a cost high enough to trigger JIT compilation, which costs more than
// it saves for one aggregate.
const countsPlanSQL = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true)`

// queueCountsSQL counts live jobs by topic without reading finished ones:
// queued through jobs_claim_idx, running through jobs_expired_lease_idx.
// Both indexes are partial, so the cost is one index entry plus one heap
// visit (for the topic) per live job — O(queued + running), whatever the
// number of finished jobs in the table; measured at about 1 µs per queued
// job (200k queued: ~180 ms). It runs per status request, never per
// metrics scrape.
const queueCountsSQL = `
SELECT topic, false, count(*) FROM jobs WHERE status IN ('PENDING', 'RETRYING') AND blocked_by = 0 GROUP BY topic
UNION ALL
SELECT topic, true, count(*) FROM jobs WHERE status = 'RUNNING' GROUP BY topic`

// QueueCounts counts queued and running jobs by topic.
func (s *Store) QueueCounts(ctx context.Context) (QueueCounts, error) {
	out := QueueCounts{Queued: map[string]int64{}, Running: map[string]int64{}}
	b := &pgx.Batch{}
	b.Queue(countsPlanSQL)
	b.Queue(queueCountsSQL)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return QueueCounts{}, interpretError("count queued jobs", err)
	}
	rows, err := br.Query()
	if err != nil {
		return QueueCounts{}, interpretError("count queued jobs", err)
	}
	defer rows.Close()
	for rows.Next() {
		var topic string
		var running bool
		var n int64
		if err := rows.Scan(&topic, &running, &n); err != nil {
			return QueueCounts{}, interpretError("count queued jobs", err)
		}
		if running {
			out.Running[topic] = n
		} else {
			out.Queued[topic] = n
		}
	}
	if err := rows.Err(); err != nil {
		return QueueCounts{}, interpretError("count queued jobs", err)
	}
	return out, nil
}
