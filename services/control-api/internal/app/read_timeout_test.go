package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"
	"github.com/pulsequeue/pulse/services/control-api/internal/app"
	"github.com/pulsequeue/pulse/services/control-api/internal/config"
)

// TestSlowSearchesDoNotStarveSubmits: with a large jobs table, searches
// that match nothing (a topic no job has: a backward walk of the whole
// primary key) run eight at a time, over and over, against a read pool of
// two connections and a 20 ms read timeout, while producers submit. Every
// submit succeeds; every search either answers or is canceled by Postgres
// at the timeout and answers 504 naming it; and no search is left running
// in Postgres afterwards.
func TestSlowSearchesDoNotStarveSubmits(t *testing.T) {
	t.Parallel()
	var dbURL string
	a, _ := startWith(t, func(c *config.Config) {
		c.DBMaxConns, c.SubmitFlushers = 4, 2
		c.DBReadMaxConns = 2
		c.ReadTimeout = 20 * time.Millisecond
		dbURL = c.DatabaseURL
	})
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `
		INSERT INTO jobs (id, topic, args)
		SELECT gen_random_uuid(), 'bulk', jsonb_build_object('n', g, 'pad', repeat('x', 200))
		FROM generate_series(1, 300000) AS g`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `ANALYZE jobs`)
	require.NoError(t, err)

	producer := authtest.Basic("prod", "prod-pass")
	do := func(method, path, body string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, method, "http://"+a.AdminAddr()+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", producer)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(raw)
	}

	var (
		stop                      atomic.Bool
		answered, timedOut, other atomic.Int64
		otherSeen                 sync.Once
		otherBody                 string
		searchers                 sync.WaitGroup
	)
	for range 8 {
		searchers.Go(func() {
			for !stop.Load() {
				code, body := do("GET", "/v1/jobs?topic=nothing.matches&limit=10", "")
				switch {
				case code == http.StatusOK:
					answered.Add(1)
				case code == http.StatusGatewayTimeout && strings.Contains(body, "statement timeout") &&
					strings.Contains(body, "PULSE_READ_TIMEOUT"):
					timedOut.Add(1)
				default:
					other.Add(1)
					otherSeen.Do(func() { otherBody = fmt.Sprintf("%d %s", code, body) })
				}
			}
		})
	}
	// Submits while the searches run: each must succeed.
	const submits = 100
	var ok atomic.Int64
	var submitters sync.WaitGroup
	for w := range 4 {
		submitters.Go(func() {
			for i := range submits / 4 {
				code, body := do("POST", "/v1/jobs", fmt.Sprintf(`{"topic":"real.work","args":{"w":%d,"i":%d}}`, w, i))
				if code == http.StatusOK || code == http.StatusCreated {
					var r struct {
						ID string `json:"id"`
					}
					if json.Unmarshal([]byte(body), &r) == nil && r.ID != "" {
						ok.Add(1)
						continue
					}
				}
				t.Errorf("submit failed: %d %s", code, body)
			}
		})
	}
	submitters.Wait()
	stop.Store(true)
	searchers.Wait()

	require.EqualValues(t, submits, ok.Load(), "every submit succeeded while searches ran")
	require.Zero(t, other.Load(), "a search answered neither its page nor the timeout: %s", otherBody)
	require.Positive(t, timedOut.Load(), "Postgres canceled searches at the read timeout (answered: %d)", answered.Load())

	// The timeout is Postgres's own: nothing of the searches runs on. The
	// cluster is shared with the package's other tests, each with its own
	// database and a control-api of the same name: count this one's only.
	var active int
	require.NoError(t, conn.QueryRow(ctx, `
		SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1 AND state = 'active'`, app.Service+"-reads").Scan(&active))
	require.Zero(t, active)
}
