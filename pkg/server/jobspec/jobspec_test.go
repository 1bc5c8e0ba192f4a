package jobspec_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobspec"
)

// ValidateArgs refuses exactly what Postgres's jsonb refuses (package
// storable), naming the field; an escaped backslash before "u0000" is an
// ordinary string and stays valid.
func TestValidateArgsRefusesWhatPostgresCannotStore(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{
		`{"path":"C:\\u0000dir"}`, `{"a":"\ud83d\ude00"}`, `{"n":12345678901234567890}`, `{"a":1e131071}`, `  {} `,
	} {
		got, err := jobspec.ValidateArgs("args", []byte(ok), 0)
		require.NoError(t, err, ok)
		require.Equal(t, strings.TrimSpace(ok), string(got))
	}
	for _, bad := range []string{
		`{"a":"\u0000"}`, `{"\u0000":1}`, "{\"a\":\"\xff\"}", "{\"\xc3\":1}", `{"a":1e1000000}`,
		`{"a":-1e1000000}`, `{"a":"\ud83d"}`, `{"a":"\ude00x"}`, `{"a":1e-1000000}`,
	} {
		_, err := jobspec.ValidateArgs("jobs[2].args", []byte(bad), 0)
		require.ErrorIs(t, err, apierr.ErrInvalidArgument, "%q", bad)
		require.Equal(t, "jobs[2].args", apierr.FieldOf(err), "%q", bad)
	}
}

func TestValidateRefusesUnstorableKeysAndTimes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec  *pulsev1.JobSpec
		field string
	}{
		{&pulsev1.JobSpec{Topic: "t", IdempotencyKey: "a\x00b"}, "job.idempotency_key"},
		{&pulsev1.JobSpec{Topic: "t", IdempotencyKey: "a\xffb"}, "job.idempotency_key"},
		{&pulsev1.JobSpec{Topic: "t", RunAt: timestamppb.New(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC))}, "job.run_at"},
		{&pulsev1.JobSpec{Topic: "t", RunAt: timestamppb.New(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC))}, "job.run_at"},
		{&pulsev1.JobSpec{Topic: "t", RunAt: &timestamppb.Timestamp{Seconds: 1 << 60}}, "job.run_at"},
		{&pulsev1.JobSpec{Topic: "t\xff"}, "job.topic"},
		{&pulsev1.JobSpec{Topic: "t\x00"}, "job.topic"},
		{&pulsev1.JobSpec{Topic: "t", RateKey: "a\x00b"}, "job.rate_key"},
		{&pulsev1.JobSpec{Topic: "t", RateKey: "a\xffb"}, "job.rate_key"},
		{&pulsev1.JobSpec{Topic: "t", RateKey: strings.Repeat("k", 256)}, "job.rate_key"},
		{&pulsev1.JobSpec{Topic: "t", ConcurrencyKey: "a\x00b"}, "job.concurrency_key"},
		{&pulsev1.JobSpec{Topic: "t", ConcurrencyKey: "a\xffb"}, "job.concurrency_key"},
		{&pulsev1.JobSpec{Topic: "t", ConcurrencyKey: strings.Repeat("k", 256)}, "job.concurrency_key"},
		{&pulsev1.JobSpec{Topic: "t", SequenceKey: "a\x00b"}, "job.sequence_key"},
		{&pulsev1.JobSpec{Topic: "t", SequenceKey: "a\xffb"}, "job.sequence_key"},
		{&pulsev1.JobSpec{Topic: "t", SequenceKey: strings.Repeat("k", 256)}, "job.sequence_key"},
	} {
		_, err := jobspec.Validate("job", tc.spec, jobspec.Limits{})
		require.ErrorIs(t, err, apierr.ErrInvalidArgument, "%v", tc.spec)
		require.Equal(t, tc.field, apierr.FieldOf(err), "%v", err)
	}
	job, err := jobspec.Validate("", &pulsev1.JobSpec{Topic: "t", IdempotencyKey: "é日本", RunAt: timestamppb.New(time.Now())}, jobspec.Limits{})
	require.NoError(t, err)
	require.Equal(t, "é日本", job.IdempotencyKey)
}

// timeout and unique_for are optional durations within their bounds;
// anything else is refused naming the field, however odd the wire value.
func TestValidateTimeoutAndUniqueFor(t *testing.T) {
	t.Parallel()
	for _, field := range []string{"timeout", "unique_for"} {
		set := func(d *durationpb.Duration) *pulsev1.JobSpec {
			spec := &pulsev1.JobSpec{Topic: "t"}
			if field == "timeout" {
				spec.Timeout = d
			} else {
				spec.UniqueFor = d
			}
			return spec
		}
		for _, bad := range []*durationpb.Duration{
			{Seconds: 0},                     // zero said out loud
			{Seconds: -30},                   // negative
			{Seconds: 0, Nanos: -5},          // negative nanos
			{Seconds: 0, Nanos: 999_999_999}, // under a second
			{Seconds: 400 * 24 * 3600},       // beyond both bounds
			{Seconds: 315_576_000_000},       // the wire's largest, beyond time.Duration
			{Seconds: 1 << 62},               // not a valid Duration at all
			{Seconds: 5, Nanos: -1},          // mixed signs
			{Seconds: 5, Nanos: 1},           // finer than Postgres keeps
		} {
			_, err := jobspec.Validate("job", set(bad), jobspec.Limits{})
			require.ErrorIs(t, err, apierr.ErrInvalidArgument, "%s %v", field, bad)
			require.Equal(t, "job."+field, apierr.FieldOf(err), "%v", err)
		}
		job, err := jobspec.Validate("job", set(durationpb.New(90*time.Second)), jobspec.Limits{})
		require.NoError(t, err)
		got := job.Timeout
		if field == "unique_for" {
			got = job.UniqueFor
		}
		require.Equal(t, 90*time.Second, got)
	}
	_, err := jobspec.Validate("", &pulsev1.JobSpec{Topic: "t", Timeout: durationpb.New(25 * time.Hour)}, jobspec.Limits{})
	require.ErrorContains(t, err, "timeout: is 25h0m0s; it must be between 1s and 24h0m0s")
	job, err := jobspec.Validate("", &pulsev1.JobSpec{Topic: "t", UniqueFor: durationpb.New(30 * 24 * time.Hour)}, jobspec.Limits{})
	require.NoError(t, err)
	require.Zero(t, job.Timeout)
}

// retry is one form of backoff, base (+ max) or fixed, each duration 1ms
// to 366 days; anything else is refused naming the member.
func TestValidateRetry(t *testing.T) {
	t.Parallel()
	d := durationpb.New
	for name, c := range map[string]struct {
		p     *pulsev1.RetryPolicy
		field string
	}{
		"empty":           {&pulsev1.RetryPolicy{}, "job.retry"},
		"both forms":      {&pulsev1.RetryPolicy{Base: d(time.Second), Fixed: d(time.Second)}, "job.retry"},
		"max and fixed":   {&pulsev1.RetryPolicy{Max: d(time.Second), Fixed: d(time.Second)}, "job.retry"},
		"max alone":       {&pulsev1.RetryPolicy{Max: d(time.Minute)}, "job.retry.max"},
		"base above max":  {&pulsev1.RetryPolicy{Base: d(time.Minute), Max: d(time.Second)}, "job.retry.max"},
		"negative base":   {&pulsev1.RetryPolicy{Base: d(-time.Second)}, "job.retry.base"},
		"zero base":       {&pulsev1.RetryPolicy{Base: &durationpb.Duration{}}, "job.retry.base"},
		"zero fixed":      {&pulsev1.RetryPolicy{Fixed: &durationpb.Duration{}}, "job.retry.fixed"},
		"sub-millisecond": {&pulsev1.RetryPolicy{Fixed: d(500 * time.Microsecond)}, "job.retry.fixed"},
		"beyond 366d":     {&pulsev1.RetryPolicy{Fixed: d(367 * 24 * time.Hour)}, "job.retry.fixed"},
		"max beyond 366d": {&pulsev1.RetryPolicy{Base: d(time.Second), Max: d(367 * 24 * time.Hour)}, "job.retry.max"},
		"huge":            {&pulsev1.RetryPolicy{Base: &durationpb.Duration{Seconds: 315_576_000_000}}, "job.retry.base"},
		"invalid wire":    {&pulsev1.RetryPolicy{Fixed: &durationpb.Duration{Seconds: 1 << 62}}, "job.retry.fixed"},
		"finer than µs":   {&pulsev1.RetryPolicy{Base: &durationpb.Duration{Seconds: 1, Nanos: 1}}, "job.retry.base"},
	} {
		_, err := jobspec.Validate("job", &pulsev1.JobSpec{Topic: "t", Retry: c.p}, jobspec.Limits{})
		require.ErrorIs(t, err, apierr.ErrInvalidArgument, name)
		require.Equal(t, c.field, apierr.FieldOf(err), "%s: %v", name, err)
	}
	for _, c := range []struct {
		p    *pulsev1.RetryPolicy
		want pulsetype.JobRetry
	}{
		{nil, pulsetype.JobRetry{}},
		{&pulsev1.RetryPolicy{Base: d(2 * time.Second), Max: d(10 * time.Minute)}, pulsetype.JobRetry{Base: 2 * time.Second, Max: 10 * time.Minute}},
		{&pulsev1.RetryPolicy{Base: d(time.Millisecond)}, pulsetype.JobRetry{Base: time.Millisecond}},
		{&pulsev1.RetryPolicy{Base: d(time.Minute), Max: d(time.Minute)}, pulsetype.JobRetry{Base: time.Minute, Max: time.Minute}},
		{&pulsev1.RetryPolicy{Fixed: d(366 * 24 * time.Hour)}, pulsetype.JobRetry{Fixed: 366 * 24 * time.Hour}},
	} {
		job, err := jobspec.Validate("", &pulsev1.JobSpec{Topic: "t", Retry: c.p}, jobspec.Limits{})
		require.NoError(t, err, "%v", c.p)
		require.Equal(t, c.want, job.Retry)
	}
	_, err := jobspec.Validate("", &pulsev1.JobSpec{Topic: "t", Retry: &pulsev1.RetryPolicy{Base: d(time.Hour), Max: d(time.Minute)}}, jobspec.Limits{})
	require.ErrorContains(t, err, "retry.max: is 1m0s; it must be at least retry.base (1h0m0s)")
}
