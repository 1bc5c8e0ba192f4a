package pulsetype

import (
	"regexp"
	"time"
)

// The limits every job is held to, defined once. The SDK's options check
// them before a request leaves the process, jobspec checks them again on
// every request the services receive, and the schema's CHECK constraints
// and guards (migrations/) hold the same numbers, which
// pkg/server/jobstore's TestSchemaLimitsAgreeWithPulsetype proves against
// Postgres: a value at each bound is stored, one past it is refused by
// the database itself.
const (
	// MaxTopicLength is the longest topic (and schedule) name, in bytes;
	// TopicPattern allows only ASCII, so also in characters
	// (jobs_topic_format, schedules_topic_format, schedules_name_format,
	// topic_limits_topic_format).
	MaxTopicLength = 128
	// TopicPattern is the topic charset: a letter or digit, then up to
	// MaxTopicLength-1 letters, digits, '.', '_', ':' or '-'.
	TopicPattern = `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`

	// MinPriority and MaxPriority bound a job's priority; higher runs
	// first (jobs_priority_range, schedules_priority_range).
	MinPriority = 0
	MaxPriority = 10
	// DefaultPriority is a job's priority when none is given (the
	// column's default too).
	DefaultPriority = 5

	// MinMaxAttempts and MaxMaxAttempts bound how many attempts a job
	// gets (jobs_max_attempts_range, schedules_max_attempts_range).
	MinMaxAttempts = 1
	MaxMaxAttempts = 100
	// DefaultMaxAttempts is a job's attempts when none is given.
	DefaultMaxAttempts = 25

	// MaxIdempotencyKeyBytes is the longest idempotency key, in bytes.
	// The schema counts characters (jobs_idempotency_key_length, 1..255),
	// so a key within this bound is always within the schema's; an empty
	// key means none.
	MaxIdempotencyKeyBytes = 255

	// MaxReplaceKeyBytes is the longest replace key, in bytes. The schema
	// counts characters (jobs_replace_key_length, 1..255), so a key within
	// this bound is always within the schema's; an empty key means none.
	MaxReplaceKeyBytes = 255

	// DefaultMaxArgsBytes is the largest args document control-api
	// accepts unless configured otherwise (PULSE_MAX_ARGS_BYTES). The
	// schema does not bound it: args must only be a JSON object
	// (jobs_args_object).
	DefaultMaxArgsBytes = 1 << 20

	// MaxResultBytes is the largest result a completed job may store, in
	// bytes of its JSON text (jobs_result_size): the most a gateway may be
	// configured to accept (PULSE_MAX_RESULT_BYTES) and what the SDK's
	// Job.SetResult refuses above. It stays well under a gRPC message
	// (4 MiB), which a report batch must fit in.
	MaxResultBytes = 1 << 20
	// DefaultMaxResultBytes is the largest result a gateway stores unless
	// configured otherwise (PULSE_MAX_RESULT_BYTES): a result is an
	// answer, not a file; larger outputs belong in object storage, with
	// their address as the result.
	DefaultMaxResultBytes = 64 << 10
	// MaxMetadataPatchBytes is the largest JSON object one
	// job.SetMetadata sends (checked by the SDK and the gateway), and
	// MaxMetadataStoredBytes the largest a job's merged metadata may be
	// as stored (jobs_metadata_size, pg_column_size).
	MaxMetadataPatchBytes  = 64 << 10
	MaxMetadataStoredBytes = 256 << 10

	// MaxTags is the most tags a job carries, and MaxTagLength the
	// longest tag, in bytes (ASCII); TagPattern a tag's charset
	// (pulse_tags_valid, migration 00006).
	MaxTags      = 16
	MaxTagLength = 64
	TagPattern   = `^[A-Za-z0-9][A-Za-z0-9._:=/-]{0,63}$`

	// MaxReportBatchBytes is where the SDK cuts a report batch by the
	// bytes of its results and error texts, so a batch of large results
	// still fits one gRPC message.
	MaxReportBatchBytes = 2 << 20

	// MinTimeout and MaxTimeout bound one attempt's timeout
	// (jobs_timeout_range).
	MinTimeout = time.Second
	MaxTimeout = 24 * time.Hour

	// MinUniqueFor and MaxUniqueFor bound a unique job's period
	// (job_uniques_period_range).
	MinUniqueFor = time.Second
	MaxUniqueFor = 366 * 24 * time.Hour

	// MinRetryDelay and MaxRetryDelay bound every duration of a job's own
	// backoff (jobs_retry_range) and the wait a handler may ask for
	// before the next attempt (a result's retry_after).
	MinRetryDelay = time.Millisecond
	MaxRetryDelay = 366 * 24 * time.Hour

	// DurationResolution is the finest duration the schema keeps:
	// Postgres intervals hold microseconds, so a duration that is not a
	// whole number of them is refused rather than rounded.
	DurationResolution = time.Microsecond

	// MaxErrorBytes is the longest error text a result carries; the
	// gateway cuts longer text (keeping it valid UTF-8 and marking the
	// cut) before it is stored. The SDK cuts at MaxReportedErrorBytes, so
	// its reports are never cut again.
	MaxErrorBytes = 8 << 10
	// MaxReportedErrorBytes is where the SDK cuts a handler's error text:
	// half of MaxErrorBytes, so a full report batch stays well within a
	// gRPC message.
	MaxReportedErrorBytes = MaxErrorBytes / 2

	// MaxWorkerIDBytes is the longest worker id (the job's locked_by), in
	// bytes; the gateway refuses a longer one when the worker connects.
	MaxWorkerIDBytes = 200

	// MaxPauseReasonChars is the longest pause reason, in characters
	// (dispatch_control_reason_length).
	MaxPauseReasonChars = 500

	// MaxTopicLimit is the largest max_running a topic may have
	// (topic_limits_max_running_range); 0 holds the topic.
	MaxTopicLimit = 1_000_000

	// MaxRateLimit is the most starts a topic's rate limit allows per
	// interval (topic_limits_rate_limit_range, 1..MaxRateLimit): the
	// sliding log keeps one row per start still inside the interval.
	MaxRateLimit = 10_000
	// MinRateInterval and MaxRateInterval bound a rate limit's interval
	// (topic_limits_rate_interval_range).
	MinRateInterval = time.Millisecond
	MaxRateInterval = 24 * time.Hour
	// MaxRateKeyBytes is the longest job rate key, in bytes
	// (jobs_rate_key_format); a key taken from an args field that is
	// longer is stored as "md5:" and its md5.
	MaxRateKeyBytes = 255
	// MaxRateKeyFieldChars is the longest args field name a topic's rate
	// key may be taken from (topic_limits_rate_key_source).
	MaxRateKeyFieldChars = 128

	// MaxFlowKeyBytes is the longest concurrency or sequence key, in
	// bytes (jobs_concurrency_key_format, jobs_sequence_key_format).
	MaxFlowKeyBytes = 255
	// MaxRunningPerKey is the largest max_running_per_key
	// (topic_limits_max_running_per_key_range, 1..MaxRunningPerKey).
	MaxRunningPerKey = 1_000_000
)

// Sequence policies: what a sequence's dead-lettered head does
// (topic_limits.sequence_on_failure, ADR-0054).
const (
	// SequenceBlock holds the sequence's later jobs until the head is
	// retried.
	SequenceBlock = "block"
	// SequenceContinue moves on past a dead-lettered head.
	SequenceContinue = "continue"
)

// ValidTopic reports whether name is a valid topic: 1..MaxTopicLength
// characters matching TopicPattern. It reads the bytes itself rather than
// running the pattern: every job passes here, in the SDK as it is enqueued
// and in control-api as it is submitted, and a regular expression per job
// was a tenth of a producer's CPU (FuzzValidTopic holds the two together).
func ValidTopic(name string) bool {
	if len(name) == 0 || len(name) > MaxTopicLength {
		return false
	}
	for i := range len(name) {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == ':' || c == '-'):
		default:
			return false
		}
	}
	return true
}

var tagRE = regexp.MustCompile(TagPattern)

// ValidTag reports whether tag is a valid job tag: 1..MaxTagLength
// characters matching TagPattern.
func ValidTag(tag string) bool { return tagRE.MatchString(tag) }

// RateLimit is a topic's fleet-wide limit on starts (ADR-0051): at most
// Limit jobs start in any Interval, counted per rate key by Key's source.
type RateLimit struct {
	// Limit is the most starts per Interval, 1..MaxRateLimit.
	Limit int
	// Interval is MinRateInterval..MaxRateInterval, in whole microseconds.
	Interval time.Duration
	// Key says what the limit is counted by: RateKeyNone (the topic as a
	// whole), RateKeyJob (each job's rate_key) or RateKeyArgsPrefix and an
	// args field (that field's value, taken at submit into the job's
	// rate_key).
	Key string
}

// Rate key sources of a RateLimit.
const (
	RateKeyNone       = "none"
	RateKeyJob        = "job"
	RateKeyArgsPrefix = "args:"
)
