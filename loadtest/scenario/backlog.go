package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// BacklogParams shape the claim-cost run.
type BacklogParams struct {
	Small, Large int // backlog sizes to compare
	Cycles       int // claim-100 + complete cycles measured at each size
	BatchSize    int
}

// ClaimVsBacklog measures the claim statement (claim BatchSize, then
// complete them) at a small and at a large backlog, directly against the
// database, and reports the ratio of their medians.
func ClaimVsBacklog(ctx context.Context, databaseURL string, p BacklogParams) (Result, error) {
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return Result{}, err
	}
	defer pool.Close()
	store := jobstore.New(pool)
	measure := func(size int) ([]time.Duration, error) {
		topic := fmt.Sprintf("load.backlog.%d.%d", size, time.Now().UnixNano())
		if _, err := pool.Exec(ctx, `
			INSERT INTO jobs (id, topic, submitted_at, next_run_at)
			SELECT gen_random_uuid(), $1, now() - (g || ' microseconds')::interval, now() - interval '1 second'
			FROM generate_series(1, $2) AS g`, topic, size); err != nil {
			return nil, err
		}
		if _, err := pool.Exec(ctx, `ANALYZE jobs`); err != nil {
			return nil, err
		}
		slots := make([]string, p.BatchSize)
		for i := range slots {
			slots[i] = "bench"
		}
		// Warm up caches, then measure.
		out := make([]time.Duration, 0, p.Cycles)
		for i := range p.Cycles + 5 {
			t0 := time.Now()
			claimed, err := store.Claim(ctx, []string{topic}, slots, time.Minute)
			if err != nil {
				return nil, err
			}
			results := make([]jobstore.Result, len(claimed))
			for j, c := range claimed {
				results[j] = jobstore.Result{Ref: jobstore.AttemptRef{ID: c.ID, Attempt: c.Attempt}, Outcome: jobstore.OutcomeComplete}
			}
			if _, err := store.Report(ctx, "bench", results, jobstore.DefaultBackoff); err != nil {
				return nil, err
			}
			if i >= 5 {
				out = append(out, time.Since(t0))
			}
		}
		// Leave the table as we found it for the next size.
		_, err := pool.Exec(ctx, `DELETE FROM jobs WHERE topic = $1`, topic)
		return out, err
	}
	small, err := measure(p.Small)
	if err != nil {
		return Result{}, err
	}
	large, err := measure(p.Large)
	if err != nil {
		return Result{}, err
	}
	s50, s95, _, _ := Percentiles(small)
	l50, l95, _, _ := Percentiles(large)
	return Result{
		Scenario: "claim-backlog",
		Params:   map[string]any{"small": p.Small, "large": p.Large, "cycles": p.Cycles, "batch": p.BatchSize},
		Metrics: map[string]float64{
			"small_p50_ms": s50, "small_p95_ms": s95,
			"large_p50_ms": l50, "large_p95_ms": l95,
			"ratio_p50":        l50 / s50,
			"jobs_per_s_large": float64(p.BatchSize) / (l50 / 1000),
		},
	}, nil
}
