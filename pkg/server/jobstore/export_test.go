package jobstore

// Statements exported to the plan tests, which EXPLAIN them as the store
// runs them.
const (
	ClaimSQL        = claimSQL
	ClaimLimitedSQL = claimLimitedSQL
	PinnedPlanSQL   = pinnedPlanSQL
	CountsPlanSQL   = countsPlanSQL
	QueueCountsSQL  = queueCountsSQL
	QueueDepthSQL   = queueDepthSQL
	ReportSQL       = reportSQL
	ReapSQL         = reapSQL
	HeartbeatSQL    = heartbeatSQL
	TopicsSQL       = topicsSQL
)

// JobAheadSQL is exported to the plan test of ExplainWait.
const JobAheadSQL = jobAheadSQL
