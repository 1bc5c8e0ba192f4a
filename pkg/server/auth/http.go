package auth

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// Challenge is the WWW-Authenticate value of a 401, which makes browsers
// and curl --anyauth offer Basic credentials.
const Challenge = `Basic realm="pulse"`

// Middleware authenticates every request from its Authorization header and
// checks the caller's role against policy(r), usually HTTPPolicy. A nil a
// is open mode: every request proceeds as Anonymous. Routes policy marks
// Public (the probes and /metrics, which control-api serves on the same
// mux as its API) need no credentials; anything else policy does not name
// is for operators only. Failures answer 401 (with a Basic challenge) or
// 403 and a JSON body {"error":{"code":...,"message":...}}, the shape of
// every pulse HTTP error. The body is never read: a refused request costs
// its headers only. Failed attempts are counted by the connection's
// address (r.RemoteAddr; forwarding headers are not trusted) and by user
// name, and past their allowance answer 429 with Retry-After (Limits).
//
// An ErrorWriter may answer a refusal in a form of its own (the dashboard's
// HTML pages); the status, and the challenge of a 401, stay the same.
func Middleware(a *Authenticator, policy func(r *http.Request) []Role, writers ...ErrorWriter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var roles []Role
			if a != nil {
				roles = policy(r)
			}
			ctx, err := a.admit(withTLSState(r.Context(), r.TLS), roles, r.Header.Get("Authorization"), hostOf(r.RemoteAddr), r.Method+" "+r.URL.Path)
			if err != nil {
				code := apierr.HTTPStatus(err)
				if code == http.StatusUnauthorized {
					w.Header().Set("WWW-Authenticate", Challenge)
				}
				if d, ok := apierr.RetryAfterOf(err); ok {
					w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(d.Seconds()))))
				}
				for _, write := range writers {
					if write(w, r, code, err) {
						return
					}
				}
				writeError(w, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

// CrossOrigin refuses every state-changing request (any method but GET,
// HEAD and OPTIONS) that a browser sends from another origin, judged by
// http.CrossOriginProtection: Sec-Fetch-Site when the browser sends it,
// else the Origin header against Host. A browser attaches an operator's
// Basic credentials to any request aimed at the host, so without it a page
// on another site could pause dispatch or cancel jobs in the operator's
// name. Requests with neither header — curl, the CLI, the SDK, any
// non-browser client — and same-origin requests pass. A refusal is 403
// with the JSON error body (code permission_denied), unless an ErrorWriter
// answers it (the dashboard's pages); nothing behind the middleware runs.
// Put it outside Middleware, so a cross-site request is refused before
// its credentials are even checked.
func CrossOrigin(writers ...ErrorWriter) func(http.Handler) http.Handler {
	protect := http.NewCrossOriginProtection()
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if cerr := protect.Check(r); cerr != nil {
				err := apierr.PermissionDenied("cross-origin request refused (" + cerr.Error() + "): " +
					r.Method + " " + r.URL.Path + " must come from this origin or from a non-browser client")
				for _, write := range writers {
					if write(w, r, http.StatusForbidden, err) {
						return
					}
				}
				writeError(w, err)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// ErrorWriter answers a request Middleware or CrossOrigin refuses with
// code (401 or 403; err says why) and reports true, or reports false,
// writing nothing, to leave the request to the JSON answer.
type ErrorWriter func(w http.ResponseWriter, r *http.Request, code int, err error) bool

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, err error) {
	code := apierr.HTTPStatus(err)
	var body errorBody
	body.Error.Code = apierr.HTTPCode(err)
	body.Error.Message = err.Error()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body) //nolint:errchkjson // the status is written; a failed body has nowhere to go
}
