package scenario

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

// SoakParams shape the soak: a steady rate for Duration, finished jobs
// deleted by each queue's own cleaner once RetentionAge old, and a
// transaction holding a snapshot open (an analytics query) from
// SnapshotAt for SnapshotFor, where queues on Postgres usually die: no
// row version any claim leaves behind can be cleaned up while it is open.
type SoakParams struct {
	Duration time.Duration
	Rate     float64 // jobs/s; 0: SoakShare of the side's maximum, measured first
	// Probe is how long the maximum is measured when Rate is 0, and
	// ProbeWarm how much of it runs before the measured span begins, so
	// that the rate is one the side sustains with its cleaner deleting
	// (ADR-0057); 0: soakProbe and soakProbeWarm.
	Probe       time.Duration
	ProbeWarm   time.Duration
	SnapshotAt  time.Duration
	SnapshotFor time.Duration
	// RetentionAge is how old a finished job gets before the cleaner
	// deletes it (pulse's reaper: PULSE_RETENTION_COMPLETED, set by the
	// caller on the fleet; River: CompletedJobRetentionPeriod).
	RetentionAge time.Duration
	Interval     time.Duration // one row of the table per Interval
	Pulse        PulseBenchParams
	Emit         func(Result)
	Out          io.Writer // the per-interval table, as it runs
}

// SoakShare is the share of the measured maximum the soak runs at when no
// rate is given; the maximum is the river scenario's concurrent workload
// run for soakProbe, measured over its span after soakProbeWarm: with the
// soak's one-minute retention, the cleaner deletes through the whole
// measured span (ADR-0057). LoadedLatency measures its maximum over
// latencyProbe.
const (
	SoakShare     = 0.7
	soakProbe     = 4 * time.Minute
	soakProbeWarm = 2 * time.Minute
	latencyProbe  = 20 * time.Second
	// soakLagTarget is the queue lag (p99) the soak holds outside the
	// snapshot, and that marks the recovery after it.
	soakLagTarget = time.Second
)

// soakSide is one queue under the soak.
type soakSide interface {
	benchSide
	// startSoak starts the workers; started is called as each handler
	// starts, with the job's queue lag (submitted to started).
	startSoak(ctx context.Context, started func(lag time.Duration)) (stop func(), err error)
	// dbURL and table name the queue table; claimLike matches the side's
	// claim statements in pg_stat_statements.
	dbURL() string
	table() string
	claimLike() string
	// reset empties the table once no job is live.
	reset(ctx context.Context) error
	// live counts the jobs not yet finished: the probe's cleaner deletes
	// completed jobs, so its run is worked off when none is left, not
	// when the completed count reaches what was inserted.
	live(ctx context.Context) (int64, error)
}

// soakSecond is what one second of the soak saw.
type soakSecond struct {
	started int
	lags    []time.Duration
}

// soakRecorder collects handler starts into one-second buckets.
type soakRecorder struct {
	begin time.Time
	mu    sync.Mutex
	secs  []soakSecond
}

func (r *soakRecorder) started(lag time.Duration) {
	i := int(time.Since(r.begin) / time.Second)
	r.mu.Lock()
	for len(r.secs) <= i {
		r.secs = append(r.secs, soakSecond{})
	}
	r.secs[i].started++
	r.secs[i].lags = append(r.secs[i].lags, lag)
	r.mu.Unlock()
}

// window sums the whole seconds [from, to).
func (r *soakRecorder) window(from, to int) (started int, lags []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := from; i < min(to, len(r.secs)); i++ {
		started += r.secs[i].started
		lags = append(lags, r.secs[i].lags...)
	}
	return started, lags
}

// soakTable is a queue table's size and garbage at one moment.
type soakTable struct {
	heap, indexes, dead int64
}

func readSoakTable(ctx context.Context, conn *pgx.Conn, side soakSide) (soakTable, error) {
	var t soakTable
	err := conn.QueryRow(ctx, `
SELECT pg_relation_size($1::regclass), pg_indexes_size($1::regclass),
       (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = $1::regclass)`, side.table()).Scan(&t.heap, &t.indexes, &t.dead)
	if err != nil {
		return t, err
	}
	return t, nil
}

func readClaimStats(ctx context.Context, admin *pgx.Conn, like string) (calls int64, ms float64, err error) {
	err = admin.QueryRow(ctx, `
SELECT COALESCE(sum(calls), 0)::int8, COALESCE(sum(total_exec_time), 0)::float8
FROM pg_stat_statements WHERE query LIKE $1`, like).Scan(&calls, &ms)
	return calls, ms, err
}

// Soak runs one side through the soak and returns the per-interval rows
// (emitted as they finish) and the summary. adminURL is any database of
// the cluster with pg_stat_statements loaded.
func Soak(ctx context.Context, name string, side soakSide, adminURL string, p SoakParams) (Result, error) {
	rate, maximum := p.Rate, 0.0
	if rate <= 0 {
		w := BenchWorkload{Mode: WorkloadConcurrent, Duration: cmp.Or(p.Probe, soakProbe), Warm: cmp.Or(p.ProbeWarm, soakProbeWarm)}
		if w.Warm >= w.Duration {
			return Result{}, fmt.Errorf("%s: the probe's warm-in %s is not shorter than the probe %s", name, w.Warm, w.Duration)
		}
		probe, err := runBench(ctx, side, w, nil)
		if err != nil {
			return Result{}, fmt.Errorf("%s: probe the maximum: %w", name, err)
		}
		maximum = probe.rate()
		rate = SoakShare * maximum
		fmt.Fprintf(p.Out, "%s: maximum %.0f jobs/s sustained from %s to %s of the probe; soaking at %.0f\n", name, probe.rate(), w.Warm, w.Duration, rate)
		if err := workOffLive(ctx, side); err != nil {
			return Result{}, fmt.Errorf("%s: after the probe: %w", name, err)
		}
		if err := side.reset(ctx); err != nil {
			return Result{}, err
		}
	}
	conn, err := pgx.Connect(ctx, side.dbURL())
	if err != nil {
		return Result{}, err
	}
	defer conn.Close(ctx)
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return Result{}, err
	}
	defer admin.Close(ctx)

	rec := &soakRecorder{begin: time.Now()}
	stop, err := side.startSoak(ctx, rec.started)
	if err != nil {
		return Result{}, fmt.Errorf("%s: start: %w", name, err)
	}
	defer stop()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var produceErr error
	var pwg sync.WaitGroup
	pwg.Go(func() { produceErr = producePaced(runCtx, side, rate) })

	var (
		release  func()
		released bool
	)
	snapFrom, snapTo := p.SnapshotAt, p.SnapshotAt+p.SnapshotFor
	fmt.Fprintf(p.Out, "%s %6s %9s %8s %8s %8s %9s %10s %10s %10s\n", name, "minute", "jobs/s", "lag_p50", "lag_p99", "lag_max", "claim_ms", "heap_MB", "index_MB", "dead_tup")
	var rows []map[string]float64
	var steady soakTable
	steadyAt := soakSteadyAt(p)
	prevCalls, prevMS, err := readClaimStats(ctx, admin, side.claimLike())
	if err != nil {
		return Result{}, err
	}
	for i := 1; time.Duration(i)*p.Interval <= p.Duration; i++ {
		at := time.Duration(i) * p.Interval
		for {
			el := time.Since(rec.begin)
			if release == nil && !released && p.SnapshotFor > 0 && el >= snapFrom && el < snapTo {
				release, err = holdAnalyticsSnapshot(ctx, side)
				if err != nil {
					return Result{}, err
				}
				fmt.Fprintf(p.Out, "%s: snapshot opened at %s\n", name, el.Round(time.Second))
			}
			if release != nil && el >= snapTo {
				release()
				release, released = nil, true
				fmt.Fprintf(p.Out, "%s: snapshot released at %s\n", name, el.Round(time.Second))
			}
			if el >= at {
				break
			}
			next := min(at, snapFrom, snapTo)
			if next <= el {
				next = at
			}
			select {
			case <-ctx.Done():
				return Result{}, ctx.Err()
			case <-time.After(min(next-el, time.Second)):
			}
		}
		from, to := int((at-p.Interval)/time.Second), int(at/time.Second)
		n, lags := rec.window(from, to)
		p50, _, p99, pmax := Percentiles(lags)
		tab, err := readSoakTable(ctx, conn, side)
		if err != nil {
			return Result{}, err
		}
		calls, ms, err := readClaimStats(ctx, admin, side.claimLike())
		if err != nil {
			return Result{}, err
		}
		claimMean := 0.0
		if calls > prevCalls {
			claimMean = (ms - prevMS) / float64(calls-prevCalls)
		}
		prevCalls, prevMS = calls, ms
		if at == steadyAt {
			steady = tab
		}
		row := map[string]float64{
			"minute": at.Minutes(), "jobs_per_s": float64(n) / p.Interval.Seconds(), "lag_p50_ms": p50, "lag_p99_ms": p99,
			"lag_max_ms": pmax, "claim_mean_ms": claimMean, "heap_mb": float64(tab.heap) / (1 << 20), "index_mb": float64(tab.indexes) / (1 << 20),
			"dead_tuples": float64(tab.dead),
		}
		rows = append(rows, row)
		fmt.Fprintf(p.Out, "%s %6.1f %9.0f %8.1f %8.1f %8.0f %9.2f %10.1f %10.1f %10d\n", name, at.Minutes(), row["jobs_per_s"], p50, p99,
			pmax, claimMean, row["heap_mb"], row["index_mb"], tab.dead)
		if p.Emit != nil {
			p.Emit(Result{Scenario: name + "-soak-minute", Params: map[string]any{"rate": int(rate)}, Metrics: row})
		}
	}
	if release != nil {
		release()
	}
	cancel()
	pwg.Wait()
	if produceErr != nil {
		return Result{}, fmt.Errorf("%s: produce: %w", name, produceErr)
	}
	last := rows[len(rows)-1]
	out := Result{
		Scenario: name + "-soak",
		Params: map[string]any{"rate": int(rate), "duration": p.Duration.String(), "snapshot_at": p.SnapshotAt.String(),
			"snapshot_for": p.SnapshotFor.String(), "retention": p.RetentionAge.String()},
		Metrics: soakSummary(rec, rate, p),
	}
	out.Params["steady_minute"] = steadyAt.Minutes()
	if maximum > 0 {
		out.Params["sustained_maximum"] = int(maximum)
	}
	out.Metrics["heap_growth"] = ratio(last["heap_mb"], float64(steady.heap)/(1<<20))
	out.Metrics["index_growth"] = ratio(last["index_mb"], float64(steady.indexes)/(1<<20))
	return out, nil
}

// soakSteadyAt is the end of the first interval of steady state, the
// baseline the sizes at the end are compared with: by then the cleaner has
// deleted what it keeps deleting (twice the retention age, plus the
// reaper's one-minute retention interval), before the snapshot if it can.
func soakSteadyAt(p SoakParams) time.Duration {
	at := p.Interval
	for at < 2*p.RetentionAge+time.Minute && at+p.Interval <= p.Duration {
		at += p.Interval
	}
	return at
}

// soakSummary judges the soak by the second: the worst lag p99 of the
// minutes outside the snapshot (and outside the minute after it), the
// lowest rate of a minute inside it as a share of the rate, and how long
// after the release the lag took to fall back under soakLagTarget.
func soakSummary(rec *soakRecorder, rate float64, p SoakParams) map[string]float64 {
	m := map[string]float64{}
	minute := int(p.Interval / time.Second)
	snapFrom, snapTo := int(p.SnapshotAt/time.Second), int((p.SnapshotAt+p.SnapshotFor)/time.Second)
	var outside, inside []float64
	for from := 0; from+minute <= int(p.Duration/time.Second); from += minute {
		n, lags := rec.window(from, from+minute)
		_, _, p99, _ := Percentiles(lags)
		in := p.SnapshotFor > 0 && from+minute > snapFrom && from < snapTo
		after := p.SnapshotFor > 0 && from >= snapTo && from < snapTo+60
		switch {
		case in:
			inside = append(inside, float64(n)/float64(minute)/rate)
		case !after && from > 0: // the first minute warms up
			outside = append(outside, p99)
		}
	}
	if len(outside) > 0 {
		m["lag_p99_outside_max_ms"] = slices.Max(outside)
	}
	if len(inside) > 0 {
		m["snapshot_rate_share_min"] = slices.Min(inside)
	}
	if p.SnapshotFor > 0 {
		m["recovery_s"] = -1 // never, within the run
		for s := snapTo; s < int(p.Duration/time.Second); s++ {
			_, lags := rec.window(s, s+1)
			if _, _, p99, _ := Percentiles(lags); len(lags) > 0 && p99 < float64(soakLagTarget/time.Millisecond) {
				m["recovery_s"] = float64(s - snapTo)
				break
			}
		}
	}
	m["rate"] = rate
	return m
}

// producePaced inserts at rate jobs/s, every 10 ms what is due, with up to
// eight inserts in flight; what cannot be sent in time stays due.
func producePaced(ctx context.Context, side benchSide, rate float64) error {
	const tick = 10 * time.Millisecond
	sem := make(chan struct{}, 8)
	var (
		failed atomic.Value
		wg     sync.WaitGroup
		sent   float64
	)
	defer wg.Wait()
	begin := time.Now()
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err, ok := failed.Load().(error); ok {
			return err
		}
		due := rate*time.Since(begin).Seconds() - sent
		for due >= 1 {
			n := min(int(due), BenchInsertBatch)
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			sent += float64(n)
			due -= float64(n)
			wg.Go(func() {
				defer func() { <-sem }()
				if err := side.insert(ctx, n); err != nil && ctx.Err() == nil {
					failed.Store(err)
				}
			})
		}
	}
}

// holdAnalyticsSnapshot opens a REPEATABLE READ transaction on the queue
// table's database and runs an analytics query in it (jobs by status), as
// a report that then keeps its transaction open would; release ends it.
func holdAnalyticsSnapshot(ctx context.Context, side soakSide) (func(), error) {
	conn, err := pgx.Connect(ctx, side.dbURL())
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err == nil {
		_, err = tx.Exec(ctx, `SELECT count(*) FROM `+side.table())
	}
	if err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return func() {
		_ = tx.Rollback(context.Background())
		_ = conn.Close(context.Background())
	}, nil
}

// workOff runs the side's workers until its table shows inserted jobs
// completed: what the probe left queued, so that the table can be emptied.
func workOff(ctx context.Context, side benchSide, inserted int64) error {
	stop, err := side.start(ctx, func() {})
	if err != nil {
		return err
	}
	defer stop()
	var none atomic.Int64
	none.Store(inserted)
	return waitCompleted(ctx, side, &none, inserted)
}

// workOffLive runs side's workers until no job of the table is live.
func workOffLive(ctx context.Context, side soakSide) error {
	stop, err := side.start(ctx, func() {})
	if err != nil {
		return err
	}
	defer stop()
	for {
		n, err := side.live(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d jobs still live: %w", n, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// countLive runs a count of live jobs on the database at url.
func countLive(ctx context.Context, url, sql string) (int64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, sql).Scan(&n)
	return n, err
}

// pulseSoak is pulse under the soak: pulseBench's inserts and workers,
// the workers reporting each job's lag.
type pulseSoak struct {
	*pulseBench
	url string
}

func (s *pulseSoak) startSoak(ctx context.Context, started func(time.Duration)) (func(), error) {
	return s.startWorkers(ctx, func(j *pulse.Job) { started(time.Since(j.SubmittedAt)) })
}

func (s *pulseSoak) dbURL() string     { return s.url }
func (s *pulseSoak) table() string     { return "jobs" }
func (s *pulseSoak) claimLike() string { return "%row_number() OVER () AS slot%" }
func (s *pulseSoak) live(ctx context.Context) (int64, error) {
	return countLive(ctx, s.url, `SELECT count(*) FROM jobs WHERE status IN ('PENDING', 'RUNNING', 'RETRYING')`)
}
func (s *pulseSoak) reset(ctx context.Context) error {
	return ResetJobs(ctx, s.url)
}

// PulseSoak runs the soak through pulse (the fleet's reaper cleans up).
func PulseSoak(ctx context.Context, t Target, p SoakParams) (Result, error) {
	if err := ResetJobs(ctx, t.DatabaseURL); err != nil {
		return Result{}, err
	}
	sides, err := openPulseSides(ctx, t, p.Pulse)
	if err != nil {
		return Result{}, err
	}
	defer sides.close()
	side := &pulseSoak{pulseBench: sides.side("soak"), url: t.DatabaseURL}
	return Soak(ctx, "pulse", side, t.DatabaseURL, p)
}

// riverSoak is River under the soak: the CLI benchmark's client, with its
// job cleaner deleting completed jobs RetentionAge old.
type riverSoak struct {
	*riverBench
	side *RiverSide
	url  string
}

func (s *riverSoak) startSoak(ctx context.Context, started func(time.Duration)) (func(), error) {
	s.started = started
	return s.start(ctx, func() {})
}

func (s *riverSoak) dbURL() string     { return s.url }
func (s *riverSoak) table() string     { return "river_job" }
func (s *riverSoak) claimLike() string { return "%river_job%SKIP LOCKED%" }
func (s *riverSoak) live(ctx context.Context) (int64, error) {
	return countLive(ctx, s.url, `SELECT count(*) FROM river_job WHERE state NOT IN ('completed', 'cancelled', 'discarded')`)
}
func (s *riverSoak) reset(ctx context.Context) error {
	return s.side.Reset(ctx)
}

// RiverSoak runs the soak through River. adminURL is a database of the
// cluster with pg_stat_statements (the fleet's).
func (r *RiverSide) RiverSoak(ctx context.Context, adminURL string, p SoakParams) (Result, error) {
	if err := r.Reset(ctx); err != nil {
		return Result{}, err
	}
	b, err := r.benchWith(ctx, p.RetentionAge)
	if err != nil {
		return Result{}, err
	}
	defer b.close()
	return Soak(ctx, "river", &riverSoak{riverBench: b, side: r, url: r.url}, adminURL, p)
}
