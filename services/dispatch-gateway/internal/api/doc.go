// Package api serves DispatchService: the StreamJobs stream that carries
// assignments out and slot credits in, and the batched Heartbeat and
// ReportResult calls. Any gateway replica answers heartbeats and reports
// for any job: the fence lives in the row, not in the gateway.
package api
