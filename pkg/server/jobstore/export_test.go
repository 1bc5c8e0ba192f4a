package jobstore

// Statements exported to the plan tests, which EXPLAIN them as the store
// runs them.
const (
	ClaimSQL         = claimSQL
	QueueHeadPlanSQL = queueHeadPlanSQL
	CountsPlanSQL    = countsPlanSQL
	QueueCountsSQL   = queueCountsSQL
	QueueDepthSQL    = queueDepthSQL
)

// JobAheadSQL is exported to the plan test of ExplainWait.
const JobAheadSQL = jobAheadSQL
