package api

// QueuedResults is how many results wait for b's next flush, so a test can
// fold a known set of calls into one statement.
func QueuedResults(b *ReportBatcher) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.queued
}
