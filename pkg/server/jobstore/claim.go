package jobstore

import (
	"bytes"
	"context"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// claimSQL takes up to $2 claimable jobs of the given topics in dispatch
// order (priority DESC, then FIFO) and leases each to the worker named by its
// slot in $3: the gateway passes one worker id per free slot, so a single
// statement serves every connected worker. FOR UPDATE SKIP LOCKED makes
// concurrent claims (other gateway replicas) take disjoint rows; the partial
// index jobs_claim_idx keeps the cost O(batch) at any backlog depth.
//
// The claim is the lease grant: status, attempts+1 (the fencing token),
// locked_by and lease_until change in one UPDATE, so a RUNNING row without
// a lease cannot exist.
//
// started_at is when the claim statement began, after every lock wait
// of its transaction (the gates, the topic and key limits): its snapshot
// is taken then, so a job starts after every finish the claim saw. now(),
// the transaction's start, precedes that snapshot by those waits: a job
// of a sequence would read as started before its predecessor, whose
// report committed during the wait, finished. It is never before
// submitted_at (jobs_timestamps_ordered, migration 00005): a job submitted
// with a past run_at (a schedule's occurrence) and committed during the
// wait would otherwise start before it was submitted, and the schema would
// refuse the whole claim.
//
// The claim is also where pause is enforced (ADR-0007): it takes no job
// while the global scope or the job's topic is paused in dispatch_control,
// so once a Pause commits no claim on any gateway can start a job. Both
// reads are uncorrelated subqueries that Postgres runs once per statement
// (InitPlans) through dispatch_control_paused_idx: a global pause is a
// one-time filter that skips the jobs index entirely, and a paused topic is
// one more cheap filter on the rows the ordered walk of jobs_claim_idx
// visits.
//
// claimSQL serves a group none of whose topics has a limit (ADR-0017), the
// common case, at the cost of one more one-time filter: a probe of
// topic_limits' primary key. When a topic of the group has a limit, the
// filter makes it take nothing, and Claim runs claimLimitedSQL instead.
var claimSQL = `
WITH ` + claimRange("picked", "") + `, slotted AS (
    SELECT id, row_number() OVER () AS slot FROM picked
)
` + claimUpdateSQL

// claimAfterSQL is claimSQL resuming where a claim of the same dispatcher
// left off: it walks jobs_claim_idx from just after the cursor ($5
// priority, $6 submitted_at, $7 id, the last job that claim took) instead
// of from the head (ADR-0022).
//
// A claim from the head steps over the index entries of every job claimed
// since the oldest snapshot still open anywhere in the database: Postgres
// marks an entry dead only once no snapshot can see the row it points to.
// Any long transaction — a report query, a backup, another gateway's slow
// claim — makes every claim walk every job taken since it began. Worse, a
// claim walking from the head to where the backlog begins chases the
// other gateways: each row they claim after its snapshot and before it
// gets there must be locked, found updated, and rechecked at its newest
// version, which costs far more than a step over a dead entry; a slow walk
// meets more of them and gets slower (the feedback loop the claim timeout
// bounds). Resuming after the cursor walks only what the other gateways
// took since this one's last claim, whatever the horizon.
//
// The walk is three index range scans in dispatch order, joined lazily:
// the higher priorities (priority > cursor's: a priority above the
// group's usual one is taken at once, not at the next rescan; with one
// priority in use the range is empty), the rest of the cursor's priority
// ((submitted_at, id) > cursor, one index condition), then the lower
// priorities. Postgres pulls a later range only if the earlier ones come
// back short, and locks only the rows it pulls. Jobs of the cursor's
// priority that sort before it — a retry or a scheduled job come due, a
// resumed topic's backlog, a row another claim locked and then gave back
// — are claimBeforeSQL's, which the dispatcher runs first every rescan
// interval (PULSE_CLAIM_RESCAN_INTERVAL, longer while rescans are slow,
// ADR-0050). The pause and limit filters are claimSQL's, so pause stays
// exact.
var claimAfterSQL = `
WITH ` + claimRange("higher_priority", "priority > $5::smallint") + `,
` + claimRange("same_priority", "priority = $5::smallint AND (submitted_at, id) > ($6::timestamptz, $7::uuid)") + `,
` + claimRange("lower_priority", "priority < $5::smallint") + `,
picked AS (
    SELECT id FROM higher_priority
    UNION ALL
    SELECT id FROM same_priority
    UNION ALL
    SELECT id FROM lower_priority
    LIMIT $2
), slotted AS (
    SELECT id, row_number() OVER () AS slot FROM picked
)
` + claimUpdateSQL

// claimBeforeSQL takes the claimable jobs that sort before the cursor,
// in dispatch order: the higher priorities, then the cursor's priority up
// to the cursor. It walks from the head, like claimSQL, but stops at the
// cursor instead of going on to chase the other gateways' claims where
// the backlog begins: the rows it meets were claimed before its snapshot
// (a step over each) or are the few it is there to find.
var claimBeforeSQL = `
WITH ` + claimRange("higher_priority", "priority > $5::smallint") + `,
` + claimRange("same_priority", "priority = $5::smallint AND (submitted_at, id) < ($6::timestamptz, $7::uuid)") + `,
picked AS (
    SELECT id FROM higher_priority
    UNION ALL
    SELECT id FROM same_priority
    LIMIT $2
), slotted AS (
    SELECT id, row_number() OVER () AS slot FROM picked
)
` + claimUpdateSQL

// claimRange is the CTE name: the claim's walk of jobs_claim_idx in
// dispatch order, within bound (index conditions on priority, submitted_at
// and id; empty: from the head), locking up to $2 rows as the statement
// pulls them.
func claimRange(name, bound string) string {
	if bound != "" {
		bound = "\n      AND " + bound
	}
	return name + ` AS (
    SELECT id FROM jobs
    WHERE status IN ('PENDING', 'RETRYING') AND blocked_by = 0` + bound + `
      AND next_run_at <= now()
      AND topic = ANY($1::text[])
      AND NOT EXISTS (SELECT 1 FROM topic_limits WHERE topic = ANY($1::text[]))
      AND NOT EXISTS (SELECT 1 FROM dispatch_control WHERE scope = '` + GlobalScope + `' AND paused)
      AND topic <> ALL (ARRAY(SELECT scope FROM dispatch_control WHERE paused))
    ORDER BY priority DESC, submitted_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)`
}

// claimUpdateSQL leases the slotted rows: the end of every claim statement.
// The rows are matched by j.id = ANY (ARRAY[slotted.id]) so that a plan
// made on empty statistics probes the primary key per row rather than
// reading the whole table (pinnedPlanSQL).
const claimUpdateSQL = `UPDATE jobs AS j
SET status      = 'RUNNING',
    attempts    = j.attempts + 1,
    locked_by   = ($3::text[])[slotted.slot],
    lease_until = now() + $4::interval,
    started_at  = GREATEST(statement_timestamp(), j.submitted_at)
FROM slotted
WHERE j.id = ANY (ARRAY[slotted.id])
RETURNING j.id, j.attempts, j.topic, j.args, j.priority, j.max_attempts,
          j.submitted_at, j.lease_until, j.locked_by,
          COALESCE(j.traceparent, ''), COALESCE(j.tracestate, ''),
          COALESCE((extract(epoch FROM j.timeout) * 1000000)::bigint, 0)`

// claimLimitedSQL is claimSQL for a group with limited topics (ADR-0017,
// docs/topics.md). The group's topics split in two walks of
// jobs_claim_idx:
//
//   - open_head: the topics without a row in topic_limits, claimed as
//     claimSQL claims. When every topic of the group is limited, a one-time
//     filter (like the global pause's) skips the walk: it would find
//     nothing, after reading the backlog of every other topic;
//   - limited_head: for each limited topic, its own ordered walk, LIMIT
//     max_running minus its RUNNING jobs (never below 0). The count walks
//     jobs_expired_lease_idx, the partial index of RUNNING rows: about
//     0.13 µs per job running in the fleet (docs/topics.md).
//
// picked merges both heads in dispatch order and keeps the first $2, so a
// group mixing limited and unlimited topics keeps priority and FIFO order
// across all of them, and a limited topic at its limit never holds back
// its unlimited neighbours. Rows a head locked but picked did not keep are
// released at commit.
//
// The count is exact because the statement's snapshot is taken after the
// claim holds every limited topic's advisory lock (claimLimitLocksSQL, the
// statement before this one), so it sees every RUNNING row committed by
// the previous claimer of the topic on any gateway.
var claimLimitedSQL = `
WITH limited AS MATERIALIZED (
    SELECT topic, max_running, rate_limit, rate_interval, rate_key, max_running_per_key, sequence_on_failure
    FROM topic_limits WHERE topic = ANY($1::text[])
), open_head AS (
    SELECT id, priority, submitted_at FROM jobs
    WHERE status IN ('PENDING', 'RETRYING') AND blocked_by = 0
      AND next_run_at <= now()
      AND topic = ANY($1::text[])
      AND topic <> ALL (ARRAY(SELECT topic FROM limited))
      AND EXISTS (SELECT 1 FROM unnest($1::text[]) AS g(topic) WHERE g.topic NOT IN (SELECT topic FROM limited))
      AND NOT EXISTS (SELECT 1 FROM dispatch_control WHERE scope = '` + GlobalScope + `' AND paused)
      AND topic <> ALL (ARRAY(SELECT scope FROM dispatch_control WHERE paused))
    ORDER BY priority DESC, submitted_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), limited_head AS (
    SELECT h.id, h.priority, h.submitted_at
    FROM limited AS l
    CROSS JOIN LATERAL (
        SELECT id, priority, submitted_at FROM jobs
        WHERE status IN ('PENDING', 'RETRYING') AND blocked_by = 0
          AND next_run_at <= now()
          AND topic = l.topic
        ORDER BY priority DESC, submitted_at, id
        LIMIT ` + runningRoom("l") + `
        FOR UPDATE SKIP LOCKED
    ) AS h
    WHERE l.rate_limit IS NULL AND l.max_running_per_key IS NULL AND l.sequence_on_failure IS NULL
      AND NOT EXISTS (SELECT 1 FROM dispatch_control WHERE scope = '` + GlobalScope + `' AND paused)
      AND l.topic <> ALL (ARRAY(SELECT scope FROM dispatch_control WHERE paused))
), ` + rateHeadSQL + `, ` + keyHeadSQL + `, picked_all AS (
    SELECT id, topic, ord FROM (SELECT id, priority, submitted_at, NULL::text AS topic, NULL::bigint AS ord FROM open_head
                    UNION ALL SELECT id, priority, submitted_at, NULL, NULL FROM limited_head
                    UNION ALL SELECT id, priority, submitted_at, NULL, NULL FROM rate_head
                    UNION ALL SELECT id, priority, submitted_at, topic, ord FROM key_head) AS head
    ORDER BY priority DESC, submitted_at, id
    LIMIT $2
), ` + keyPickedSQL + `, ` + rateLogSQL + `, ` + keyCursorSQL + `, slotted AS (
    SELECT id, row_number() OVER () AS slot FROM picked
)
` + strings.Replace(claimUpdateSQL, "GREATEST(now(), j.submitted_at)", "GREATEST(statement_timestamp(), j.submitted_at)", 1)

// runningRoom is how many more jobs the limited topic l (a row of
// limited) may start under its max_running, at most $2: all $2 without a
// cap. The count walks jobs_expired_lease_idx.
func runningRoom(l string) string {
	return `LEAST($2, CASE WHEN ` + l + `.max_running IS NULL THEN $2 ELSE GREATEST(` + l + `.max_running -
            (SELECT count(*) FROM jobs AS r WHERE r.status = 'RUNNING' AND r.topic = ` + l + `.topic), 0) END)`
}

// rateHeadSQL is the rate-limit step of claimLimitedSQL (ADR-0051): the
// jobs a rate-limited topic may start now, as the CTE rate_head, for
// every rate-limited topic of the group.
//
//   - rated: each rate-limited topic's room, the fewer of its max_running
//     room and, for a topic limited as a whole (rate_key 'none'), what
//     its sliding log leaves of rate_limit in the last rate_interval;
//   - rate_walk: a walk of the topic's due jobs in dispatch order, one
//     job per step (a recursive CTE), that takes a job only while its
//     key's starts in the window — the log's, plus what the walk took
//     before it — stay under rate_limit, and stops at the room. A key at
//     its limit is stepped over, never waited on: one key's limit never
//     holds back another key's jobs. Each step is two ordered probes of
//     jobs_claim_idx from the last job taken (the rest of its priority,
//     then the lower ones), as claimAfterSQL resumes;
//   - rate_head locks what the walk took, SKIP LOCKED, rechecking that
//     each job is still queued (a row another transaction changed since
//     the statement's snapshot is skipped: fewer starts, never more).
//
// The sliding log is exact for the reason max_running is: the claim holds
// the topic's advisory lock (claimLimitLocksSQL) from before this
// statement's snapshot until it commits, so it sees every start the
// topic's previous claims logged, on any gateway. Its stamps are the claim
// statement's start (statement_timestamp(), which also becomes the jobs'
// started_at), taken after the lock is granted: the stamps of one topic
// only grow, so pruning what the window has passed never drops an entry a
// later claim would count.
var rateHeadSQL = `rated AS MATERIALIZED (
    SELECT l.topic, l.rate_limit, l.rate_interval, l.rate_key = 'none' AS whole,
           LEAST(` + runningRoom("l") + `,
                 CASE WHEN l.rate_key = 'none' THEN GREATEST(l.rate_limit - (
                     SELECT count(*) FROM topic_rate_log AS g
                     WHERE g.topic = l.topic AND g.key = '' AND g.started_at > statement_timestamp() - l.rate_interval), 0)
                 ELSE $2 END) AS room
    FROM limited AS l
    WHERE l.rate_limit IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM dispatch_control WHERE scope = '` + GlobalScope + `' AND paused)
      AND l.topic <> ALL (ARRAY(SELECT scope FROM dispatch_control WHERE paused))
), rate_walk AS (
    WITH RECURSIVE walk AS (
        SELECT r.topic, r.rate_limit, r.rate_interval, r.whole, r.room,
               n.id, n.priority, n.submitted_at, n.key, 1 AS taken, jsonb_build_object(n.key, 1) AS per_key
        FROM rated AS r
        CROSS JOIN LATERAL (` + rateNextSQL("r", "'{}'::jsonb", "") + `) AS n
        WHERE r.room > 0
        UNION ALL
        SELECT w.topic, w.rate_limit, w.rate_interval, w.whole, w.room,
               n.id, n.priority, n.submitted_at, n.key, w.taken + 1,
               w.per_key || jsonb_build_object(n.key, COALESCE((w.per_key ->> n.key)::int, 0) + 1)
        FROM walk AS w
        CROSS JOIN LATERAL (` + rateNextSQL("w", "w.per_key", "w") + `) AS n
        WHERE w.taken < w.room
    )
    SELECT topic, id, key FROM walk
), rate_head AS (
    SELECT j.id, j.priority, j.submitted_at, w.topic, w.key
    FROM jobs AS j JOIN rate_walk AS w ON j.id = ANY (ARRAY[w.id])
    WHERE j.status IN ('PENDING', 'RETRYING') AND j.blocked_by = 0
    FOR UPDATE OF j SKIP LOCKED
)`

// rateNextSQL is one step of rate_walk: the first due job of the topic of
// r in dispatch order, after the job the walk last took (after: its alias,
// or "" to start at the head), whose key still has room in the window,
// counting the walk's own starts so far (perKey, a jsonb of key → count).
// A job's key is its rate_key, or the empty key when it has none or its
// topic is limited as a whole.
func rateNextSQL(r, perKey, after string) string {
	cand := func(bound, order string) string {
		return `(SELECT c.id, c.priority, c.submitted_at, c.key FROM (
                SELECT j.id, j.priority, j.submitted_at,
                       CASE WHEN ` + r + `.whole THEN '' ELSE COALESCE(j.rate_key, '') END AS key
                FROM jobs AS j
                WHERE j.status IN ('PENDING', 'RETRYING') AND j.blocked_by = 0 AND j.next_run_at <= now() AND j.topic = ` + r + `.topic` + bound + `
                ORDER BY ` + order + `) AS c
            WHERE ` + r + `.whole OR COALESCE((` + perKey + ` ->> c.key)::int, 0) + (
                SELECT count(*) FROM topic_rate_log AS g
                WHERE g.topic = ` + r + `.topic AND g.key = c.key AND g.started_at > statement_timestamp() - ` + r + `.rate_interval
            ) < ` + r + `.rate_limit
            LIMIT 1)`
	}
	if after == "" {
		return cand("", "j.priority DESC, j.submitted_at, j.id")
	}
	return `SELECT * FROM (` +
		cand(`
                  AND j.priority = `+after+`.priority AND (j.submitted_at, j.id) > (`+after+`.submitted_at, `+after+`.id)`,
			"j.submitted_at, j.id") + `
            UNION ALL ` +
		cand(`
                  AND j.priority < `+after+`.priority`, "j.priority DESC, j.submitted_at, j.id") + `) AS nxt
            LIMIT 1`
}

// rateLogSQL writes the rate-limited starts of the claim to the sliding
// log, stamped as their started_at, and prunes each rate-limited topic's
// entries the window has passed (topic_rate_log_prune_idx): in the claim's
// transaction, under the topic's advisory lock.
const rateLogSQL = `rate_logged AS (
    INSERT INTO topic_rate_log (topic, key, started_at)
    SELECT h.topic, h.key, GREATEST(statement_timestamp(), h.submitted_at)
    FROM rate_head AS h WHERE h.id IN (SELECT id FROM picked)
), rate_pruned AS (
    DELETE FROM topic_rate_log AS g USING rated AS r
    WHERE g.topic = r.topic AND g.started_at <= statement_timestamp() - r.rate_interval
)`

// TopicLimitLockSpace is the first key of every topic limit's advisory
// lock, pg_advisory_xact_lock(TopicLimitLockSpace, hashtext(topic)): the
// two-key form, so it can never collide with the pause barrier's one-key
// lock. Applications sharing pulse's database must not use two-key
// advisory locks in this space.
const TopicLimitLockSpace = "1886743667" // 0x70756c73, "puls"

// claimLimitLocksSQL serialises the claims of each limited topic in the
// group, on every gateway: it takes the topic's exclusive advisory lock,
// held until the claim commits. It runs after the pause barrier and before
// the claim statement, as a statement of its own, because a READ COMMITTED
// statement takes its snapshot when it starts: the claim statement,
// starting after the lock is granted, sees the RUNNING rows of the claim
// that held it before. A lock taken inside the claim statement would come
// after that statement's snapshot, too late.
//
// Which topics are limited cannot change between this statement and the
// claim's: a change of topic_limits takes the pause barrier exclusively
// (SetTopicLimit, and migration 00009's trigger), and the claim holds it
// shared from its first statement until it commits. So the claim locks
// exactly the limited topics its claim statement caps.
//
// Locks are taken in key order (the subquery's ORDER BY, which Postgres
// does not flatten; a lock-taking target list above it runs in that
// order), so two claims never wait on each other in a cycle, even when two
// topics hash to one key (they then merely share a lock). A group with no
// limited topic takes no lock: the statement is one primary-key probe of
// topic_limits that finds nothing. It returns how many locks it took, which
// tells Claim which claim statement applied.
const claimLimitLocksSQL = `
SELECT count(pg_advisory_xact_lock(` + TopicLimitLockSpace + `, key))
FROM (SELECT DISTINCT hashtext(topic) AS key FROM topic_limits WHERE topic = ANY($1::text[]) ORDER BY 1) AS limited`

// claimPlanSQL is pinnedPlanSQL (the quiet window's gate first, so that
// a claim waiting at a closed gate holds back no Pause) plus the claim's side of the pause
// barrier: a shared advisory lock on PauseBarrierKey, held until the claim
// commits. Every pause and resume takes the same lock exclusively before it
// writes (controlTx), so:
//
//   - a claim already running when a Pause begins holds the lock; the Pause
//     waits for it to commit, so it commits before the Pause does, and
//     before Pause returns;
//   - a claim that arrives while a Pause holds or awaits the lock waits for
//     the Pause to commit, and its statement — a separate statement in the
//     same transaction, so with a snapshot taken after the lock was granted
//     — sees the pause and takes nothing of the paused scope.
//
// No claim of a paused scope commits after the Pause commits. Shared
// advisory locks live in the lock manager's memory (no row is written, no
// WAL): on the happy path the barrier costs one lock-table entry per claim.
//
// The claim's later statements run under ClaimStatementTimeout. A claim
// takes milliseconds; one that runs for seconds has fallen into a
// feedback loop seen under load (docs/benchmarks.md): its snapshot is
// older than every claim the other gateways committed since, so each row
// it reaches at the head of jobs_claim_idx was taken by them and must be
// rechecked at its newest version, and while its snapshot lives no scan
// can mark those entries dead, so every other claim from the head walks
// them too. Claims resuming after a cursor (claimAfterSQL) do not walk
// them; a claim from the head still can. The timeout ends such a claim;
// the dispatcher backs off and claims again with a fresh snapshot. It
// also bounds how long a Pause waits for the claims in flight.
const claimPlanSQL = `SELECT pg_advisory_xact_lock_shared(` + JobsGateKey + `), set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true), set_config('statement_timeout', '` + claimStatementTimeoutSQL + `', true), pg_advisory_xact_lock_shared(` + PauseBarrierKey + `)`

// ClaimStatementTimeout bounds each statement of a claim after the first.
const ClaimStatementTimeout = time.Second

const claimStatementTimeoutSQL = "1s" // ClaimStatementTimeout, as Postgres reads it

// Claim leases up to len(slots) claimable jobs of topics, the i-th claimed
// job to the worker slots[i]. It returns what it claimed, which may be
// fewer than the slots (or none): a limited topic at its limit gives none.
//
// A group without limited topics is one round trip: the pause barrier,
// the limit locks (none) and claimSQL, as one pipelined batch (one
// implicit transaction). When the lock statement took locks, claimSQL took
// nothing, and the claim runs again with claimLimitedSQL: limited topics
// pay a second round trip, so that the others pay no more than a probe of
// topic_limits.
func (s *Store) Claim(ctx context.Context, topics []string, slots []string, leaseTTL time.Duration) ([]pulsetype.Claimed, error) {
	if len(slots) == 0 || len(topics) == 0 {
		return nil, nil
	}
	args := []any{topics, len(slots), slots, intervalOf(leaseTTL)}
	out, limited, err := s.claimWith(ctx, claimSQL, args)
	if err == nil && limited > 0 {
		out, err = s.claimLimited(ctx, args)
	}
	if err != nil {
		return nil, interpretError("claim", err)
	}
	return out, nil
}

// ClaimCursor is a position in dispatch order (priority DESC, then
// submitted_at and id): the last job a claim took, where the next claim of
// the same dispatcher may resume (ClaimAfter).
type ClaimCursor struct {
	Priority    int16
	SubmittedAt time.Time
	ID          uuid.UUID
}

// Before reports whether c comes before d in dispatch order.
func (c ClaimCursor) Before(d ClaimCursor) bool {
	if c.Priority != d.Priority {
		return c.Priority > d.Priority
	}
	if !c.SubmittedAt.Equal(d.SubmittedAt) {
		return c.SubmittedAt.Before(d.SubmittedAt)
	}
	return bytes.Compare(c.ID[:], d.ID[:]) < 0 // Postgres orders uuids bytewise
}

// ClaimSkewMargin is how far before its cursor a resumed claim starts
// (ClaimCursor.Back): an INSERT reads its clock (submitted_at) when its
// statement begins and becomes visible at its commit, so a job can commit
// just after a claim took a job submitted later than it (ADR-0050).
const ClaimSkewMargin = 25 * time.Millisecond

// Back is c moved earlier by d within its priority, before every job
// submitted at that instant: where a claim resuming after c starts so
// that it also finds the jobs whose INSERT read its clock up to d before
// c's and committed after the claim that took c (ADR-0050).
func (c ClaimCursor) Back(d time.Duration) ClaimCursor {
	return ClaimCursor{Priority: c.Priority, SubmittedAt: c.SubmittedAt.Add(-d)}
}

// LastClaimed is the cursor after the last of jobs in dispatch order; ok
// is false when jobs is empty.
func LastClaimed(jobs []pulsetype.Claimed) (last ClaimCursor, ok bool) {
	for i, j := range jobs {
		c := ClaimCursor{Priority: j.Priority, SubmittedAt: j.SubmittedAt, ID: j.ID}
		if i == 0 || last.Before(c) {
			last = c
		}
	}
	return last, len(jobs) > 0
}

// ClaimAfter is Claim resuming after the cursor where an earlier claim left
// off (claimAfterSQL): it takes the claimable jobs that follow after in
// dispatch order, in one statement, and comes back short when fewer
// follow than there are slots. What sorts before the cursor is a rescan's
// (ClaimBefore), which the dispatcher runs on its own schedule: looking
// before the cursor on every short claim would walk, at every claim of an
// idle-ish queue, every job claimed since the oldest open snapshot
// (ADR-0050). A group with a limited topic is claimed as Claim claims it.
func (s *Store) ClaimAfter(ctx context.Context, topics []string, slots []string, leaseTTL time.Duration, after ClaimCursor) ([]pulsetype.Claimed, error) {
	return s.claimAround(ctx, topics, slots, leaseTTL, after, claimAfterSQL, "")
}

// ClaimBefore is ClaimAfter the other way round, a rescan: the claimable
// jobs that sort before the cursor first (claimBeforeSQL), then, when
// those are fewer than the slots, the rest from after it.
func (s *Store) ClaimBefore(ctx context.Context, topics []string, slots []string, leaseTTL time.Duration, at ClaimCursor) ([]pulsetype.Claimed, error) {
	return s.claimAround(ctx, topics, slots, leaseTTL, at, claimBeforeSQL, claimAfterSQL)
}

// claimAround claims with the statement first around the cursor, then
// with second (if any) for the slots first left free, each in its own
// transaction, so the second's snapshot is fresh. If the second fails after the first
// took jobs, the jobs taken are returned without the error: they are
// leased and must reach their workers. The claim came back short, so the
// dispatcher's next claim of the group starts from the head and meets the
// error itself.
func (s *Store) claimAround(ctx context.Context, topics []string, slots []string, leaseTTL time.Duration, at ClaimCursor, first, second string) ([]pulsetype.Claimed, error) {
	if len(slots) == 0 || len(topics) == 0 {
		return nil, nil
	}
	args := []any{topics, len(slots), slots, intervalOf(leaseTTL), at.Priority, at.SubmittedAt, [16]byte(at.ID)}
	out, limited, err := s.claimWith(ctx, first, args)
	if err != nil {
		return nil, interpretError("claim", err)
	}
	if limited > 0 {
		// The group has a limited topic, so first took nothing: claim it
		// as Claim does, from the head.
		out, err = s.claimLimited(ctx, args[:4])
		if err != nil {
			return nil, interpretError("claim", err)
		}
		return out, nil
	}
	if len(out) == len(slots) || second == "" {
		return out, nil
	}
	rest := slots[len(out):]
	args[1], args[2] = len(rest), rest
	more, _, err := s.claimWith(ctx, second, args)
	if err != nil {
		if len(out) == 0 {
			return nil, interpretError("claim", err)
		}
		return out, nil
	}
	return append(out, more...), nil
}

// claimWith runs one claim batch with the claim statement sql and returns
// what it claimed and how many limit locks it took.
func (s *Store) claimWith(ctx context.Context, sql string, args []any) ([]pulsetype.Claimed, int64, error) {
	b := &pgx.Batch{}
	b.Queue(claimPlanSQL)
	b.Queue(claimLimitLocksSQL, args[0])
	b.Queue(sql, args...)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, 0, err
	}
	var limited int64
	if err := br.QueryRow().Scan(&limited); err != nil {
		return nil, 0, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	out := make([]pulsetype.Claimed, 0, args[1].(int))
	for rows.Next() {
		var c pulsetype.Claimed
		var timeoutMicros int64
		// Args scans as plain bytes: pgx decodes jsonb into a json.RawMessage
		// through encoding/json (a full parse per job), into a []byte by
		// copying. Postgres's jsonb text is valid JSON; the bytes are the same.
		if err := rows.Scan(uuidDest(&c.ID), &c.Attempt, &c.Topic, (*[]byte)(&c.Args), &c.Priority, &c.MaxAttempts,
			&c.SubmittedAt, &c.LeaseUntil, &c.WorkerID, &c.TraceParent, &c.TraceState, &timeoutMicros); err != nil {
			return nil, 0, err
		}
		c.Timeout = time.Duration(timeoutMicros) * time.Microsecond
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	rows.Close()
	return out, limited, br.Close()
}
