package jobstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// QueueDepth is one (topic, status) group of live jobs.
type QueueDepth struct {
	Topic  string
	Status pulsetype.Status // PENDING, RETRYING or RUNNING
	Jobs   int64
}

// queueDepthSQL is queueCountsSQL split by status: the same two partial
// indexes (jobs_claim_idx for PENDING and RETRYING, jobs_expired_lease_idx
// for RUNNING), so its cost is O(live jobs) whatever the number of finished
// ones. control-api runs it on an interval for pulse_queue_depth, never per
// scrape.
const queueDepthSQL = `
SELECT topic, status, count(*) FROM jobs WHERE status IN ('PENDING', 'RETRYING') AND blocked_by = 0 GROUP BY topic, status
UNION ALL
SELECT topic, status, count(*) FROM jobs WHERE status = 'RUNNING' GROUP BY topic, status`

// QueueDepths counts live jobs by topic and status in one grouped query.
func (s *Store) QueueDepths(ctx context.Context) ([]QueueDepth, error) {
	b := &pgx.Batch{}
	b.Queue(countsPlanSQL)
	b.Queue(queueDepthSQL)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, interpretError("count queue depth", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, interpretError("count queue depth", err)
	}
	defer rows.Close()
	var out []QueueDepth
	for rows.Next() {
		var d QueueDepth
		var status string
		if err := rows.Scan(&d.Topic, &status, &d.Jobs); err != nil {
			return nil, interpretError("count queue depth", err)
		}
		d.Status = pulsetype.Status(status)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("count queue depth", err)
	}
	return out, nil
}
