package app_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// A topic's circuit breaker over HTTP and gRPC: operators set and clear
// it, producers read it, workers do neither; bad settings are refused
// naming the field, with nothing written; clearing a topic without one
// answers 404.
func TestTopicBreakers(t *testing.T) {
	t.Parallel()
	b := setupAuth(t, false)
	r := b.do(t, "PUT", "/v1/topics/payments.charge/breaker", `{"failure_ratio":0.5,"window":"2m","min_volume":20,"cooldown":"30s"}`, operator)
	require.Equal(t, http.StatusOK, r.status, r.body)
	var got pulsehttp.TopicBreaker
	require.NoError(t, json.Unmarshal([]byte(r.body), &got))
	require.Equal(t, pulsehttp.TopicBreaker{Topic: "payments.charge", FailureRatio: 0.5, Window: "2m0s", MinVolume: 20, Cooldown: "30s",
		State: "closed", UpdatedBy: "op", UpdatedAt: got.UpdatedAt}, got)

	for _, who := range []string{producer, worker} {
		r = b.do(t, "PUT", "/v1/topics/payments.charge/breaker", `{"failure_ratio":0.9,"window":"1m","min_volume":1,"cooldown":"1s"}`, who)
		require.Equal(t, http.StatusForbidden, r.status, r.body)
		r = b.do(t, "DELETE", "/v1/topics/payments.charge/breaker", "", who)
		require.Equal(t, http.StatusForbidden, r.status, r.body)
	}
	for body, field := range map[string]string{
		`{"window":"1m","min_volume":1,"cooldown":"1s"}`:                               "failure_ratio",
		`{"failure_ratio":0,"window":"1m","min_volume":1,"cooldown":"1s"}`:             "failure_ratio",
		`{"failure_ratio":1.5,"window":"1m","min_volume":1,"cooldown":"1s"}`:           "failure_ratio",
		`{"failure_ratio":"half","window":"1m","min_volume":1,"cooldown":"1s"}`:        "failure_ratio",
		`{"failure_ratio":0.5,"window":"90s","min_volume":1,"cooldown":"1s"}`:          "window",
		`{"failure_ratio":0.5,"window":"soon","min_volume":1,"cooldown":"1s"}`:         "window",
		`{"failure_ratio":0.5,"window":"1m","cooldown":"1s"}`:                          "min_volume",
		`{"failure_ratio":0.5,"window":"1m","min_volume":99999999999,"cooldown":"1s"}`: "min_volume",
		`{"failure_ratio":0.5,"window":"1m","min_volume":1}`:                           "cooldown",
		`{"failure_ratio":0.5,"window":"1m","min_volume":1,"cooldown":"48h"}`:          "cooldown",
	} {
		r = b.do(t, "PUT", "/v1/topics/other/breaker", body, operator)
		require.Equal(t, http.StatusBadRequest, r.status, body)
		require.Equal(t, "invalid_argument", r.code, body)
		require.Contains(t, r.body, `"field":"`+field+`"`, body)
	}
	r = b.do(t, "PUT", "/v1/topics/bad%20topic/breaker", `{"failure_ratio":0.5,"window":"1m","min_volume":1,"cooldown":"1s"}`, operator)
	require.Equal(t, http.StatusBadRequest, r.status, r.body)

	r = b.do(t, "GET", "/v1/breakers", "", producer)
	require.Equal(t, http.StatusOK, r.status, r.body)
	var list pulsehttp.TopicBreakerList
	require.NoError(t, json.Unmarshal([]byte(r.body), &list))
	require.Len(t, list.Breakers, 1, "nothing refused was written")

	// gRPC: the same rules.
	ctx := t.Context()
	_, err := b.topics.SetTopicBreaker(as(ctx, operator), &pulsev1.SetTopicBreakerRequest{Topic: "grpc.t", FailureRatio: 0.5,
		Window: durationpb.New(time.Minute), MinVolume: 5})
	require.Equal(t, codes.InvalidArgument, status.Code(err), err)
	require.Contains(t, err.Error(), "cooldown")
	_, err = b.topics.SetTopicBreaker(as(ctx, producer), &pulsev1.SetTopicBreakerRequest{Topic: "grpc.t", FailureRatio: 0.5,
		Window: durationpb.New(time.Minute), MinVolume: 5, Cooldown: durationpb.New(time.Minute)})
	require.Equal(t, codes.PermissionDenied, status.Code(err), err)
	set, err := b.topics.SetTopicBreaker(as(ctx, operator), &pulsev1.SetTopicBreakerRequest{Topic: "grpc.t", FailureRatio: 0.25,
		Window: durationpb.New(5 * time.Minute), MinVolume: 5, Cooldown: durationpb.New(time.Minute)})
	require.NoError(t, err)
	require.Equal(t, "closed", set.GetBreaker().GetState())
	all, err := b.topics.ListTopicBreakers(as(ctx, producer), &pulsev1.ListTopicBreakersRequest{})
	require.NoError(t, err)
	require.Len(t, all.GetBreakers(), 2)
	cleared, err := b.topics.ClearTopicBreaker(as(ctx, operator), &pulsev1.ClearTopicBreakerRequest{Topic: "grpc.t"})
	require.NoError(t, err)
	require.True(t, cleared.GetCleared())

	r = b.do(t, "DELETE", "/v1/topics/payments.charge/breaker", "", operator)
	require.Equal(t, http.StatusNoContent, r.status, r.body)
	r = b.do(t, "DELETE", "/v1/topics/payments.charge/breaker", "", operator)
	require.Equal(t, http.StatusNotFound, r.status, r.body)
}
