package jobstore

import (
	"context"
	"time"
)

// TopicSummary is one topic's live numbers as the dashboard's per-topic
// table shows them.
//
// Interim: the topics work (Store.Topics, TopicInfo, with the fleet-wide
// max_running limit) supersedes this read. Until it lands, control-api's
// api.InterimTopics serves the dashboard from TopicSummaries; when it does,
// both go (docs/adr/0019).
type TopicSummary struct {
	Topic        string `bun:"topic"`
	Pending      int64  `bun:"pending"`
	Running      int64  `bun:"running"`
	Retrying     int64  `bun:"retrying"`
	DeadLettered int64  `bun:"dead_lettered"`
	// CompletedLastHour and FailedLastHour come from the throughput
	// rollup: attempts settled in the last 60 minutes.
	CompletedLastHour int64 `bun:"completed_last_hour"`
	FailedLastHour    int64 `bun:"failed_last_hour"`
	// OldestDueMicros is how long the oldest due PENDING or RETRYING job
	// has been due, in microseconds; 0 when none is due.
	OldestDueMicros int64 `bun:"oldest_due_micros"`
	// ConnectedWorkers counts worker streams serving the topic now.
	ConnectedWorkers int64 `bun:"connected_workers"`
}

// OldestDue is OldestDueMicros as a duration.
func (t TopicSummary) OldestDue() time.Duration {
	return time.Duration(t.OldestDueMicros) * time.Microsecond
}

// topicSummariesSQL reads every topic that has live or dead-lettered
// jobs, throughput in the last hour, or a connected worker. Dead letters
// have no index of their own: the count reads them from the table.
const topicSummariesSQL = `
WITH live AS (
    SELECT topic,
           count(*) FILTER (WHERE status = 'PENDING')  AS pending,
           count(*) FILTER (WHERE status = 'RUNNING')  AS running,
           count(*) FILTER (WHERE status = 'RETRYING') AS retrying,
           min(next_run_at) FILTER (WHERE status IN ('PENDING', 'RETRYING') AND next_run_at <= now()) AS oldest_due
    FROM jobs WHERE status IN ('PENDING', 'RUNNING', 'RETRYING')
    GROUP BY topic
), dead AS (
    SELECT topic, count(*) AS dead_lettered FROM jobs WHERE status = 'DEAD_LETTERED' GROUP BY topic
), hour AS (
    SELECT topic, sum(completed) AS completed, sum(failed) AS failed
    FROM job_throughput WHERE bucket >= date_trunc('minute', now()) - interval '59 minutes'
    GROUP BY topic
), workers AS (
    SELECT t.topic, count(*) AS n
    FROM worker_presence p, unnest(p.topics) AS t(topic)
    WHERE p.expires_at > now()
    GROUP BY t.topic
), names AS (
    SELECT topic FROM live UNION SELECT topic FROM dead
    UNION SELECT topic FROM hour UNION SELECT topic FROM workers
)
SELECT n.topic,
       COALESCE(l.pending, 0)        AS pending,
       COALESCE(l.running, 0)        AS running,
       COALESCE(l.retrying, 0)       AS retrying,
       COALESCE(d.dead_lettered, 0)  AS dead_lettered,
       COALESCE(h.completed, 0)::bigint AS completed_last_hour,
       COALESCE(h.failed, 0)::bigint    AS failed_last_hour,
       COALESCE((extract(epoch FROM now() - l.oldest_due) * 1000000)::bigint, 0) AS oldest_due_micros,
       COALESCE(w.n, 0)              AS connected_workers
FROM names n
LEFT JOIN live l USING (topic)
LEFT JOIN dead d USING (topic)
LEFT JOIN hour h USING (topic)
LEFT JOIN workers w USING (topic)
ORDER BY n.topic`

// TopicSummaries reads every topic's numbers, by name.
func (s *Store) TopicSummaries(ctx context.Context) ([]TopicSummary, error) {
	var out []TopicSummary
	if err := s.reads().NewRaw(topicSummariesSQL).Scan(ctx, &out); err != nil {
		return nil, readError("read topic summaries", err)
	}
	return out, nil
}
