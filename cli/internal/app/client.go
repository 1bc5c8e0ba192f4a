package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
)

// client talks to control-api's HTTP/JSON API.
type client struct {
	base     string
	user     string
	password string
	token    string
	http     *http.Client
}

// APIError is an error answer from control-api:
// {"error":{"code","message","field"}}.
type APIError struct {
	Status  int
	Code    string
	Message string
	Field   string
}

func (e *APIError) Error() string {
	var b strings.Builder
	if e.Field != "" && !strings.HasPrefix(e.Message, e.Field) {
		fmt.Fprintf(&b, "%s: ", e.Field)
	}
	b.WriteString(e.Message)
	code := e.Code
	if code == "" {
		code = strings.ToLower(strings.ReplaceAll(http.StatusText(e.Status), " ", "_"))
	}
	fmt.Fprintf(&b, " (%s, HTTP %d)", code, e.Status)
	return b.String()
}

// do sends one request and returns the response body; a non-2xx answer
// becomes an *APIError.
func (c *client) do(ctx context.Context, method, path string, query url.Values, body any) ([]byte, error) {
	if c.base == "" {
		return nil, usageErrorf("no server: pass --server, set PULSE_SERVER or run `pulse login`")
	}
	u := strings.TrimRight(c.base, "/") + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("bad server URL %q: %w", c.base, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "pulse-cli")
	switch {
	case c.token != "":
		req.Header.Set("Authorization", "Bearer "+c.token)
	case c.user != "":
		req.SetBasicAuth(c.user, c.password)
	}
	hc := c.http
	if hc == nil {
		hc = &http.Client{Timeout: httpTimeout}
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("cannot reach %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("reading answer from %s: %w", c.base, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return data, nil
	}
	apiErr := &APIError{Status: resp.StatusCode}
	var env pulsehttp.ErrorEnvelope
	if json.Unmarshal(data, &env) == nil && env.Error.Message != "" {
		apiErr.Code, apiErr.Message, apiErr.Field = env.Error.Code, env.Error.Message, env.Error.Field
	} else {
		msg := strings.TrimSpace(string(data))
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		apiErr.Message = msg
	}
	return nil, apiErr
}
