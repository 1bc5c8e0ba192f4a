package app_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// A topic's per-key limits over HTTP and gRPC: operators set and clear
// them, producers and workers cannot; bad settings are refused naming the
// field, with nothing written; a job's concurrency and sequence keys go
// in through the submit, and bad ones are refused naming the field.
func TestTopicKeyLimits(t *testing.T) {
	t.Parallel()
	b := setupAuth(t, false)
	r := b.do(t, "PUT", "/v1/topics/reports/key-limits", `{"max_running_per_key":2,"sequence_on_failure":"block"}`, operator)
	require.Equal(t, http.StatusOK, r.status, r.body)
	var got pulsehttp.Topic
	require.NoError(t, json.Unmarshal([]byte(r.body), &got))
	require.NotNil(t, got.MaxRunningPerKey)
	require.Equal(t, int32(2), *got.MaxRunningPerKey)
	require.Equal(t, "block", got.SequenceOnFailure)

	for _, who := range []string{producer, worker} {
		r = b.do(t, "PUT", "/v1/topics/reports/key-limits", `{"max_running_per_key":null}`, who)
		require.Equal(t, http.StatusForbidden, r.status, r.body)
	}
	for body, field := range map[string]string{
		`{}`:                                  "max_running_per_key",
		`{"max_running_per_key":0}`:           "max_running_per_key",
		`{"max_running_per_key":-1}`:          "max_running_per_key",
		`{"max_running_per_key":1e30}`:        "max_running_per_key",
		`{"max_running_per_key":1000001}`:     "max_running_per_key",
		`{"max_running_per_key":"two"}`:       "max_running_per_key",
		`{"sequence_on_failure":"skip"}`:      "sequence_on_failure",
		`{"sequence_on_failure":"a\u0000b"}`:  "sequence_on_failure",
		`{"sequence_on_failure":"bl\uffffk"}`: "sequence_on_failure",
	} {
		r = b.do(t, "PUT", "/v1/topics/other/key-limits", body, operator)
		require.Equal(t, http.StatusBadRequest, r.status, body)
		require.Equal(t, "invalid_argument", r.code, body)
		require.Contains(t, r.body, `"field":"`+field+`"`, body)
	}
	r = b.do(t, "GET", "/v1/topics/other", "", producer)
	require.Equal(t, http.StatusOK, r.status, r.body)
	var other pulsehttp.Topic
	require.NoError(t, json.Unmarshal([]byte(r.body), &other))
	require.Nil(t, other.MaxRunningPerKey, "nothing refused was written")
	require.Empty(t, other.SequenceOnFailure)

	// Keys on a submit: good ones land on the job, bad ones are refused
	// naming the field.
	r = b.do(t, "POST", "/v1/jobs", `{"topic":"reports","concurrency_key":"acme","sequence_key":"acme-1"}`, producer)
	require.Equal(t, http.StatusCreated, r.status, r.body)
	for body, field := range map[string]string{
		`{"topic":"reports","concurrency_key":"a\u0000b"}`:        "concurrency_key",
		`{"topic":"reports","sequence_key":"a\u0000b"}`:           "sequence_key",
		`{"topic":"reports","concurrency_key":"` + longKey + `"}`: "concurrency_key",
		`{"topic":"unsequenced","sequence_key":"s"}`:              "sequence_key",
	} {
		r = b.do(t, "POST", "/v1/jobs", body, producer)
		require.Equal(t, http.StatusBadRequest, r.status, body+" "+r.body)
		require.Contains(t, r.body, field, body)
	}

	// gRPC: the same rules.
	ctx := t.Context()
	bad := int32(0)
	_, err := b.topics.SetTopicKeyLimits(as(ctx, operator), &pulsev1.SetTopicKeyLimitsRequest{Topic: "grpc.t", MaxRunningPerKey: &bad})
	require.Equal(t, codes.InvalidArgument, status.Code(err), err)
	require.Contains(t, err.Error(), "max_running_per_key")
	two := int32(2)
	_, err = b.topics.SetTopicKeyLimits(as(ctx, producer), &pulsev1.SetTopicKeyLimitsRequest{Topic: "grpc.t", MaxRunningPerKey: &two})
	require.Equal(t, codes.PermissionDenied, status.Code(err), err)
	resp, err := b.topics.SetTopicKeyLimits(as(ctx, operator), &pulsev1.SetTopicKeyLimitsRequest{Topic: "grpc.t", MaxRunningPerKey: &two})
	require.NoError(t, err)
	require.Equal(t, int32(2), resp.GetTopic().GetMaxRunningPerKey())
	resp, err = b.topics.SetTopicKeyLimits(as(ctx, operator), &pulsev1.SetTopicKeyLimitsRequest{Topic: "grpc.t"})
	require.NoError(t, err)
	require.Nil(t, resp.GetTopic().MaxRunningPerKey)
	_, err = b.client.SubmitJob(as(ctx, producer), &pulsev1.SubmitJobRequest{Job: &pulsev1.JobSpec{Topic: "grpc.t", ConcurrencyKey: "a\x00b"}})
	require.Equal(t, codes.InvalidArgument, status.Code(err), err)
	require.Contains(t, err.Error(), "concurrency_key")
}

// longKey is one byte past the longest concurrency or sequence key.
var longKey = strings.Repeat("k", 256)
