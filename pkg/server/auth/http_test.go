package auth_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"
)

var httpPolicy = auth.Policy{
	"GET /healthz":              {auth.Public},
	"GET /metrics":              {auth.Public},
	"GET /v1/jobs/{id}":         auth.Require(auth.RoleProducer),
	"POST /v1/jobs":             auth.Require(auth.RoleProducer),
	"POST /v1/jobs/{id}/cancel": auth.Require(auth.RoleOperator),
	"POST /v1/jobs:batch":       auth.Require(auth.RoleProducer),
	"GET /v1/dispatch":          auth.Require(auth.RoleProducer),
	"POST /v1/dispatch/pause":   auth.Require(auth.RoleOperator),
}

type httpResult struct {
	status    int
	challenge string
	code      string
	message   string
	who       string
}

// serve sends one request through Middleware to a handler that echoes the
// identity it saw.
func serve(t *testing.T, a *auth.Authenticator, method, path, header string) httpResult {
	t.Helper()
	h := auth.Middleware(a, auth.HTTPPolicy(httpPolicy))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := auth.IdentityFrom(r.Context())
		_, _ = w.Write([]byte(id.Name + "/" + string(id.Role)))
	}))
	req := httptest.NewRequest(method, path, nil)
	if header != "" {
		req.Header.Set("Authorization", header)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := httpResult{status: rec.Code, challenge: rec.Header().Get("WWW-Authenticate")}
	if rec.Code == http.StatusOK {
		res.who = rec.Body.String()
		return res
	}
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
	res.code, res.message = body.Error.Code, body.Error.Message
	return res
}

func TestMiddleware(t *testing.T) {
	t.Parallel()

	t.Run("ChecksCredentialsThenRole", func(t *testing.T) {
		t.Parallel()
		a := users(t)
		prod, wk, op := authtest.Basic("prod", "pp"), authtest.Basic("wk", "ww"), authtest.Basic("op", "oo")
		cases := []struct {
			name, method, path, header string
			want                       int
		}{
			{"NoCredentials", "POST", "/v1/jobs", "", 401},
			{"WrongPassword", "POST", "/v1/jobs", authtest.Basic("prod", "x"), 401},
			{"ProducerSubmits", "POST", "/v1/jobs", prod, 200},
			{"ProducerSubmitsABatch", "POST", "/v1/jobs:batch", prod, 200},
			{"ProducerReads", "GET", "/v1/jobs/abc", prod, 200},
			{"ProducerReadsDispatchState", "GET", "/v1/dispatch", prod, 200},
			{"WorkerMayNotRead", "GET", "/v1/jobs/abc", wk, 403},
			{"ProducerMayNotCancel", "POST", "/v1/jobs/abc/cancel", prod, 403},
			{"OperatorCancels", "POST", "/v1/jobs/abc/cancel", op, 200},
			{"WorkerMayNotPause", "POST", "/v1/dispatch/pause", wk, 403},
			{"ProducerMayNotPause", "POST", "/v1/dispatch/pause", prod, 403},
			{"OperatorPauses", "POST", "/v1/dispatch/pause", op, 200},
			{"UnlistedRouteDeniedToProducer", "DELETE", "/v1/jobs/abc", prod, 403},
			{"UnlistedPathDeniedToProducer", "GET", "/v1/secret", prod, 403},
			{"UnlistedRouteNeedsCredentials", "GET", "/v1/secret", "", 401},
			{"UnlistedRouteAllowedToOperator", "GET", "/v1/secret", op, 200},
			{"HealthzIsOpen", "GET", "/healthz", "", 200},
			{"MetricsIsOpen", "GET", "/metrics", "", 200},
			{"HealthzIgnoresBadCredentials", "GET", "/healthz", authtest.Basic("x", "y"), 200},
		}
		for _, tc := range cases {
			res := serve(t, a, tc.method, tc.path, tc.header)
			require.Equal(t, tc.want, res.status, tc.name)
			switch tc.want {
			case 401:
				require.Equal(t, `Basic realm="pulse"`, res.challenge, tc.name)
				require.Equal(t, "unauthenticated", res.code, tc.name)
			case 403:
				require.Empty(t, res.challenge, tc.name)
				require.Equal(t, "permission_denied", res.code, tc.name)
			}
		}
	})

	t.Run("HandlerSeesTheIdentityAndPublicRoutesNoRole", func(t *testing.T) {
		t.Parallel()
		a := users(t)
		require.Equal(t, "prod/producer", serve(t, a, "GET", "/v1/jobs/1", authtest.Basic("prod", "pp")).who)
		require.Equal(t, "anonymous/", serve(t, a, "GET", "/healthz", "").who,
			"a public route under auth is not an operator")
	})

	t.Run("PermissionDeniedNamesTheRoleNeeded", func(t *testing.T) {
		t.Parallel()
		res := serve(t, users(t), "POST", "/v1/jobs/7/cancel", authtest.Basic("prod", "pp"))
		require.Equal(t, "role producer may not call POST /v1/jobs/7/cancel; it needs operator", res.message)
	})

	t.Run("OpenModeAdmitsEveryoneAsAnonymousOperator", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{"/v1/jobs/1/cancel", "/v1/dispatch/pause", "/v1/unlisted"} {
			res := serve(t, nil, "POST", path, "")
			require.Equal(t, 200, res.status, path)
			require.Equal(t, "anonymous/operator", res.who, path)
		}
	})
}

func TestHTTPPolicy(t *testing.T) {
	t.Parallel()

	t.Run("MatchesAsServeMuxDoes", func(t *testing.T) {
		t.Parallel()
		policy := auth.HTTPPolicy(httpPolicy)
		match := func(method, path string) []auth.Role {
			return policy(httptest.NewRequest(method, path, nil))
		}
		require.Equal(t, auth.Require(auth.RoleProducer), match("POST", "/v1/jobs"))
		require.Equal(t, auth.Require(auth.RoleProducer), match("POST", "/v1/jobs:batch"))
		require.Equal(t, auth.Require(auth.RoleProducer), match("HEAD", "/v1/jobs/x"), "GET covers HEAD")
		require.Equal(t, auth.Require(auth.RoleOperator), match("POST", "/v1/jobs/x/cancel"))
		require.Nil(t, match("POST", "/v1/jobs/x/cancel/extra"))
		require.Nil(t, match("GET", "/v1/jobs"))
		require.Equal(t, []auth.Role{auth.Public}, match("GET", "/healthz"))
	})
}

func TestLogOpenMode(t *testing.T) {
	t.Parallel()

	t.Run("WarnsThatEveryoneIsAnOperator", func(t *testing.T) {
		t.Parallel()
		var buf bytes.Buffer
		auth.LogOpenMode(slog.New(slog.NewJSONHandler(&buf, nil)))
		var line map[string]any
		require.NoError(t, json.Unmarshal(buf.Bytes(), &line))
		require.Equal(t, "WARN", line["level"])
		msg := line["msg"].(string)
		require.True(t, strings.HasPrefix(msg, "AUTHENTICATION IS OFF"), msg)
		require.Contains(t, msg, "local development")
		require.Contains(t, msg, auth.UsersVar)
	})
}

func TestMiddlewareErrorWriters(t *testing.T) {
	t.Parallel()
	a, err := auth.New("prod:producer:pw", "")
	require.NoError(t, err)
	var asked []int
	// Claims /ui paths only, as the dashboard's writer does.
	page := func(w http.ResponseWriter, r *http.Request, code int, err error) bool {
		asked = append(asked, code)
		if !strings.HasPrefix(r.URL.Path, "/ui") {
			return false
		}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(code)
		_, _ = w.Write([]byte("<p>" + err.Error() + "</p>"))
		return true
	}
	policy := auth.Policy{"GET /ui/x": auth.Require(auth.RoleProducer), "POST /ui/x": auth.Require(auth.RoleOperator), "POST /v1/x": auth.Require(auth.RoleOperator)}
	h := auth.Middleware(a, auth.HTTPPolicy(policy), page)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	do := func(method, path, header string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}

	rec := do(http.MethodGet, "/ui/x", "")
	require.Equal(t, http.StatusUnauthorized, rec.Code)
	require.Equal(t, auth.Challenge, rec.Header().Get("WWW-Authenticate"), "the writer keeps the challenge")
	require.Equal(t, "text/html", rec.Header().Get("Content-Type"))

	rec = do(http.MethodPost, "/ui/x", authtest.Basic("prod", "pw"))
	require.Equal(t, http.StatusForbidden, rec.Code)
	require.Contains(t, rec.Body.String(), "role producer may not call POST /ui/x")

	rec = do(http.MethodPost, "/v1/x", authtest.Basic("prod", "pw"))
	require.Equal(t, http.StatusForbidden, rec.Code)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"), "declined: the JSON answer")
	require.Equal(t, []int{401, 403, 403}, asked)

	rec = do(http.MethodGet, "/ui/x", authtest.Basic("prod", "pw"))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Len(t, asked, 3, "an admitted request never reaches a writer")
}

func TestCrossOrigin(t *testing.T) {
	t.Parallel()
	send := func(t *testing.T, method string, header http.Header, writers ...auth.ErrorWriter) (*httptest.ResponseRecorder, bool) {
		t.Helper()
		ran := false
		h := auth.CrossOrigin(writers...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran = true
			w.WriteHeader(http.StatusNoContent)
		}))
		req := httptest.NewRequest(method, "http://pulse.example:8080/v1/dispatch/pause", strings.NewReader(`{"reason":"x"}`))
		maps.Copy(req.Header, header)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec, ran
	}

	t.Run("BrowsersFromAnotherOriginAreRefusedWithJSON", func(t *testing.T) {
		t.Parallel()
		for name, header := range map[string]http.Header{
			"CrossSite":     {"Sec-Fetch-Site": {"cross-site"}},
			"SameSite":      {"Sec-Fetch-Site": {"same-site"}},
			"ForeignOrigin": {"Origin": {"https://evil.example"}},
		} {
			for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
				rec, ran := send(t, method, header)
				require.Equal(t, http.StatusForbidden, rec.Code, name+" "+method)
				require.False(t, ran, name+" "+method)
				require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
				var body struct {
					Error struct{ Code, Message string }
				}
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
				require.Equal(t, "permission_denied", body.Error.Code)
				require.Contains(t, body.Error.Message, "cross-origin request refused")
			}
		}
	})

	t.Run("NonBrowsersSameOriginAndReadsPass", func(t *testing.T) {
		t.Parallel()
		for name, c := range map[string]struct {
			method string
			header http.Header
		}{
			"NoHeaders (curl, CLI, SDK)": {http.MethodPost, nil},
			"SameOrigin":                 {http.MethodPost, http.Header{"Sec-Fetch-Site": {"same-origin"}}},
			"UserTypedIt":                {http.MethodPost, http.Header{"Sec-Fetch-Site": {"none"}}},
			"OriginMatchesHost":          {http.MethodPost, http.Header{"Origin": {"http://pulse.example:8080"}}},
			"CrossSiteRead":              {http.MethodGet, http.Header{"Sec-Fetch-Site": {"cross-site"}}},
		} {
			rec, ran := send(t, c.method, c.header)
			require.Equal(t, http.StatusNoContent, rec.Code, name)
			require.True(t, ran, name)
		}
	})

	t.Run("AnErrorWriterMayAnswerInstead", func(t *testing.T) {
		t.Parallel()
		rec, ran := send(t, http.MethodPost, http.Header{"Sec-Fetch-Site": {"cross-site"}},
			func(w http.ResponseWriter, r *http.Request, code int, err error) bool {
				w.WriteHeader(code)
				_, _ = w.Write([]byte("<p>" + err.Error()))
				return true
			})
		require.False(t, ran)
		require.Equal(t, http.StatusForbidden, rec.Code)
		require.True(t, strings.HasPrefix(rec.Body.String(), "<p>"))
	})
}
