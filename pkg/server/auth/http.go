package auth

import (
	"encoding/json"
	"net/http"

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
// every pulse HTTP error.
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
			ctx, err := a.admit(r.Context(), roles, r.Header.Get("Authorization"), r.Method+" "+r.URL.Path)
			if err != nil {
				code := apierr.HTTPStatus(err)
				if code == http.StatusUnauthorized {
					w.Header().Set("WWW-Authenticate", Challenge)
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

// ErrorWriter answers a request the middleware refuses with code (401 or
// 403; err says why) and reports true, or reports false, writing nothing,
// to leave the request to the JSON answer.
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
	_ = json.NewEncoder(w).Encode(body)
}
