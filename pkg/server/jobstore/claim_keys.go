package jobstore

import "strconv"

// KeyLanesPerClaim is the most lanes (concurrency keys, sequence keys and
// the lane of jobs with neither) one claim of a keyed topic visits
// (ADR-0054). A topic with more lanes than this is served one job per
// lane per claim, rotating on from where the last claim ended, so the
// fairness bound holds at any number of keys while a claim's cost stays
// O(KeyLanesPerClaim).
const KeyLanesPerClaim = 256

// unkeyedWindow is how many of a keyed topic's due jobs, in dispatch
// order, the claim looks through for the jobs with neither key: they are
// not in the keyed indexes, so they are found on jobs_claim_idx, and a
// backlog of keyed jobs ahead of them is stepped over only this far.
const unkeyedWindow = 256

// keyHeadSQL is the per-key step of claimLimitedSQL (ADR-0054): the jobs
// a keyed topic (one with max_running_per_key or a sequence policy) may
// start now, as the CTE key_head, for every keyed topic of the group.
//
// A keyed topic's jobs fall into lanes: one per concurrency key ('c' and
// the key), one per sequence key of the jobs without a concurrency key
// ('s' and the key), and the lane of the jobs with neither (the empty string). The
// claim serves the lanes round-robin, carried across claims:
//
//   - keyed: each keyed topic's room (its max_running room, at most $2)
//     and where its last claim ended (topic_key_cursors.last_lane,
//     written under the topic's advisory lock, so shared by every
//     gateway);
//   - c_scan, s_scan: loose index scans (recursive CTEs jumping from key to
//     key on jobs_concurrency_due_idx and jobs_sequence_idx: O(keys), not
//     O(backlog)) over the lanes after the cursor, then from the first
//     lane up to it, at most KeyLanesPerClaim+1 of each;
//   - lanes: the lanes in rotation order (after the cursor first), the
//     first KeyLanesPerClaim of them; more than that makes the claim
//     truncated, and a truncated claim takes one job per lane;
//   - key_cand: per lane its next jobs, numbered rn within the lane: a
//     concurrency key's up to max_running_per_key minus its RUNNING jobs
//     (jobs_concurrency_running_idx), each in dispatch order and, when it
//     is sequenced too, only as its sequence's head; a sequence's head
//     (the first unfinished job in submit order: pending, retrying,
//     running, or — under 'block' — dead-lettered), when it is due and
//     none of the sequence runs; the unkeyed jobs among the topic's first
//     unkeyedWindow due jobs;
//   - key_ranked keeps the first room of them by (rn, lane's place in the
//     rotation): every lane's next job before any lane's following one;
//   - key_head locks them SKIP LOCKED, rechecking each is still queued.
//
// picked (keyPickedSQL) keeps a prefix of each topic's ranking, and
// key_moved (keyCursorSQL) moves the cursor to the last lane served.
var keyHeadSQL = `keyed AS MATERIALIZED (
    SELECT l.topic, l.max_running_per_key AS per_key, l.sequence_on_failure AS on_failure,
           ` + runningRoom("l") + ` AS room,
           COALESCE((SELECT c.last_lane FROM topic_key_cursors AS c WHERE c.topic = l.topic), '') COLLATE "C" AS cur
    FROM limited AS l
    WHERE (l.max_running_per_key IS NOT NULL OR l.sequence_on_failure IS NOT NULL)
      AND NOT EXISTS (SELECT 1 FROM dispatch_control WHERE scope = '` + GlobalScope + `' AND paused)
      AND l.topic <> ALL (ARRAY(SELECT scope FROM dispatch_control WHERE paused))
), c_scan AS (` + laneScanSQL("c", "concurrency_key", "j.status IN ('PENDING', 'RETRYING') AND j.blocked_by = 0") + `
), s_scan AS (` + laneScanSQL("s", "sequence_key", "j.status IN ('PENDING', 'RETRYING', 'RUNNING', 'DEAD_LETTERED')") + `
), lanes AS MATERIALIZED (
    SELECT v.topic, v.lane, v.ord, v.truncated FROM (
        SELECT x.topic, x.lane,
               row_number() OVER (PARTITION BY x.topic ORDER BY x.lane <= k.cur, x.lane) AS ord,
               count(*) OVER (PARTITION BY x.topic) > ` + lanesPerClaim + ` AS truncated
        FROM (SELECT topic, 'c' || key AS lane FROM c_scan
              UNION ALL SELECT topic, 's' || key FROM s_scan
              UNION ALL SELECT topic, ''::text COLLATE "C" FROM keyed) AS x
        JOIN keyed AS k USING (topic)) AS v
    WHERE v.ord <= ` + lanesPerClaim + `
), key_cand AS MATERIALIZED (
    SELECT v.topic, v.lane, v.ord AS lane_ord, c.rn, c.id
    FROM lanes AS v JOIN keyed AS k USING (topic)
    CROSS JOIN LATERAL (
        SELECT w.id, row_number() OVER () AS rn FROM (
            SELECT j.id FROM jobs AS j
            WHERE left(v.lane, 1) = 'c'
              AND j.topic = v.topic AND j.concurrency_key IS NOT NULL AND j.concurrency_key COLLATE "C" = substr(v.lane, 2)
              AND j.status IN ('PENDING', 'RETRYING') AND j.blocked_by = 0 AND j.next_run_at <= now()
              AND (j.sequence_key IS NULL OR ` + sequenceFreeSQL("j", "k") + `)
            ORDER BY j.priority DESC, j.submitted_at, j.id
            LIMIT CASE WHEN v.truncated THEN LEAST(k.room, 1)
                       WHEN k.per_key IS NULL THEN k.room
                       ELSE LEAST(k.room, GREATEST(k.per_key - (
                           SELECT count(*) FROM jobs AS r
                           WHERE r.topic = v.topic AND r.concurrency_key IS NOT NULL
                             AND r.concurrency_key COLLATE "C" = substr(v.lane, 2) AND r.status = 'RUNNING'), 0)) END
        ) AS w
        UNION ALL
        SELECT h.id, 1 FROM (
            SELECT j.id, j.status, j.blocked_by, j.next_run_at, j.concurrency_key FROM jobs AS j
            WHERE left(v.lane, 1) = 's'
              AND j.topic = v.topic AND j.sequence_key IS NOT NULL AND j.sequence_key COLLATE "C" = substr(v.lane, 2)
              AND j.status IN ('PENDING', 'RETRYING', 'RUNNING', 'DEAD_LETTERED')
              AND (j.status <> 'DEAD_LETTERED' OR k.on_failure = 'block')
            ORDER BY j.sequence_key COLLATE "C", j.sequence_pos
            LIMIT 1
        ) AS h
        WHERE h.status IN ('PENDING', 'RETRYING') AND h.blocked_by = 0 AND h.next_run_at <= now()
          AND h.concurrency_key IS NULL AND k.room > 0
          AND NOT EXISTS (SELECT 1 FROM jobs AS r
                          WHERE r.topic = v.topic AND r.sequence_key IS NOT NULL
                            AND r.sequence_key COLLATE "C" = substr(v.lane, 2) AND r.status = 'RUNNING')
        UNION ALL
        SELECT u.id, row_number() OVER () FROM (
            SELECT w.id FROM (
                SELECT j.id, j.concurrency_key, j.sequence_key FROM jobs AS j
                WHERE v.lane = ''
                  AND j.status IN ('PENDING', 'RETRYING') AND j.blocked_by = 0 AND j.next_run_at <= now()
                  AND j.topic = v.topic
                ORDER BY j.priority DESC, j.submitted_at, j.id
                LIMIT ` + strconv.Itoa(unkeyedWindow) + `
            ) AS w
            WHERE w.concurrency_key IS NULL AND w.sequence_key IS NULL
            LIMIT CASE WHEN v.truncated THEN LEAST(k.room, 1) ELSE k.room END
        ) AS u
    ) AS c
), key_ranked AS (
    SELECT r.topic, r.lane, r.id, r.ord FROM (
        SELECT c.topic, c.lane, c.id, row_number() OVER (PARTITION BY c.topic ORDER BY c.rn, c.lane_ord) AS ord
        FROM key_cand AS c) AS r
    JOIN keyed AS k USING (topic)
    WHERE r.ord <= k.room
), key_head AS (
    SELECT j.id, j.priority, j.submitted_at, r.topic, r.lane, r.ord
    FROM jobs AS j JOIN key_ranked AS r ON j.id = ANY (ARRAY[r.id])
    WHERE j.status IN ('PENDING', 'RETRYING') AND j.blocked_by = 0
    FOR UPDATE OF j SKIP LOCKED
)`

var lanesPerClaim = strconv.Itoa(KeyLanesPerClaim)

// laneScanSQL is the loose index scan of one kind of lane (prefix "c" on
// column concurrency_key, "s" on sequence_key) of every keyed topic, in
// rotation order: part 0 the keys after the cursor, part 1 the keys from
// the first up to the cursor, each at most KeyLanesPerClaim+1 keys, one
// index probe per key. rows is the index's predicate on j.
func laneScanSQL(prefix, column, rows string) string {
	next := func(t, after, hi string) string {
		return `(SELECT j.` + column + ` COLLATE "C" FROM jobs AS j
                 WHERE j.topic = ` + t + ` AND ` + rows + ` AND j.` + column + ` IS NOT NULL
                   AND j.` + column + ` COLLATE "C" > ` + after + `
                   AND (` + hi + ` IS NULL OR j.` + column + ` COLLATE "C" <= ` + hi + `)
                 ORDER BY j.` + column + ` COLLATE "C" LIMIT 1)`
	}
	return `
    WITH RECURSIVE scan AS (
        SELECT seed.topic, 1 AS n, seed.hi, ` + next("seed.topic", "seed.after", "seed.hi") + ` AS key
        FROM (SELECT k.topic, CASE WHEN left(k.cur, 1) = '` + prefix + `' THEN substr(k.cur, 2)
                                   WHEN k.cur < '` + prefix + `' THEN '' END COLLATE "C" AS after,
                     NULL::text COLLATE "C" AS hi
              FROM keyed AS k
              UNION ALL
              SELECT k.topic, ''::text COLLATE "C",
                     CASE WHEN left(k.cur, 1) = '` + prefix + `' THEN substr(k.cur, 2) END COLLATE "C"
              FROM keyed AS k WHERE k.cur >= '` + prefix + `') AS seed
        WHERE seed.after IS NOT NULL
        UNION ALL
        SELECT s.topic, s.n + 1, s.hi, ` + next("s.topic", "s.key", "s.hi") + `
        FROM scan AS s WHERE s.key IS NOT NULL AND s.n <= ` + lanesPerClaim + `
    )
    SELECT topic, key FROM scan WHERE key IS NOT NULL`
}

// sequenceFreeSQL is true when the sequenced job j of the keyed topic k
// is its sequence's head and none of its sequence runs: no job of its
// sequence key before it is unfinished (pending, retrying, running, or
// dead-lettered under 'block'), and none after it runs (a retried job
// can be behind a running one).
func sequenceFreeSQL(j, k string) string {
	return `NOT EXISTS (SELECT 1 FROM jobs AS p
                WHERE p.topic = ` + j + `.topic AND p.sequence_key IS NOT NULL
                  AND p.sequence_key COLLATE "C" = ` + j + `.sequence_key COLLATE "C"
                  AND p.status IN ('PENDING', 'RETRYING', 'RUNNING', 'DEAD_LETTERED')
                  AND (p.status = 'RUNNING'
                       OR (p.sequence_pos < ` + j + `.sequence_pos AND (p.status <> 'DEAD_LETTERED' OR ` + k + `.on_failure = 'block'))))`
}

// keyPickedSQL is claimLimitedSQL's picked: the first $2 of every head in
// dispatch order (picked_all), less any keyed job ranked after one of its
// topic's that picked_all left out, so the jobs a keyed topic starts are
// always a prefix of its rotation: a lane never loses its turn to the
// merge with the group's other topics.
const keyPickedSQL = `picked AS (
    SELECT p.id FROM picked_all AS p
    WHERE p.ord IS NULL OR p.ord < COALESCE((
        SELECT min(h.ord) FROM key_head AS h
        WHERE h.topic = p.topic AND h.id NOT IN (SELECT id FROM picked_all)), 9223372036854775807)
)`

// keyCursorSQL moves each keyed topic's rotation cursor: to the last lane
// the claim started a job of, or, when it started every job it found (or
// found none), to the last lane it visited, so that a topic with more
// lanes than a claim visits moves on through them.
const keyCursorSQL = `key_moved AS (
    INSERT INTO topic_key_cursors AS c (topic, last_lane)
    SELECT m.topic, m.lane FROM (
        SELECT k.topic,
               CASE WHEN (SELECT count(*) FROM key_cand AS a WHERE a.topic = k.topic)
                         = (SELECT count(*) FROM key_head AS h WHERE h.topic = k.topic AND h.id IN (SELECT id FROM picked))
                    THEN (SELECT v.lane FROM lanes AS v WHERE v.topic = k.topic ORDER BY v.ord DESC LIMIT 1)
                    ELSE (SELECT h.lane FROM key_head AS h
                          WHERE h.topic = k.topic AND h.id IN (SELECT id FROM picked)
                          ORDER BY h.ord DESC LIMIT 1) END AS lane
        FROM keyed AS k) AS m
    WHERE m.lane IS NOT NULL
    ON CONFLICT (topic) DO UPDATE SET last_lane = EXCLUDED.last_lane
    WHERE c.last_lane IS DISTINCT FROM EXCLUDED.last_lane
)`
