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

// A topic's rate limit over HTTP and gRPC: operators set and clear it,
// producers and workers cannot; bad settings (zero, negative, huge, NUL,
// unknown key sources) are refused naming the field, with nothing
// written.
func TestTopicRateLimits(t *testing.T) {
	t.Parallel()
	b := setupAuth(t, false)
	r := b.do(t, "PUT", "/v1/topics/api.call/rate-limit", `{"rate_limit":10,"rate_interval":"1s","rate_key":"args:tenant"}`, operator)
	require.Equal(t, http.StatusOK, r.status, r.body)
	var got pulsehttp.Topic
	require.NoError(t, json.Unmarshal([]byte(r.body), &got))
	require.NotNil(t, got.RateLimit)
	require.Equal(t, int64(10), *got.RateLimit.RateLimit)
	require.Equal(t, "1s", got.RateLimit.RateInterval)
	require.Equal(t, "args:tenant", got.RateLimit.RateKey)

	for _, who := range []string{producer, worker} {
		r = b.do(t, "PUT", "/v1/topics/api.call/rate-limit", `{"rate_limit":null}`, who)
		require.Equal(t, http.StatusForbidden, r.status, r.body)
	}
	for body, field := range map[string]string{
		`{}`:                                                               "rate_limit",
		`{"rate_limit":0,"rate_interval":"1s"}`:                            "rate_limit",
		`{"rate_limit":-5,"rate_interval":"1s"}`:                           "rate_limit",
		`{"rate_limit":1e30,"rate_interval":"1s"}`:                         "rate_limit",
		`{"rate_limit":10001,"rate_interval":"1s"}`:                        "rate_limit",
		`{"rate_limit":"ten","rate_interval":"1s"}`:                        "rate_limit",
		`{"rate_limit":1}`:                                                 "rate_interval",
		`{"rate_limit":1,"rate_interval":"0s"}`:                            "rate_interval",
		`{"rate_limit":1,"rate_interval":"-1s"}`:                           "rate_interval",
		`{"rate_limit":1,"rate_interval":"25h"}`:                           "rate_interval",
		`{"rate_limit":1,"rate_interval":"soon"}`:                          "rate_interval",
		`{"rate_limit":1,"rate_interval":"1s","rate_key":"tenant"}`:        "rate_key",
		`{"rate_limit":1,"rate_interval":"1s","rate_key":"args:"}`:         "rate_key",
		`{"rate_limit":1,"rate_interval":"1s","rate_key":"args:a\u0000b"}`: "rate_key",
	} {
		r = b.do(t, "PUT", "/v1/topics/other/rate-limit", body, operator)
		require.Equal(t, http.StatusBadRequest, r.status, body)
		require.Equal(t, "invalid_argument", r.code, body)
		require.Contains(t, r.body, `"field":"`+field+`"`, body)
	}
	r = b.do(t, "GET", "/v1/topics/other", "", producer)
	require.Equal(t, http.StatusOK, r.status, r.body)
	var other pulsehttp.Topic
	require.NoError(t, json.Unmarshal([]byte(r.body), &other))
	require.Nil(t, other.RateLimit, "nothing refused was written")

	// gRPC: the same rules.
	ctx := t.Context()
	_, err := b.topics.SetTopicRateLimit(as(ctx, operator), &pulsev1.SetTopicRateLimitRequest{Topic: "grpc.t",
		RateLimit: &pulsev1.RateLimit{Limit: 5, Key: "none"}})
	require.Equal(t, codes.InvalidArgument, status.Code(err), err)
	require.Contains(t, err.Error(), "rate_limit.interval")
	_, err = b.topics.SetTopicRateLimit(as(ctx, operator), &pulsev1.SetTopicRateLimitRequest{Topic: "grpc.t",
		RateLimit: &pulsev1.RateLimit{Limit: -1, Interval: durationpb.New(time.Second), Key: "none"}})
	require.Equal(t, codes.InvalidArgument, status.Code(err), err)
	require.Contains(t, err.Error(), "rate_limit")
	_, err = b.topics.SetTopicRateLimit(as(ctx, producer), &pulsev1.SetTopicRateLimitRequest{Topic: "grpc.t",
		RateLimit: &pulsev1.RateLimit{Limit: 5, Interval: durationpb.New(time.Second), Key: "none"}})
	require.Equal(t, codes.PermissionDenied, status.Code(err), err)
	resp, err := b.topics.SetTopicRateLimit(as(ctx, operator), &pulsev1.SetTopicRateLimitRequest{Topic: "grpc.t",
		RateLimit: &pulsev1.RateLimit{Limit: 5, Interval: durationpb.New(time.Minute), Key: "job"}})
	require.NoError(t, err)
	require.Equal(t, int32(5), resp.GetTopic().GetRateLimit().GetLimit())
	resp, err = b.topics.SetTopicRateLimit(as(ctx, operator), &pulsev1.SetTopicRateLimitRequest{Topic: "grpc.t"})
	require.NoError(t, err)
	require.Nil(t, resp.GetTopic().GetRateLimit())
}
