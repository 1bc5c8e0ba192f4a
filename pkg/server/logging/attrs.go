package logging

// Attribute keys, declared once so every service spells them the same way
// and a log query for one job or worker finds every line about it.
const (
	// Service names the emitting service; New adds it to every record.
	Service = "service"
	// JobID is the job's id, the first half of the delivery dedup key.
	JobID = "job_id"
	// Attempt is the job's attempt number, the second half of the dedup key.
	Attempt = "attempt"
	// Topic is the job's topic.
	Topic = "topic"
	// WorkerID identifies a connected worker process.
	WorkerID = "worker_id"
	// Gateway identifies a dispatch-gateway replica.
	Gateway = "gateway_id"
	// Loop names a background loop (reaper sweep, scheduler, pause refresh).
	Loop = "loop"
	// Error carries an error's message.
	Error = "error"
)
