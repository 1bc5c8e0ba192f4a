package pglisten_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/pglisten"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.MainLeakChecked(m)) }

// patience bounds every wait for a notification: a hang guard.
const patience = 30 * time.Second

type event struct{ channel, kind, payload string }

type events struct {
	mu  sync.Mutex
	got []event
	c   chan struct{}
}

func newEvents() *events { return &events{c: make(chan struct{}, 100)} }

func (e *events) handler(channel string) pglisten.Handler {
	return pglisten.Handler{
		Notify: func(p string) { e.add(event{channel, "notify", p}) },
		Resync: func() { e.add(event{channel, "resync", ""}) },
	}
}

func (e *events) add(ev event) {
	e.mu.Lock()
	e.got = append(e.got, ev)
	e.mu.Unlock()
	e.c <- struct{}{}
}

// waitFor waits until want has been seen, in order, after what was seen
// before; it fails the test after patience.
func (e *events) waitFor(t *testing.T, want ...event) {
	t.Helper()
	deadline := time.After(patience)
	for {
		e.mu.Lock()
		ok := containsInOrder(e.got, want)
		e.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-e.c:
		case <-deadline:
			e.mu.Lock()
			defer e.mu.Unlock()
			t.Fatalf("want %v, got %v", want, e.got)
		}
	}
}

func containsInOrder(got, want []event) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

func TestListener(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	t.Run("OneConnectionServesEveryChannelAndResyncsOnConnect", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.Pool(t)
		ev := newEvents()
		l := pglisten.New(pglisten.FromPool(pool), nil)
		l.Handle("pulse_a", ev.handler("pulse_a"))
		l.Handle("pulse_b", ev.handler("pulse_b"))
		require.Equal(t, []string{"pulse_a", "pulse_b"}, l.Channels())
		require.NoError(t, l.Start(ctx))
		defer func() { require.NoError(t, l.Stop(ctx)) }()
		ev.waitFor(t, event{"pulse_a", "resync", ""}, event{"pulse_b", "resync", ""})

		_, err := pool.Exec(ctx, `SELECT pg_notify('pulse_b', 'x'), pg_notify('pulse_a', 'y')`)
		require.NoError(t, err)
		ev.waitFor(t, event{"pulse_b", "notify", "x"}, event{"pulse_a", "notify", "y"})

		var listeners int
		require.NoError(t, pool.QueryRow(ctx,
			`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'`).Scan(&listeners))
		require.Equal(t, 1, listeners, "one connection listens for both channels")
	})

	t.Run("ReconnectsAfterALostConnectionAndResyncs", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.Pool(t)
		ev := newEvents()
		connect := func(ctx context.Context) (*pgx.Conn, error) {
			cfg := pool.Config().ConnConfig.Copy()
			cfg.RuntimeParams["application_name"] = "pglisten_test"
			return pgx.ConnectConfig(ctx, cfg)
		}
		l := pglisten.New(connect, nil)
		l.Handle("pulse_jobs", ev.handler("pulse_jobs"))
		require.NoError(t, l.Start(ctx))
		defer func() { require.NoError(t, l.Stop(ctx)) }()
		ev.waitFor(t, event{"pulse_jobs", "resync", ""})

		var killed bool
		require.NoError(t, pool.QueryRow(ctx,
			`SELECT bool_and(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'pglisten_test'`).Scan(&killed))
		require.True(t, killed)
		// Lost meanwhile or not, the subscriber hears of the reconnect.
		ev.waitFor(t, event{"pulse_jobs", "resync", ""}, event{"pulse_jobs", "resync", ""})
		_, err := pool.Exec(ctx, `SELECT pg_notify('pulse_jobs', 'after')`)
		require.NoError(t, err)
		ev.waitFor(t, event{"pulse_jobs", "notify", "after"})
	})

	t.Run("StopEndsAListenerThatCannotConnect", func(t *testing.T) {
		t.Parallel()
		failed := make(chan struct{}, 100)
		l := pglisten.New(func(ctx context.Context) (*pgx.Conn, error) {
			failed <- struct{}{}
			return pgx.Connect(ctx, "postgres://127.0.0.1:1/none?connect_timeout=1")
		}, nil)
		l.Handle("pulse_x", pglisten.Handler{})
		require.NoError(t, l.Start(ctx))
		<-failed
		<-failed // it retried
		require.NoError(t, l.Stop(ctx))
	})

	t.Run("WithNoChannelItDoesNothing", func(t *testing.T) {
		t.Parallel()
		l := pglisten.New(func(context.Context) (*pgx.Conn, error) {
			t.Error("connected with nothing to listen for")
			return nil, nil
		}, nil)
		require.NoError(t, l.Start(ctx))
		require.NoError(t, l.Stop(ctx))
	})
}
