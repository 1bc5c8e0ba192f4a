package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// BacklogParams shape the claim-cost run.
type BacklogParams struct {
	Small, Large int // backlog sizes to compare
	Cycles       int // claim-100 + complete cycles measured at each size
	BatchSize    int
}

// ClaimVsBacklog measures claim-BatchSize + complete cycles at a small and
// at a large backlog, directly against the database, and reports the
// medians of the claim alone and of the whole cycle, and their ratios.
func ClaimVsBacklog(ctx context.Context, databaseURL string, p BacklogParams) (Result, error) {
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return Result{}, err
	}
	defer pool.Close()
	store := jobstore.New(pool)
	measure := func(size int) (claims, cycles []time.Duration, err error) {
		topic := fmt.Sprintf("load.backlog.%d.%d", size, time.Now().UnixNano())
		// The backlog stays at least size deep while we consume from it.
		size += (p.Cycles + 5) * p.BatchSize
		if _, err := pool.Exec(ctx, `
			INSERT INTO jobs (id, topic, submitted_at, next_run_at)
			SELECT gen_random_uuid(), $1, now() - (g || ' microseconds')::interval, now() - interval '1 second'
			FROM generate_series(1, $2) AS g`, topic, size); err != nil {
			return nil, nil, err
		}
		// Settle the table as a long-running system would have it: vacuumed,
		// analyzed and checkpointed, so the measurement is the claim and not
		// the aftermath of a million-row insert.
		for _, q := range []string{`VACUUM (ANALYZE) jobs`, `CHECKPOINT`} {
			if _, err := pool.Exec(ctx, q); err != nil {
				return nil, nil, err
			}
		}
		slots := make([]string, p.BatchSize)
		for i := range slots {
			slots[i] = "bench"
		}
		// Warm up caches, then measure.
		for i := range p.Cycles + 5 {
			t0 := time.Now()
			claimed, err := store.Claim(ctx, []string{topic}, slots, time.Minute)
			if err != nil {
				return nil, nil, err
			}
			claimTook := time.Since(t0)
			results := make([]pulsetype.Result, len(claimed))
			for j, c := range claimed {
				results[j] = pulsetype.Result{Ref: pulsetype.AttemptRef{ID: c.ID, Attempt: c.Attempt}, Outcome: pulsetype.OutcomeComplete}
			}
			if _, err := store.Report(ctx, "bench", results); err != nil {
				return nil, nil, err
			}
			if i >= 5 {
				claims = append(claims, claimTook)
				cycles = append(cycles, time.Since(t0))
			}
		}
		// Leave the table as we found it for the next size. Only a finished
		// job may be deleted (migration 00005), so the rest of the backlog is
		// canceled first.
		if _, err := pool.Exec(ctx, `
			UPDATE jobs SET status = 'CANCELED', finished_at = now(), lease_until = NULL
			WHERE topic = $1 AND status IN ('PENDING', 'RETRYING', 'RUNNING')`, topic); err != nil {
			return nil, nil, err
		}
		if _, err := pool.Exec(ctx, `DELETE FROM jobs WHERE topic = $1`, topic); err != nil {
			return nil, nil, err
		}
		_, err = pool.Exec(ctx, `VACUUM jobs`)
		return claims, cycles, err
	}
	smallClaims, small, err := measure(p.Small)
	if err != nil {
		return Result{}, err
	}
	largeClaims, large, err := measure(p.Large)
	if err != nil {
		return Result{}, err
	}
	s50, s95, _, _ := Percentiles(small)
	l50, l95, _, _ := Percentiles(large)
	sc50, _, _, _ := Percentiles(smallClaims)
	lc50, _, _, _ := Percentiles(largeClaims)
	return Result{
		Scenario: "claim-backlog",
		Params:   map[string]any{"small": p.Small, "large": p.Large, "cycles": p.Cycles, "batch": p.BatchSize},
		Metrics: map[string]float64{
			"small_p50_ms": s50, "small_p95_ms": s95,
			"large_p50_ms": l50, "large_p95_ms": l95,
			"ratio_p50":          l50 / s50,
			"claim_small_p50_ms": sc50, "claim_large_p50_ms": lc50, "claim_ratio_p50": lc50 / sc50,
			"jobs_per_s_large": float64(p.BatchSize) / (l50 / 1000),
		},
	}, nil
}
