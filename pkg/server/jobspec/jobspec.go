// Package jobspec validates what producers submit and turns it into rows
// for jobstore. control-api (submits) and the scheduler (schedule
// templates) share it, so a job is held to the same rules however it
// arrives. Every error names the offending field.
package jobspec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/durationpb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/storable"
)

// TopicPattern is the documented topic charset, pulsetype.TopicPattern
// compiled: a letter or digit, then up to 127 letters, digits, '.', '_',
// ':' or '-'. Every limit a job is held to is defined in pulsetype.
var TopicPattern = regexp.MustCompile(pulsetype.TopicPattern)

// Limits are the configurable bounds.
type Limits struct {
	MaxArgsBytes int
}

// ValidateTopic checks one topic name.
func ValidateTopic(field, topic string) error {
	switch {
	case topic == "":
		return apierr.Invalid(field, "is required")
	case len(topic) > pulsetype.MaxTopicLength:
		return apierr.Invalid(field, "is %d characters; the limit is %d", len(topic), pulsetype.MaxTopicLength)
	case !pulsetype.ValidTopic(topic):
		return apierr.Invalid(field, "%q has characters outside [A-Za-z0-9._:-] or does not start with a letter or digit", topic)
	}
	return nil
}

// ValidateArgs checks a job's args document and returns it, `{}` when empty.
func ValidateArgs(field string, args []byte, maxBytes int) ([]byte, error) {
	if maxBytes <= 0 {
		maxBytes = pulsetype.DefaultMaxArgsBytes
	}
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 {
		return []byte("{}"), nil
	}
	if len(args) > maxBytes {
		return nil, apierr.Invalid(field, "is %d bytes; the limit is %d bytes", len(args), maxBytes)
	}
	if !json.Valid(trimmed) {
		return nil, apierr.Invalid(field, "is not valid JSON")
	}
	if trimmed[0] != '{' {
		return nil, apierr.Invalid(field, "must be a JSON object")
	}
	// What Postgres's jsonb refuses (a string or key decoding to NUL, a
	// lone surrogate, invalid UTF-8, a number outside numeric's range) is
	// refused here, naming the field, before the job joins a batch.
	if err := storable.JSON(field, trimmed); err != nil {
		return nil, err
	}
	return trimmed, nil
}

// Validate checks spec and builds the row to insert. prefix is how the
// request names the spec ("" for a bare body, "jobs[3]" in a batch), so
// errors read "jobs[3].topic: is required".
func Validate(prefix string, spec *pulsev1.JobSpec, lim Limits) (pulsetype.NewJob, error) {
	f := func(name string) string {
		if prefix == "" {
			return name
		}
		return prefix + "." + name
	}
	if spec == nil {
		return pulsetype.NewJob{}, apierr.Invalid(prefix, "is required")
	}
	if err := ValidateTopic(f("topic"), spec.GetTopic()); err != nil {
		return pulsetype.NewJob{}, err
	}
	args, err := ValidateArgs(f("args"), spec.GetArgs(), lim.MaxArgsBytes)
	if err != nil {
		return pulsetype.NewJob{}, err
	}
	prio := int32(pulsetype.DefaultPriority)
	if spec.GetHasPriority() || spec.GetPriority() != 0 {
		prio = spec.GetPriority()
		if prio < pulsetype.MinPriority || prio > pulsetype.MaxPriority {
			return pulsetype.NewJob{}, apierr.Invalid(f("priority"), "is %d; it must be between %d and %d", prio, pulsetype.MinPriority, pulsetype.MaxPriority)
		}
	}
	maxAttempts := spec.GetMaxAttempts()
	if maxAttempts == 0 {
		maxAttempts = pulsetype.DefaultMaxAttempts
	} else if maxAttempts < pulsetype.MinMaxAttempts || maxAttempts > pulsetype.MaxMaxAttempts {
		return pulsetype.NewJob{}, apierr.Invalid(f("max_attempts"), "is %d; it must be between %d and %d", maxAttempts, pulsetype.MinMaxAttempts, pulsetype.MaxMaxAttempts)
	}
	key := spec.GetIdempotencyKey()
	if len(key) > pulsetype.MaxIdempotencyKeyBytes {
		return pulsetype.NewJob{}, apierr.Invalid(f("idempotency_key"), "is %d bytes; the limit is %d", len(key), pulsetype.MaxIdempotencyKeyBytes)
	}
	if err := storable.Text(f("idempotency_key"), key); err != nil {
		return pulsetype.NewJob{}, err
	}
	job := pulsetype.NewJob{
		Topic:          spec.GetTopic(),
		Args:           args,
		Priority:       int16(prio),
		MaxAttempts:    maxAttempts,
		IdempotencyKey: key,
	}
	if job.Timeout, err = ValidateDuration(f("timeout"), spec.GetTimeout(), pulsetype.MinTimeout, pulsetype.MaxTimeout); err != nil {
		return pulsetype.NewJob{}, err
	}
	if job.UniqueFor, err = ValidateDuration(f("unique_for"), spec.GetUniqueFor(), pulsetype.MinUniqueFor, pulsetype.MaxUniqueFor); err != nil {
		return pulsetype.NewJob{}, err
	}
	if job.Retry, err = ValidateRetry(f("retry"), spec.GetRetry()); err != nil {
		return pulsetype.NewJob{}, err
	}
	if job.Tags, err = ValidateTags(f("tags"), spec.GetTags()); err != nil {
		return pulsetype.NewJob{}, err
	}
	if job.ReplaceKey, job.ReplaceMode, err = ValidateReplace(f, spec, job); err != nil {
		return pulsetype.NewJob{}, err
	}
	if job.RateKey, err = ValidateRateKey(f("rate_key"), spec.GetRateKey()); err != nil {
		return pulsetype.NewJob{}, err
	}
	if job.ConcurrencyKey, err = ValidateFlowKey(f("concurrency_key"), spec.GetConcurrencyKey()); err != nil {
		return pulsetype.NewJob{}, err
	}
	if job.SequenceKey, err = ValidateFlowKey(f("sequence_key"), spec.GetSequenceKey()); err != nil {
		return pulsetype.NewJob{}, err
	}
	if ts := spec.GetRunAt(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			return pulsetype.NewJob{}, apierr.Invalid(f("run_at"), "%v", err)
		}
		job.RunAt = ts.AsTime()
		if err := storable.Time(f("run_at"), job.RunAt); err != nil {
			return pulsetype.NewJob{}, err
		}
	}
	id, err := uuid.NewV7()
	if err != nil {
		return pulsetype.NewJob{}, fmt.Errorf("mint job id: %w", err)
	}
	job.ID = id
	return job, nil
}

// ValidateReplace checks a spec's replace_key and replace_mode against
// the job built so far (its idempotency key and unique period): 1 to
// pulsetype.MaxReplaceKeyBytes bytes Postgres can store, a known mode,
// and no other deduplication beside it, since a submit resolves to one
// job by one rule. f names a field as the request spells it.
func ValidateReplace(f func(string) string, spec *pulsev1.JobSpec, job pulsetype.NewJob) (string, pulsetype.ReplaceMode, error) {
	key, mode := spec.GetReplaceKey(), spec.GetReplaceMode()
	if key == "" {
		if mode != pulsev1.ReplaceMode_REPLACE_MODE_UNSPECIFIED {
			return "", "", apierr.Invalid(f("replace_mode"), "is %s without a replace_key; give replace_key or leave replace_mode out", mode)
		}
		return "", "", nil
	}
	if len(key) > pulsetype.MaxReplaceKeyBytes {
		return "", "", apierr.Invalid(f("replace_key"), "is %d bytes; the limit is %d", len(key), pulsetype.MaxReplaceKeyBytes)
	}
	if err := storable.Text(f("replace_key"), key); err != nil {
		return "", "", err
	}
	switch {
	case job.IdempotencyKey != "":
		return "", "", apierr.Invalid(f("replace_key"), "cannot be combined with idempotency_key: a submit with a replace_key resolves to the key's pending job")
	case job.UniqueFor > 0:
		return "", "", apierr.Invalid(f("replace_key"), "cannot be combined with unique_for: a submit with a replace_key resolves to the key's pending job")
	}
	var m pulsetype.ReplaceMode
	switch mode {
	case pulsev1.ReplaceMode_REPLACE_MODE_UNSPECIFIED, pulsev1.ReplaceMode_REPLACE_MODE_REPLACE:
		m = pulsetype.ReplaceArgsAndRunAt
	case pulsev1.ReplaceMode_REPLACE_MODE_KEEP_EARLIER_RUN_AT:
		m = pulsetype.ReplaceKeepEarlierRunAt
	case pulsev1.ReplaceMode_REPLACE_MODE_KEEP_FIRST:
		m = pulsetype.ReplaceKeepFirst
	default:
		return "", "", apierr.Invalid(f("replace_mode"), "is %d; it must be replace, keep_earlier_run_at or keep_first", int32(mode))
	}
	return key, m, nil
}

// ValidateTags checks a job's tags and returns them sorted, without
// duplicates (nil for none): at most pulsetype.MaxTags, each
// pulsetype.ValidTag. Errors name the tag: "tags[2]".
func ValidateTags(field string, tags []string) ([]string, error) {
	if len(tags) == 0 {
		return nil, nil
	}
	for i, tag := range tags {
		if !pulsetype.ValidTag(tag) {
			return nil, apierr.Invalid(fmt.Sprintf("%s[%d]", field, i), "%q is not a tag: 1 to %d letters, digits, '.', '_', ':', '=', '/' or '-', starting with a letter or digit",
				tag, pulsetype.MaxTagLength)
		}
	}
	out := slices.Compact(slices.Sorted(slices.Values(tags)))
	if len(out) > pulsetype.MaxTags {
		return nil, apierr.Invalid(field, "has %d tags; the limit is %d", len(out), pulsetype.MaxTags)
	}
	return out, nil
}

// ValidateRetry checks a job's own retry policy (nil: none, the schema's
// policy) and returns it for the row. It has exactly one form: base with
// an optional max not below it (exponential), or fixed; each duration is
// MinRetryDelay..MaxRetryDelay. Errors name the member: "retry.base".
func ValidateRetry(field string, p *pulsev1.RetryPolicy) (pulsetype.JobRetry, error) {
	if p == nil {
		return pulsetype.JobRetry{}, nil
	}
	f := func(name string) string { return field + "." + name }
	switch {
	case p.GetFixed() != nil && (p.GetBase() != nil || p.GetMax() != nil):
		return pulsetype.JobRetry{}, apierr.Invalid(field, "has fixed and base/max; give one form: {base, max} (exponential) or {fixed}")
	case p.GetFixed() == nil && p.GetBase() == nil && p.GetMax() != nil:
		return pulsetype.JobRetry{}, apierr.Invalid(f("max"), "needs %s: max caps an exponential backoff", f("base"))
	case p.GetFixed() == nil && p.GetBase() == nil:
		return pulsetype.JobRetry{}, apierr.Invalid(field, "is empty; give {base, max} (exponential) or {fixed}, or leave retry out for the default policy")
	}
	var r pulsetype.JobRetry
	var err error
	if r.Fixed, err = ValidateDuration(f("fixed"), p.GetFixed(), pulsetype.MinRetryDelay, pulsetype.MaxRetryDelay); err != nil {
		return pulsetype.JobRetry{}, err
	}
	if r.Base, err = ValidateDuration(f("base"), p.GetBase(), pulsetype.MinRetryDelay, pulsetype.MaxRetryDelay); err != nil {
		return pulsetype.JobRetry{}, err
	}
	if r.Max, err = ValidateDuration(f("max"), p.GetMax(), pulsetype.MinRetryDelay, pulsetype.MaxRetryDelay); err != nil {
		return pulsetype.JobRetry{}, err
	}
	if r.Max != 0 && r.Max < r.Base {
		return pulsetype.JobRetry{}, apierr.Invalid(f("max"), "is %s; it must be at least %s (%s)", r.Max, f("base"), r.Base)
	}
	return r, nil
}

// ValidateDuration checks an optional duration (nil: zero, unset) against
// [lo, hi]. Postgres keeps intervals to the microsecond, so a finer
// duration is refused rather than silently rounded.
func ValidateDuration(field string, d *durationpb.Duration, lo, hi time.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, apierr.Invalid(field, "is not a valid duration: %v", err)
	}
	// CheckValid admits ±10,000 years, more than a time.Duration holds:
	// compare in seconds before converting.
	if secs := d.GetSeconds(); secs < 0 || (secs == 0 && d.GetNanos() <= 0) {
		return 0, apierr.Invalid(field, "is %s; it must be positive, between %s and %s", formatDuration(d), lo, hi)
	} else if secs > int64(hi/time.Second) {
		return 0, apierr.Invalid(field, "is %s; it must be between %s and %s", formatDuration(d), lo, hi)
	}
	v := d.AsDuration()
	if v < lo || v > hi {
		return 0, apierr.Invalid(field, "is %s; it must be between %s and %s", v, lo, hi)
	}
	if v%pulsetype.DurationResolution != 0 {
		return 0, apierr.Invalid(field, "is %s; it must be a whole number of microseconds", v)
	}
	return v, nil
}

// formatDuration spells a wire duration that may not fit a time.Duration.
func formatDuration(d *durationpb.Duration) string {
	if s := d.GetSeconds(); s > int64(time.Duration(1<<63-1)/time.Second) || s < -int64(time.Duration(1<<63-1)/time.Second) {
		return fmt.Sprintf("%ds", s)
	}
	return d.AsDuration().String()
}

// ValidateFlowKey checks a job's concurrency or sequence key: empty
// (none), or 1..pulsetype.MaxFlowKeyBytes bytes of text Postgres can
// store.
func ValidateFlowKey(field, key string) (string, error) {
	if len(key) > pulsetype.MaxFlowKeyBytes {
		return "", apierr.Invalid(field, "is %d bytes; the limit is %d", len(key), pulsetype.MaxFlowKeyBytes)
	}
	if err := storable.Text(field, key); err != nil {
		return "", err
	}
	return key, nil
}

// ValidateRateKey checks a job's rate key: empty (none), or
// 1..pulsetype.MaxRateKeyBytes bytes of text Postgres can store.
func ValidateRateKey(field, key string) (string, error) {
	if len(key) > pulsetype.MaxRateKeyBytes {
		return "", apierr.Invalid(field, "is %d bytes; the limit is %d", len(key), pulsetype.MaxRateKeyBytes)
	}
	if err := storable.Text(field, key); err != nil {
		return "", err
	}
	return key, nil
}
