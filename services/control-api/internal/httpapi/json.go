package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/storable"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

// The wire shapes are declared once, in pkg/pulsehttp, which the CLI
// decodes too; the names here are this package's for them.

// jobSpecJSON is the body of POST /v1/jobs and each entry of a batch.
// args stays raw so its bytes (big integers, key order) reach the service
// unchanged; priority is a pointer so an explicit 0 differs from "unset".
type jobSpecJSON = pulsehttp.JobSpec

type retryPolicyJSON = pulsehttp.RetryPolicy

// decodeJobSpec decodes one job's JSON (the body, or a batch member
// under prefix) strictly, as decodeStorable does. Its retry object is
// decoded on its own first, so a key it does not know is named with its
// path, "retry.bsae": the decoder names an unknown field of a nested
// object without one.
func decodeJobSpec(data []byte, prefix string, into *jobSpecJSON) error {
	var head struct {
		Retry     json.RawMessage   `json:"retry"`
		DependsOn []json.RawMessage `json:"depends_on"`
	}
	if json.Unmarshal(data, &head) == nil && !isNull(head.Retry) {
		var p retryPolicyJSON
		if err := decodeObject(head.Retry, join(prefix, "retry"), &p); err != nil {
			return err
		}
	}
	// Each dependency is a string or an object, named by its place.
	for k, raw := range head.DependsOn {
		field := join(prefix, fmt.Sprintf("depends_on[%d]", k))
		switch t := bytes.TrimSpace(raw); {
		case len(t) > 0 && t[0] == '"':
		case len(t) > 0 && t[0] == '{':
			var d struct {
				Job             string `json:"job"`
				OnParentFailure string `json:"on_parent_failure"`
			}
			if err := decodeObject(raw, field, &d); err != nil {
				return err
			}
		default:
			return apierr.Invalid(field, "must be a job id, \"$n\", or {\"job\": ..., \"on_parent_failure\": \"cancel\" or \"run\"}")
		}
	}
	return decodeStorable(data, prefix, into)
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

func specToWire(j *jobSpecJSON, prefix string) (*pulsev1.JobSpec, error) {
	spec := &pulsev1.JobSpec{
		Topic:          j.Topic,
		MaxAttempts:    j.MaxAttempts,
		IdempotencyKey: j.IdempotencyKey,
	}
	if !bytes.Equal(bytes.TrimSpace(j.Args), []byte("null")) {
		spec.Args = j.Args
	}
	if j.Priority != nil {
		spec.Priority, spec.HasPriority = *j.Priority, true
	}
	if j.RunAt != nil && *j.RunAt != "" {
		t, err := time.Parse(time.RFC3339Nano, *j.RunAt)
		if err != nil {
			return nil, apierr.Invalid(join(prefix, "run_at"), "%q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", *j.RunAt)
		}
		spec.RunAt = timestamppb.New(t)
	}
	var err error
	if spec.Timeout, err = parseDuration(join(prefix, "timeout"), j.Timeout, "30s or 5m"); err != nil {
		return nil, err
	}
	if spec.UniqueFor, err = parseDuration(join(prefix, "unique_for"), j.UniqueFor, "1h or 24h"); err != nil {
		return nil, err
	}
	spec.Tags = j.Tags
	spec.ReplaceKey = j.ReplaceKey
	spec.RateKey = j.RateKey
	spec.ConcurrencyKey = j.ConcurrencyKey
	spec.SequenceKey = j.SequenceKey
	if spec.ReplaceMode, err = replaceModeToWire(join(prefix, "replace_mode"), j.ReplaceMode); err != nil {
		return nil, err
	}
	if spec.Retry, err = retryToWire(j.Retry, join(prefix, "retry")); err != nil {
		return nil, err
	}
	for k, d := range j.DependsOn {
		dep := &pulsev1.Dependency{Job: d.Job}
		switch d.OnParentFailure {
		case "", "cancel":
			dep.OnParentFailure = pulsev1.ParentFailurePolicy_PARENT_FAILURE_POLICY_CANCEL
		case "run":
			dep.OnParentFailure = pulsev1.ParentFailurePolicy_PARENT_FAILURE_POLICY_RUN
		default:
			return nil, apierr.Invalid(join(prefix, fmt.Sprintf("depends_on[%d].on_parent_failure", k)), "%q is not a policy: cancel or run", d.OnParentFailure)
		}
		spec.DependsOn = append(spec.DependsOn, dep)
	}
	return spec, nil
}

// replaceModeToWire reads a replace_mode by its name; "" is unset.
func replaceModeToWire(field, mode string) (pulsev1.ReplaceMode, error) {
	switch mode {
	case "":
		return pulsev1.ReplaceMode_REPLACE_MODE_UNSPECIFIED, nil
	case "replace":
		return pulsev1.ReplaceMode_REPLACE_MODE_REPLACE, nil
	case "keep_earlier_run_at":
		return pulsev1.ReplaceMode_REPLACE_MODE_KEEP_EARLIER_RUN_AT, nil
	case "keep_first":
		return pulsev1.ReplaceMode_REPLACE_MODE_KEEP_FIRST, nil
	}
	return 0, apierr.Invalid(field, "%q is not a replace mode: replace, keep_earlier_run_at or keep_first", mode)
}

// retryToWire reads a job's "retry" object (absent or null: none). Its
// members are Go durations; which combinations and ranges are allowed is
// the service's to say (jobspec.ValidateRetry), in the same words over
// gRPC.
func retryToWire(in *retryPolicyJSON, field string) (*pulsev1.RetryPolicy, error) {
	if in == nil {
		return nil, nil
	}
	p := &pulsev1.RetryPolicy{}
	var err error
	if p.Base, err = parseDuration(join(field, "base"), in.Base, "2s or 500ms"); err != nil {
		return nil, err
	}
	if p.Max, err = parseDuration(join(field, "max"), in.Max, "10m or 1h"); err != nil {
		return nil, err
	}
	if p.Fixed, err = parseDuration(join(field, "fixed"), in.Fixed, "30s or 5m"); err != nil {
		return nil, err
	}
	return p, nil
}

// retryToJSON shows a job's own backoff; nil when it has none.
func retryToJSON(p *pulsev1.RetryPolicy) *retryPolicyJSON {
	if p == nil {
		return nil
	}
	str := func(d *durationpb.Duration) string {
		if d == nil {
			return ""
		}
		return d.AsDuration().String()
	}
	return &retryPolicyJSON{Base: str(p.GetBase()), Max: str(p.GetMax()), Fixed: str(p.GetFixed())}
}

// parseDuration reads an optional duration field ("" is unset); the
// service checks its range.
func parseDuration(field, s, example string) (*durationpb.Duration, error) {
	if s == "" {
		return nil, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return nil, apierr.Invalid(field, "%q is not a duration such as %s", s, example)
	}
	return durationpb.New(d), nil
}

type submitResultJSON = pulsehttp.SubmitResult

type batchResultJSON = pulsehttp.BatchResult

type listJSON = pulsehttp.JobList

// jobJSON is a job as the HTTP API shows it. Unset times are null.
type jobJSON = pulsehttp.Job

type attemptErrorJSON = pulsehttp.AttemptError

func jobToJSON(j *pulsev1.Job) jobJSON {
	out := jobJSON{
		ID:             j.GetId(),
		Topic:          j.GetTopic(),
		Args:           j.GetArgs(),
		Priority:       j.GetPriority(),
		Status:         strings.TrimPrefix(j.GetStatus().String(), "JOB_STATUS_"),
		Attempts:       j.GetAttempts(),
		Snoozes:        j.GetSnoozes(),
		MaxAttempts:    j.GetMaxAttempts(),
		Errors:         make([]attemptErrorJSON, len(j.GetErrors())),
		LockedBy:       j.GetLockedBy(),
		LeaseUntil:     api.TimeFromWire(j.GetLeaseUntil()),
		NextRunAt:      api.TimeFromWire(j.GetNextRunAt()),
		SubmittedAt:    api.TimeFromWire(j.GetSubmittedAt()),
		StartedAt:      api.TimeFromWire(j.GetStartedAt()),
		FinishedAt:     api.TimeFromWire(j.GetFinishedAt()),
		ScheduleID:     j.GetScheduleId(),
		IdempotencyKey: j.GetIdempotencyKey(),
		Traceparent:    j.GetTraceparent(),
		Tracestate:     j.GetTracestate(),
	}
	if len(out.Args) == 0 {
		out.Args = json.RawMessage(`{}`)
	}
	if d := j.GetTimeout(); d != nil {
		s := d.AsDuration().String()
		out.Timeout = &s
	}
	out.Retry = retryToJSON(j.GetRetry())
	// The gateway stores only valid JSON; a result written some other way
	// is left out rather than breaking the response.
	if r := j.GetResult(); len(r) > 0 && json.Valid(r) {
		out.Result = r
	}
	if j.Progress != nil {
		p := j.GetProgress()
		out.Progress = &p
	}
	if m := j.GetMetadata(); len(m) > 0 {
		out.Metadata = m
	}
	out.Tags = j.GetTags()
	out.ReplaceKey, out.Replaced = j.GetReplaceKey(), j.GetReplaced()
	out.WorkflowID, out.BlockedBy = j.GetWorkflowId(), j.GetBlockedBy()
	for i, e := range j.GetErrors() {
		out.Errors[i] = attemptErrorJSON{Attempt: e.GetAttempt(), Error: e.GetError(), Worker: e.GetWorker(), At: api.TimeFromWire(e.GetAt())}
	}
	return out
}

type errorEnvelope = pulsehttp.ErrorEnvelope

type errorJSON = pulsehttp.Error

// decodeObject decodes one JSON object strictly into v: unknown fields,
// wrong types and trailing data are errors naming the offending field, as
// the request spells it under prefix ("" for the body itself).
func decodeObject(data []byte, prefix string, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	whole := prefix
	if whole == "" {
		whole = "body"
	}
	if err := dec.Decode(v); err != nil {
		return decodeError(err, prefix, whole)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return apierr.Invalid(whole, "has data after the JSON object")
	}
	return nil
}

// decodeStorable is decodeObject for a body whose values reach Postgres:
// once the object decodes, each of its members is held to what Postgres
// can store (storable.JSON), naming the member. Go's decoder would
// otherwise turn invalid UTF-8 and lone surrogates into U+FFFD without a
// word, and \u0000 into a NUL that Postgres refuses; a string that means
// something else than what was sent, or a 500, is worse than a 400.
func decodeStorable(data []byte, prefix string, v any) error {
	if err := decodeObject(data, prefix, v); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // {
		return nil //nolint:nilerr // decodeObject accepted it; nothing more to see
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil //nolint:nilerr // decodeObject accepted it; nothing more to see
		}
		var raw json.RawMessage // the member's bytes as sent
		if err := dec.Decode(&raw); err != nil {
			return nil //nolint:nilerr // decodeObject accepted it; nothing more to see
		}
		name, _ := key.(string)
		if err := storable.JSON(join(prefix, name), raw); err != nil {
			return err
		}
	}
	return nil
}

func decodeError(err error, prefix, whole string) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return apierr.Invalid(whole, "is empty; expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return apierr.Invalid(whole, "is not valid JSON: unexpected end of input")
	case errors.As(err, &syntax):
		return apierr.Invalid(whole, "is not valid JSON: %s (at byte %d)", syntax.Error(), syntax.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return apierr.Invalid(whole, "must be a JSON object, not %s", article(typ.Value))
		}
		return apierr.Invalid(join(prefix, typ.Field), "must be %s, not %s", describe(typ.Type), article(typ.Value))
	}
	const unknown = "json: unknown field "
	if msg := err.Error(); strings.HasPrefix(msg, unknown) {
		name := strings.Trim(strings.TrimPrefix(msg, unknown), `"`)
		return apierr.Invalid(join(prefix, name), "is not a known field")
	}
	return apierr.Invalid(whole, "%v", err)
}

func join(prefix, field string) string {
	if prefix == "" {
		return field
	}
	return prefix + "." + field
}

// describe names the JSON a Go type accepts.
func describe(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("a whole number that fits %s", t.Kind())
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Bool:
		return "true or false"
	}
	return "a JSON " + t.Kind().String()
}

// article turns the decoder's value description ("string", "number 1.5")
// into a phrase.
func article(v string) string {
	switch {
	case strings.HasPrefix(v, "number"):
		return "a " + v
	case v == "array", v == "object":
		return "an " + v
	}
	return "a " + v
}

func writeJSON(w http.ResponseWriter, code int, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // args come back as they were sent
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes()) // a client that left is not our error
	return nil
}
