package service_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/buildinfo"
	"github.com/pulsequeue/pulse/pkg/server/grpcserver"
	"github.com/pulsequeue/pulse/pkg/server/loop"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/service"
	"github.com/pulsequeue/pulse/pkg/server/service/servicetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.MainLeakChecked(m)) }

// journal records what the parts were asked to do, in order.
type journal struct {
	mu      sync.Mutex
	entries []string
}

func (j *journal) add(e string) { j.mu.Lock(); j.entries = append(j.entries, e); j.mu.Unlock() }

func (j *journal) get() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.entries)
}

func (j *journal) part(name string, startErr error) service.Component {
	return service.Funcs{
		StartFunc: func(context.Context) error { j.add("start " + name); return startErr },
		StopFunc:  func(context.Context) error { j.add("stop " + name); return nil },
	}
}

func spec(t *testing.T, build func(context.Context, *service.Service) error) service.Spec {
	return service.Spec{
		Name: "svc-test", DatabaseURL: pgtest.URL(t), AdminAddr: "127.0.0.1:0",
		ShutdownTimeout: 10 * time.Second, Build: build,
	}
}

func readyz(addr string) int {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func TestService(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("StartsBackendsThenWorkersAndStopsThemAroundTheListeners", func(t *testing.T) {
		t.Parallel()
		var j journal
		var s *service.Service
		s, err := service.New(ctx, spec(t, func(_ context.Context, svc *service.Service) error {
			svc.AddBackend("b1", j.part("b1", nil))
			svc.AddBackend("b2", j.part("b2", nil))
			svc.Add("w1", j.part("w1", nil))
			svc.Add("w2", service.Funcs{
				StartFunc: func(context.Context) error { j.add("start w2"); return nil },
				StopFunc: func(context.Context) error {
					// Readiness already flipped; the listener still answers.
					j.add("stop w2 readyz=" + http.StatusText(readyz(s.AdminAddr())))
					return nil
				},
			})
			return nil
		}))
		require.NoError(t, err)
		require.NoError(t, s.Start(ctx))
		require.Equal(t, http.StatusOK, readyz(s.AdminAddr()))
		require.NoError(t, s.Stop(ctx))
		require.Equal(t, []string{
			"start b1", "start b2", "start w1", "start w2",
			"stop w2 readyz=Service Unavailable", "stop w1", "stop b2", "stop b1",
		}, j.get())
		require.Zero(t, readyz(s.AdminAddr()), "the listener is closed")
		require.NoError(t, s.Stop(ctx), "a second Stop returns the first's result")
	})

	t.Run("AFailedStartStopsWhatStartedAndListensNowhere", func(t *testing.T) {
		t.Parallel()
		var j journal
		s, err := service.New(ctx, spec(t, func(_ context.Context, svc *service.Service) error {
			svc.AddBackend("b1", j.part("b1", nil))
			svc.Add("w1", j.part("w1", nil))
			svc.Add("prime", j.part("prime", errors.New("pause state unreadable")))
			svc.Add("w3", j.part("w3", nil))
			svc.GRPC(grpcserver.Options{})
			return nil
		}))
		require.NoError(t, err)
		err = s.Start(ctx)
		require.ErrorContains(t, err, "pause state unreadable")
		require.Equal(t, []string{"start b1", "start w1", "start prime", "stop w1", "stop b1"}, j.get())
		require.Empty(t, s.GRPCAddr(), "no gRPC before every part started")
		require.Zero(t, readyz(s.AdminAddr()))
	})

	t.Run("ATakenPortFailsNamingTheVariable", func(t *testing.T) {
		t.Parallel()
		taken, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer taken.Close()
		sp := spec(t, nil)
		sp.AdminAddr, sp.AdminAddrVar = taken.Addr().String(), "PULSE_HTTP_ADDR"
		s, err := service.New(ctx, sp)
		require.NoError(t, err)
		require.ErrorContains(t, s.Start(ctx), "(PULSE_HTTP_ADDR)")
	})

	t.Run("AStuckWorkerCostsOnlyTheTimeout", func(t *testing.T) {
		t.Parallel()
		var j journal
		release := make(chan struct{})
		defer close(release)
		s, err := service.New(ctx, spec(t, func(_ context.Context, svc *service.Service) error {
			svc.AddBackend("b1", j.part("b1", nil))
			svc.Add("stuck", service.Funcs{StopFunc: func(context.Context) error { <-release; return nil }})
			return nil
		}))
		require.NoError(t, err)
		require.NoError(t, s.Start(ctx))
		stopCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		err = s.Stop(stopCtx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, "stop stuck")
		require.Equal(t, []string{"start b1", "stop b1"}, j.get(), "the shutdown went on past the stuck worker")
		require.Zero(t, readyz(s.AdminAddr()))
	})

	t.Run("EveryRegistersALoopWithItsErrorMetric", func(t *testing.T) {
		t.Parallel()
		ran := make(chan struct{}, 1)
		s, err := service.New(ctx, spec(t, func(_ context.Context, svc *service.Service) error {
			svc.Every(loop.Config{Name: "tick", Interval: time.Hour, Immediate: true}, func(context.Context) error {
				select {
				case ran <- struct{}{}:
				default:
				}
				return nil
			})
			return nil
		}))
		require.NoError(t, err)
		require.NoError(t, s.Start(ctx))
		<-ran
		mfs, err := s.Registry().Gather()
		require.NoError(t, err)
		var names []string
		for _, mf := range mfs {
			names = append(names, mf.GetName())
		}
		require.Contains(t, names, "pulse_loop_errors_total")
		require.Contains(t, names, "pulse_build_info")
		require.Contains(t, names, "pulse_db_pool_conns")
		require.NoError(t, s.Stop(ctx))
	})

	t.Run("ReadinessFlipsBeforeTheListenersClose", func(t *testing.T) {
		t.Parallel()
		sp := spec(t, func(_ context.Context, svc *service.Service) error {
			svc.GRPC(grpcserver.Options{})
			return nil
		})
		sp.GRPCAddr = "127.0.0.1:0"
		servicetest.RequireReadinessFlipsBeforeListenersClose(t, sp)
	})
}

func TestCommand(t *testing.T) {
	t.Parallel()
	type cfg struct {
		DatabaseURL string `envconfig:"DATABASE_URL" required:"true"`
		LogLevel    string `envconfig:"LOG_LEVEL" default:"info"`
	}
	cmd := service.Command[cfg]{
		Name:     "svc-test",
		Load:     func() (cfg, error) { return cfg{DatabaseURL: "postgres://127.0.0.1:1/none", LogLevel: "loud"}, nil },
		LogLevel: func(c cfg) string { return c.LogLevel },
		Usage:    service.EnvUsage("svc-test", "Does a test.", cfg{}),
		Serve:    nil,
	}

	var out bytes.Buffer
	require.NoError(t, cmd.Run([]string{"-h"}, &out))
	require.Equal(t, "usage: svc-test [--version]\n\nDoes a test.\n\nEnvironment:\n  PULSE_DATABASE_URL\n  PULSE_LOG_LEVEL\n\n"+
		"Tracing is configured by the standard OTEL_* variables (OTLP).\n", out.String())

	require.ErrorContains(t, cmd.Run([]string{"frobnicate"}, &out), `unknown subcommand "frobnicate" (see svc-test --help)`)
	require.ErrorContains(t, cmd.Run([]string{"serve", "x"}, &out), `unexpected arguments after "serve"`)
	require.ErrorContains(t, cmd.Run(nil, &out), "PULSE_LOG_LEVEL", "a bad level names the variable")

	// --version reads no configuration: it works where serve would not.
	cmd.Load = func() (cfg, error) { return cfg{}, errors.New("the configuration must not be read") }
	for _, arg := range []string{"--version", "version"} {
		out.Reset()
		require.NoError(t, cmd.Run([]string{arg}, &out), arg)
		require.Equal(t, "svc-test "+buildinfo.Version()+"\n", out.String(), arg)
	}
	require.ErrorContains(t, cmd.Run([]string{"--version", "x"}, &out), `unknown subcommand "--version"`)

	require.Equal(t, "pgconn: failed: host a; host b", service.OneLine("pgconn: failed:\n\thost a\n\thost b\n"))
	require.False(t, strings.Contains(service.OneLine("a\nb"), "\n"))
}
