package pulse

// Log attribute keys, declared once so every log line names things the same
// way and a log query written for one message works for all of them.
const (
	logKeyComponent = "component"
	logKeyWorkerID  = "worker_id"
	logKeyTarget    = "target"
	logKeyGatewayID = "gateway_id"
	logKeyJobID     = "job_id"
	logKeyAttempt   = "attempt"
	logKeyTopic     = "topic"
	logKeyCount     = "count"
	logKeyInFlight  = "in_flight"
	logKeyError     = "error"
	logKeyCode      = "code"
	logKeyStack     = "stack"
	logKeyDelay     = "delay"
	logKeyVersion   = "version"
	logKeyPaused    = "paused"
)
