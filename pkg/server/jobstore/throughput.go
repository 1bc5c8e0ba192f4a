package jobstore

import (
	"context"
	"time"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// The throughput rollup's read side (migration 00011, ADR-0019): the
// statements that settle attempts count them per minute, topic and writer
// in job_throughput; the dashboard's chart and per-topic numbers read a
// few hundred of those rows, never the jobs table.

// ThroughputMaxBuckets bounds one read: a chart has at most this many
// points.
const ThroughputMaxBuckets = 1440

// ThroughputQuery selects a series of equal buckets ending at End.
type ThroughputQuery struct {
	// Topic limits the sums to one topic; "" sums every topic.
	Topic string
	// Step is a bucket's width: whole minutes, at least one.
	Step time.Duration
	// Buckets is how many buckets, 1..ThroughputMaxBuckets.
	Buckets int
	// End is where the last bucket ends (exclusive), on a minute
	// boundary. Zero is the end of the database's current minute, so the
	// minute still being counted is the last point: the rollup's writers
	// stamp their rows with the database's clock, and so does the read.
	End time.Time
}

// ThroughputPoint is one bucket: attempts settled from Start to
// Start+Step, summed over topics (unless one is chosen) and writers.
type ThroughputPoint struct {
	Start     time.Time `bun:"start"`
	Completed int64     `bun:"completed"`
	// Failed counts failed attempts, retried or dead lettered.
	Failed int64 `bun:"failed"`
	// DeadLettered is the part of Failed that dead lettered its job.
	DeadLettered int64 `bun:"dead_lettered"`
}

// throughputSQL is one row per bucket, zero-filled: the series of bucket
// starts comes from generate_series, and each picks up the rollup rows
// inside it (a range scan of the primary key, whose first column is the
// minute) summed over topics and writers. Arguments: end (NULL: the end
// of the current minute), buckets, step, and the topic (the empty string for all).
const throughputSQL = `
WITH bounds AS (
    SELECT COALESCE(?::timestamptz, date_trunc('minute', now()) + interval '1 minute') AS stop,
           ?::int AS buckets, ?::interval AS step, ?::text AS topic
), series AS (
    SELECT b.stop - (b.buckets - n) * b.step AS start, b.step, b.topic
    FROM bounds b, generate_series(0, b.buckets - 1) AS n
)
SELECT s.start,
       COALESCE(sum(t.completed), 0)::bigint     AS completed,
       COALESCE(sum(t.failed), 0)::bigint        AS failed,
       COALESCE(sum(t.dead_lettered), 0)::bigint AS dead_lettered
FROM series s
LEFT JOIN job_throughput t
       ON t.bucket >= s.start AND t.bucket < s.start + s.step
      AND (s.topic = '' OR t.topic = s.topic)
GROUP BY s.start
ORDER BY s.start`

// Throughput reads q's buckets oldest first, one point per bucket, zero
// where nothing settled.
func (s *Store) Throughput(ctx context.Context, q ThroughputQuery) ([]ThroughputPoint, error) {
	switch {
	case q.Step < time.Minute || q.Step%time.Minute != 0:
		return nil, apierr.Invalid("step", "is %s; it must be a whole number of minutes", q.Step)
	case q.Buckets < 1 || q.Buckets > ThroughputMaxBuckets:
		return nil, apierr.Invalid("buckets", "is %d; it must be between 1 and %d", q.Buckets, ThroughputMaxBuckets)
	case !q.End.IsZero() && !q.End.Equal(q.End.Truncate(time.Minute)):
		return nil, apierr.Invalid("end", "is %s; it must be on a minute boundary", q.End.UTC().Format(time.RFC3339Nano))
	}
	var end *time.Time
	if !q.End.IsZero() {
		e := q.End.UTC()
		end = &e
	}
	points := make([]ThroughputPoint, 0, q.Buckets)
	err := s.reads().NewRaw(throughputSQL, end, q.Buckets, intervalOf(q.Step), q.Topic).Scan(ctx, &points)
	if err != nil {
		return nil, readError("read throughput", err)
	}
	return points, nil
}
