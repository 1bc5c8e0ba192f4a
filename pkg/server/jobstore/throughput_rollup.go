package jobstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// DefaultWriter is the job_throughput writer of a Store built without
// [ThroughputWriter] (tests, tools). The services name themselves.
const DefaultWriter = "unnamed"

// MaxWriterLength is the longest writer name job_throughput stores
// (job_throughput_writer), in characters.
const MaxWriterLength = 200

// ThroughputWriter names the process whose report and reap statements add
// to job_throughput: a gateway its gateway id, the reaper its reaper id.
// Each writer adds to its own rows, so replicas never wait on each other's
// row locks (migration 00011). id must pass [ValidWriter]: a name
// job_throughput refuses would fail every statement that settles an
// attempt, so the services check it with their configuration.
func ThroughputWriter(id string) Option {
	return func(s *Store) { s.writer = id }
}

// ValidWriter checks a writer name as job_throughput_writer does: not
// empty, at most MaxWriterLength characters, text Postgres can store. The
// error says what is wrong; the caller names the setting.
func ValidWriter(id string) error {
	switch n := utf8.RuneCountInString(id); {
	case id == "":
		return errors.New("must not be empty")
	case n > MaxWriterLength:
		return fmt.Errorf("is %d characters; the limit is %d", n, MaxWriterLength)
	case !utf8.ValidString(id) || strings.ContainsRune(id, 0):
		return errors.New("must be UTF-8 text without NUL characters")
	}
	return nil
}

// countSettledSQL adds the attempts a statement settled to job_throughput,
// in that same statement: a data-modifying CTE over the CTE settled (the
// RETURNING of the fenced UPDATE, so only transitions that happened are
// counted), one row per topic in the current minute for this writer ($%d).
// Inside the statement it commits or rolls back with the transitions it
// counts: a report split by Isolate counts each part it settled, once.
//
// COMPLETED counts as completed; RETRYING and DEAD_LETTERED as failed, and
// DEAD_LETTERED as dead_lettered too. A snooze (PENDING) settled nothing:
// the attempt was given back, not spent, and is not counted. The rows go in sorted by key
// (bucket and writer are the same for the whole statement, so by topic),
// so two statements of one writer lock shared rows in one order and cannot
// deadlock. A row already there is added to (ON CONFLICT ... DO UPDATE);
// GROUP BY makes each key appear once, as ON CONFLICT requires. Nothing
// about one job can make this part fail: its values are counts, a topic
// the jobs table already holds, and the writer the service checked at
// start (ValidWriter).
const countSettledSQL = `
counted AS (
    INSERT INTO job_throughput AS t (bucket, topic, writer, completed, failed, dead_lettered)
    SELECT date_trunc('minute', now(), 'UTC'), s.topic, $%d::text,
           count(*) FILTER (WHERE s.status = 'COMPLETED'),
           count(*) FILTER (WHERE s.status <> 'COMPLETED'),
           count(*) FILTER (WHERE s.status = 'DEAD_LETTERED')
    FROM settled AS s
    WHERE s.status <> 'PENDING'
    GROUP BY s.topic
    ORDER BY s.topic
    ON CONFLICT (bucket, topic, writer) DO UPDATE
    SET completed     = t.completed + EXCLUDED.completed,
        failed        = t.failed + EXCLUDED.failed,
        dead_lettered = t.dead_lettered + EXCLUDED.dead_lettered
)`

// countSettled is countSettledSQL with the writer as parameter n.
func countSettled(n int) string { return fmt.Sprintf(countSettledSQL, n) }

// deleteThroughputSQL removes at most $2 job_throughput rows whose minute
// began more than $1 ago, oldest first, walking the primary key (bucket
// leads it). Only old minutes are deleted and no statement adds to them,
// so this never waits on a report; SKIP LOCKED lets several reapers prune
// side by side.
const deleteThroughputSQL = `
DELETE FROM job_throughput
WHERE (bucket, topic, writer) IN (
        SELECT bucket, topic, writer FROM job_throughput
        WHERE bucket < now() - $1::interval
        ORDER BY bucket
        LIMIT $2
        FOR UPDATE SKIP LOCKED)`

// DeleteThroughput deletes up to limit job_throughput rows (one per
// minute, topic and writer) older than olderThan and returns how many it
// deleted; a count below limit means nothing more is due now.
func (s *Store) DeleteThroughput(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	switch {
	case olderThan < 0:
		return 0, apierr.Invalid("older_than", "must not be negative, got %s", olderThan)
	case limit < 1:
		return 0, apierr.Invalid("limit", "must be at least 1, got %d", limit)
	}
	tag, err := s.pool.Exec(ctx, deleteThroughputSQL, intervalOf(olderThan), limit)
	if err != nil {
		return 0, interpretError("delete throughput", err)
	}
	return tag.RowsAffected(), nil
}
