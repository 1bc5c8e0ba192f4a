package e2e_test

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
)

// TestDependencies: real control-api, gateway and SDK worker. A diamond
// (A -> B, C -> D) submitted in one EnqueueMany call runs in its order
// and D reads B's and C's results (job.ParentResults, fenced by the
// gateway); a dead-lettered parent cancels a child of policy cancel and
// its own child, and runs a child of policy run, which sees how the
// parent ended. No child started before a parent finished, judged from
// the database.
func TestDependencies(t *testing.T) {
	t.Parallel()
	f := upFleet(t, localfleet.Options{Gateways: 1})
	ctx, cancel := context.WithTimeout(t.Context(), 2*proctest.Patience)
	defer cancel()
	pool, err := pgxpool.New(ctx, f.DatabaseURL)
	require.NoError(t, err)
	defer pool.Close()

	startSDKWorker(t, ctx, f, func(w *pulse.Worker) {
		w.Register("e2e.deps.step", func(ctx context.Context, job *pulse.Job) error {
			var in struct{ Name string }
			if err := job.UnmarshalArgs(&in); err != nil {
				return pulse.Permanent(err)
			}
			if in.Name == "fail" {
				return pulse.Permanent(context.Canceled)
			}
			parents, err := job.ParentResults(ctx)
			if err != nil {
				return err
			}
			var seen []string
			for _, p := range parents {
				var r string
				if len(p.Result) > 0 {
					if err := json.Unmarshal(p.Result, &r); err != nil {
						return pulse.Permanent(err)
					}
				}
				seen = append(seen, string(p.Status)+":"+r)
			}
			sort.Strings(seen)
			return job.SetResult(in.Name + "(" + strings.Join(seen, ",") + ")")
		})
	})
	client, err := pulse.NewClient(f.ControlGRPC)
	require.NoError(t, err)
	defer client.Close()

	step := func(name string, opts ...pulse.EnqueueOption) pulse.JobRequest {
		return pulse.JobRequest{Topic: "e2e.deps.step", Args: map[string]string{"name": name}, Options: opts}
	}
	resultOf := func(id string) (string, string) {
		info, err := client.Wait(ctx, id)
		require.NoError(t, err)
		var r string
		if len(info.Result) > 0 {
			require.NoError(t, json.Unmarshal(info.Result, &r))
		}
		return string(info.Status), r
	}

	t.Run("ADiamondRunsInOrderAndTheFanInReadsItsParents", func(t *testing.T) {
		sub, err := client.EnqueueMany(ctx, []pulse.JobRequest{
			step("a"),
			step("b", pulse.DependsOn(pulse.JobRef(0))),
			step("c", pulse.DependsOn(pulse.JobRef(0))),
			step("d", pulse.DependsOn(pulse.JobRef(1), pulse.JobRef(2))),
		})
		require.NoError(t, err)
		status, result := resultOf(sub[3].ID)
		require.Equal(t, "COMPLETED", status)
		require.Equal(t, "d(COMPLETED:b(COMPLETED:a()),COMPLETED:c(COMPLETED:a()))", result)
	})

	t.Run("AFailedParentCancelsOrRunsItsChildrenByPolicy", func(t *testing.T) {
		sub, err := client.EnqueueMany(ctx, []pulse.JobRequest{
			step("fail"),
			step("canceled", pulse.DependsOn(pulse.JobRef(0))),
			step("below", pulse.DependsOn(pulse.JobRef(1))),
			step("anyway", pulse.DependsOnAnyway(pulse.JobRef(0))),
		})
		require.NoError(t, err)
		status, result := resultOf(sub[3].ID)
		require.Equal(t, "COMPLETED", status)
		require.Equal(t, "anyway(DEAD_LETTERED:)", result)
		status, _ = resultOf(sub[1].ID)
		require.Equal(t, "CANCELED", status)
		status, _ = resultOf(sub[2].ID)
		require.Equal(t, "CANCELED", status)
	})

	t.Run("AnUnknownParentIsRefused", func(t *testing.T) {
		_, err := client.Enqueue(ctx, "e2e.deps.step", nil, pulse.DependsOn("01a21a00-0000-7000-8000-000000000000"))
		require.ErrorContains(t, err, "depends_on[0]")
	})

	var early int
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT count(*) FROM job_dependencies d
		JOIN jobs c ON c.id = d.child_id JOIN jobs p ON p.id = d.parent_id
		WHERE c.started_at IS NOT NULL AND (p.finished_at IS NULL OR c.started_at < p.finished_at)`).Scan(&early))
	require.Zero(t, early, "a child started before a parent finished")
}
