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

// TestTopics drives the topic routes and TopicService of a whole
// control-api with authentication on: who may read and set limits, every
// refusal naming its field, and no cross-site change.
func TestTopics(t *testing.T) {
	t.Parallel()

	t.Run("OperatorsSetLimitsProducersRead", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t, false)
		r := b.do(t, http.MethodPut, "/v1/topics/email.send", `{"max_running": 5}`, operator)
		require.Equal(t, http.StatusOK, r.status, r.body)
		var got pulsehttp.Topic
		require.NoError(t, json.Unmarshal([]byte(r.body), &got))
		require.Equal(t, "email.send", got.Topic)
		require.Equal(t, int32(5), *got.MaxRunning)
		require.Equal(t, "op", got.LimitUpdatedBy)
		require.NotNil(t, got.LimitUpdatedAt)

		for _, who := range []string{producer, worker} {
			r = b.do(t, "PUT", "/v1/topics/email.send", `{"max_running": 50}`, who)
			require.Equal(t, http.StatusForbidden, r.status, r.body)
			require.Equal(t, "permission_denied", r.code)
		}
		r = b.do(t, "PUT", "/v1/topics/email.send", `{"max_running": 50}`, "")
		require.Equal(t, http.StatusUnauthorized, r.status, r.body)

		r = b.do(t, "GET", "/v1/topics", "", producer)
		require.Equal(t, http.StatusOK, r.status, r.body)
		var list pulsehttp.TopicList
		require.NoError(t, json.Unmarshal([]byte(r.body), &list))
		require.Len(t, list.Topics, 1)
		require.Equal(t, int32(5), *list.Topics[0].MaxRunning, "a producer's limit change did not happen")
		r = b.do(t, "GET", "/v1/topics/email.send", "", producer)
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = b.do(t, "GET", "/v1/topics", "", worker)
		require.Equal(t, http.StatusForbidden, r.status, r.body)

		r = b.do(t, "PUT", "/v1/topics/email.send", `{"max_running": null}`, opToken)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Contains(t, r.body, `"max_running":null`)
		r = b.do(t, "GET", "/v1/topics/nothing.here", "", producer)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Contains(t, r.body, `"topic":"nothing.here","pending":0`, "a topic nothing knows of reads as zeros")
	})

	t.Run("HTTPRefusesBadValuesNamingTheField", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t, false)
		for _, tc := range []struct{ name, path, body, field string }{
			{"Negative", "/v1/topics/t", `{"max_running": -1}`, "max_running"},
			{"AboveTheBound", "/v1/topics/t", `{"max_running": 1000001}`, "max_running"},
			{"Huge", "/v1/topics/t", `{"max_running": 99999999999999999999999}`, "max_running"},
			{"Fraction", "/v1/topics/t", `{"max_running": 2.5}`, "max_running"},
			{"String", "/v1/topics/t", `{"max_running": "5"}`, "max_running"},
			{"Missing", "/v1/topics/t", `{}`, "max_running"},
			{"EmptyBody", "/v1/topics/t", ``, "body"},
			{"UnknownField", "/v1/topics/t", `{"max_running": 1, "min_running": 1}`, "min_running"},
			{"NotAnObject", "/v1/topics/t", `[1]`, "body"},
			{"TrailingData", "/v1/topics/t", `{"max_running": 1} {}`, "body"},
			{"NULInTopic", "/v1/topics/a%00b", `{"max_running": 1}`, "topic"},
			{"InvalidUTF8InTopic", "/v1/topics/a%FFb", `{"max_running": 1}`, "topic"},
			{"SpaceInTopic", "/v1/topics/a%20b", `{"max_running": 1}`, "topic"},
			{"LongTopic", "/v1/topics/" + strings.Repeat("a", 129), `{"max_running": 1}`, "topic"},
			{"InvalidUTF8InKey", "/v1/topics/t", "{\"max_running\": 1, \"\xff\": 1}", "\ufffd"},
			{"EscapedNULInKey", "/v1/topics/t", `{"max_running": 1, "a\u0000": 1}`, `a\x00`},
		} {
			r := b.do(t, "PUT", tc.path, tc.body, operator)
			require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", tc.name, r.body)
			require.Equal(t, "invalid_argument", r.code, tc.name)
			var e pulsehttp.ErrorEnvelope
			require.NoError(t, json.Unmarshal([]byte(r.body), &e), tc.name)
			require.Equal(t, tc.field, e.Error.Field, "%s: %s", tc.name, r.body)
		}
		r := b.do(t, "GET", "/v1/topics/a%00b", "", producer)
		require.Equal(t, http.StatusBadRequest, r.status, r.body)
		r = b.do(t, "GET", "/v1/topics", "", producer)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.JSONEq(t, `{"topics":[]}`, r.body, "no refused change was stored")
	})

	t.Run("GRPCRefusesBadValuesAndNonOperators", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t, false)
		ctx := t.Context()
		limit := func(n int32) *int32 { return &n }
		for _, tc := range []struct {
			name string
			req  *pulsev1.SetTopicLimitRequest
		}{
			{"Negative", &pulsev1.SetTopicLimitRequest{Topic: "t", MaxRunning: limit(-1)}},
			{"AboveTheBound", &pulsev1.SetTopicLimitRequest{Topic: "t", MaxRunning: limit(1_000_001)}},
			{"NoTopic", &pulsev1.SetTopicLimitRequest{MaxRunning: limit(1)}},
			{"NULInTopic", &pulsev1.SetTopicLimitRequest{Topic: "a\x00b", MaxRunning: limit(1)}},
			{"SpaceInTopic", &pulsev1.SetTopicLimitRequest{Topic: "a b", MaxRunning: limit(1)}},
		} {
			_, err := b.topics.SetTopicLimit(as(ctx, operator), tc.req)
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", tc.name, err)
		}
		// Invalid UTF-8 never reaches the service: gRPC refuses to
		// marshal a proto3 string that is not UTF-8.
		_, err := b.topics.SetTopicLimit(as(ctx, operator), &pulsev1.SetTopicLimitRequest{Topic: "a\xffb", MaxRunning: limit(1)})
		require.Error(t, err)

		_, err = b.topics.SetTopicLimit(as(ctx, producer), &pulsev1.SetTopicLimitRequest{Topic: "t", MaxRunning: limit(1)})
		require.Equal(t, codes.PermissionDenied, status.Code(err), err)
		_, err = b.topics.ListTopics(as(ctx, worker), &pulsev1.ListTopicsRequest{})
		require.Equal(t, codes.PermissionDenied, status.Code(err), err)

		set, err := b.topics.SetTopicLimit(as(ctx, operator), &pulsev1.SetTopicLimitRequest{Topic: "t", MaxRunning: limit(3)})
		require.NoError(t, err)
		require.Equal(t, int32(3), set.GetTopic().GetMaxRunning())
		list, err := b.topics.ListTopics(as(ctx, producer), &pulsev1.ListTopicsRequest{})
		require.NoError(t, err)
		require.Len(t, list.GetTopics(), 1)
		require.Equal(t, "op", list.GetTopics()[0].GetLimitUpdatedBy())
		cleared, err := b.topics.SetTopicLimit(as(ctx, opToken), &pulsev1.SetTopicLimitRequest{Topic: "t"})
		require.NoError(t, err)
		require.Nil(t, cleared.GetTopic().MaxRunning)
	})

	t.Run("CrossSiteChangeIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t, false)
		for _, header := range []map[string]string{
			{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
			{"Origin": "https://evil.example"},
		} {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, b.scheme+"://"+b.app.AdminAddr()+"/v1/topics/t",
				strings.NewReader(`{"max_running": 0}`))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", operator)
			for k, v := range header {
				req.Header.Set(k, v)
			}
			resp, err := b.http.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusForbidden, resp.StatusCode, header)
		}
		r := b.do(t, "GET", "/v1/topics", "", producer)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.JSONEq(t, `{"topics":[]}`, r.body, "no cross-site limit took effect")
	})
}
