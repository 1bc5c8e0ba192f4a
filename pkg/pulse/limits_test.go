package pulse

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// The SDK holds a job to pulsetype's limits before any RPC; every refusal
// names what is wrong.
func TestEnqueueLimits(t *testing.T) {
	t.Parallel()
	okTopics := []string{"a", "orders:v2.created", "0-", strings.Repeat("t", MaxTopicLength)}
	for _, topic := range okTopics {
		_, err := buildJobSpec(topic, nil, nil)
		require.NoError(t, err, "topic %q", topic)
	}
	badTopics := map[string]string{
		"":                                    "must not be empty",
		strings.Repeat("t", MaxTopicLength+1): "the limit is 128",
		".a":                                  "does not start with a letter or digit",
		"a b":                                 "characters outside",
		"é":                                   "characters outside",
		"a\x00":                               "characters outside",
		"\xff":                                "characters outside",
	}
	for topic, want := range badTopics {
		_, err := buildJobSpec(topic, nil, nil)
		require.ErrorContains(t, err, "topic", "topic %q", topic)
		require.ErrorContains(t, err, want, "topic %q", topic)
	}

	key := strings.Repeat("k", MaxIdempotencyKeyBytes)
	spec, err := buildJobSpec("t", nil, []EnqueueOption{IdempotencyKey(key)})
	require.NoError(t, err)
	require.Equal(t, key, spec.GetIdempotencyKey())
	badKeys := map[string]string{
		key + "k":                "is 256 bytes; the limit is 255",
		strings.Repeat("é", 128): "is 256 bytes",
		"a\x00b":                 "NUL",
		"a\xffb":                 "not valid UTF-8",
	}
	for k, want := range badKeys {
		_, err := buildJobSpec("t", nil, []EnqueueOption{IdempotencyKey(k)})
		require.ErrorContains(t, err, "idempotency key", "key %q", k)
		require.ErrorContains(t, err, want, "key %q", k)
	}
}

func TestWorkerIDLimit(t *testing.T) {
	t.Parallel()
	_, err := NewWorker([]string{"localhost:1"}, WithWorkerID(strings.Repeat("w", MaxWorkerIDBytes)))
	require.NoError(t, err)
	_, err = NewWorker([]string{"localhost:1"}, WithWorkerID(strings.Repeat("w", MaxWorkerIDBytes+1)))
	require.ErrorContains(t, err, "worker id is 201 bytes; the limit is 200")
}

func TestRegisterRefusesAnInvalidTopic(t *testing.T) {
	t.Parallel()
	w, err := NewWorker([]string{"localhost:1"})
	require.NoError(t, err)
	require.PanicsWithValue(t, `pulse: Register "a b": pulse: topic "a b" has characters outside [A-Za-z0-9._:-] or does not start with a letter or digit`,
		func() { w.Register("a b", func(context.Context, *Job) error { return nil }) })
}

// ReplacePending puts its key and mode on the spec; a key the server would
// refuse, or a mode it does not know, fails before sending.
func TestReplacePendingOption(t *testing.T) {
	t.Parallel()
	spec, err := buildJobSpec("t", nil, []EnqueueOption{ReplacePending("user:1", KeepEarlierRunAt)})
	require.NoError(t, err)
	require.Equal(t, "user:1", spec.GetReplaceKey())
	require.Equal(t, pulsev1.ReplaceMode_REPLACE_MODE_KEEP_EARLIER_RUN_AT, spec.GetReplaceMode())

	for _, opt := range []EnqueueOption{
		ReplacePending("", Replace),
		ReplacePending(strings.Repeat("k", MaxReplaceKeyBytes+1), Replace),
		ReplacePending("a\x00b", Replace),
		ReplacePending("a\xffb", Replace),
		ReplacePending("k", ReplaceMode(0)),
		ReplacePending("k", ReplaceMode(7)),
	} {
		_, err := buildJobSpec("t", nil, []EnqueueOption{opt})
		require.Error(t, err)
	}
}

// RateKey puts its key on the spec; a key the server would refuse fails
// before sending, naming the rate key.
func TestRateKeyOption(t *testing.T) {
	t.Parallel()
	spec, err := buildJobSpec("t", nil, []EnqueueOption{RateKey("tenant:acme")})
	require.NoError(t, err)
	require.Equal(t, "tenant:acme", spec.GetRateKey())

	for _, key := range []string{"", strings.Repeat("k", MaxRateKeyBytes+1), "a\x00b", "a\xffb"} {
		_, err := buildJobSpec("t", nil, []EnqueueOption{RateKey(key)})
		require.ErrorContains(t, err, "rate key")
	}
}

// ConcurrencyKey puts its key on the spec; a key the server would refuse
// fails before sending, naming the concurrency key.
func TestConcurrencyKeyOption(t *testing.T) {
	t.Parallel()
	spec, err := buildJobSpec("t", nil, []EnqueueOption{ConcurrencyKey("tenant:acme")})
	require.NoError(t, err)
	require.Equal(t, "tenant:acme", spec.GetConcurrencyKey())

	for _, key := range []string{"", strings.Repeat("k", MaxFlowKeyBytes+1), "a\x00b", "a\xffb"} {
		_, err := buildJobSpec("t", nil, []EnqueueOption{ConcurrencyKey(key)})
		require.ErrorContains(t, err, "concurrency key")
	}
}

// SequenceKey puts its key on the spec; a key the server would refuse
// fails before sending, naming the sequence key.
func TestSequenceKeyOption(t *testing.T) {
	t.Parallel()
	spec, err := buildJobSpec("t", nil, []EnqueueOption{SequenceKey("order:42")})
	require.NoError(t, err)
	require.Equal(t, "order:42", spec.GetSequenceKey())

	for _, key := range []string{"", strings.Repeat("k", MaxFlowKeyBytes+1), "a\x00b", "a\xffb"} {
		_, err := buildJobSpec("t", nil, []EnqueueOption{SequenceKey(key)})
		require.ErrorContains(t, err, "sequence key")
	}
}
