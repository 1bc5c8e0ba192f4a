package pulsehttp

import "encoding/json"

// BulkFilter is the body of POST /v1/jobs/cancel and POST /v1/jobs/delete:
// the jobs to act on, by topic, status and args (a JSON object the jobs'
// args contain), at least one of them. With DryRun the answer counts the
// jobs and nothing changes.
type BulkFilter struct {
	Topic  string          `json:"topic"`
	Status string          `json:"status"`
	Args   json.RawMessage `json:"args"`
	DryRun bool            `json:"dry_run"`
}

// BulkResult answers a bulk action. A dry run fills Matched, the jobs the
// action would act on now; an action fills Affected (canceled or
// deleted), Batches (statements run) and StillMatching (jobs that match
// afterwards: locked by a claim or report at that instant, or submitted
// since; run it again for them).
type BulkResult struct {
	DryRun        bool  `json:"dry_run"`
	Matched       int64 `json:"matched"`
	Affected      int64 `json:"affected"`
	Batches       int   `json:"batches"`
	StillMatching int64 `json:"still_matching"`
}
