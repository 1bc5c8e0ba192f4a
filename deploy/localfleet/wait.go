package localfleet

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/pulsequeue/pulse/pkg/server/freeport"
)

// pollInterval is how often WaitHTTP asks again.
const pollInterval = 100 * time.Millisecond

// WaitHTTP polls url until it answers 200 or ctx is done; give ctx a
// deadline.
func WaitHTTP(ctx context.Context, url string) error {
	return waitHTTP(ctx, &http.Client{Timeout: 2 * time.Second}, url)
}

func waitHTTP(ctx context.Context, client *http.Client, url string) error {
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("wait for %s: %w", url, err)
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, body)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w (last answer: %s)", url, ctx.Err(), last)
		case <-time.After(pollInterval):
		}
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// from below the ephemeral range, so no outgoing connection on the machine
// can take it before the service binds it (freeport).
func FreePort() (int, error) { return freeport.Get() }
