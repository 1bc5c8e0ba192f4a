package jobstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// Statements exported to the plan tests, which EXPLAIN them as the store
// runs them.
const (
	ClaimPlanSQL   = claimPlanSQL
	PinnedPlanSQL  = pinnedPlanSQL
	CountsPlanSQL  = countsPlanSQL
	QueueCountsSQL = queueCountsSQL
	QueueDepthSQL  = queueDepthSQL
	HeartbeatSQL   = heartbeatSQL
	TopicsSQL      = topicsSQL
	NotifyReadySQL = notifyReadySQL
)

// The settling statements, built with the throughput rollup's writer
// parameter.
var (
	ClaimSQL        = claimSQL
	ClaimLimitedSQL = claimLimitedSQL
	ClaimAfterSQL   = claimAfterSQL
	ClaimBeforeSQL  = claimBeforeSQL
	ReportSQL       = reportSQL
	ReapSQL         = reapSQL
	ReapRecentSQL   = reapRecentSQL
)

// JobAheadSQL is exported to the plan test of ExplainWait.
const JobAheadSQL = jobAheadSQL

// InsertRowsSQL and InsertParams are the batch insert as Insert runs it,
// for the test of what it reads per job.
const InsertRowsSQL = insertRowsSQL

func InsertParams(jobs []pulsetype.NewJob) []any { return insertParams(jobs) }

// ReportWithoutRollup is Report with the statement it had before the
// throughput rollup: the fenced UPDATE alone, counting nothing. The
// benchmark compares the two.
func (s *Store) ReportWithoutRollup(ctx context.Context, worker string, results []pulsetype.Result) ([]pulsetype.Ack, error) {
	return s.report(ctx, reportUpdateSQL, false, worker, results)
}

// The workflow view's statements, for the plan checks.
const (
	WorkflowCountsSQL = workflowCountsSQL
	WorkflowStepSQL   = workflowStepSQL
	ListWorkflowsSQL  = listWorkflowsSQL
	CancelWorkflowSQL = cancelWorkflowSQL
	RetryWorkflowSQL  = retryWorkflowSQL
)

// ClaimLimitedWith runs one claim of a limited group with the claim
// statement sql in place of claimLimitedSQL: the witness tests run a
// statement with a limit taken out, to show their judge sees the
// difference.
func (s *Store) ClaimLimitedWith(ctx context.Context, sql string, topics []string, slots []string, leaseTTL time.Duration) ([]pulsetype.Claimed, error) {
	out, _, err := s.claimWith(ctx, sql, []any{topics, len(slots), slots, intervalOf(leaseTTL)})
	return out, err
}

// MaintenanceSetting is a setting of m's session, as its statements run.
func MaintenanceSetting(ctx context.Context, m *IndexMaintenance, name string) (string, error) {
	var v string
	err := m.conn.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&v)
	return v, err
}

// QueryGatedForTest runs sql as the lifecycle statements run theirs:
// behind pinnedPlanSQL, which passes the quiet window's gate.
func (s *Store) QueryGatedForTest(ctx context.Context, sql string) error {
	return s.queryPinned(ctx, sql, nil, func(pgx.Rows) error { return nil })
}
