package pulse

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pulsequeue/pulse/pkg/pulsetest/fakegateway"
)

// refuseFirst refuses the first n opens with err, then lets the worker in.
func refuseFirst(n int, err error) func(int) error {
	return func(nth int) error {
		if nth <= n {
			return err
		}
		return nil
	}
}

func TestWorkerRefused(t *testing.T) {
	t.Parallel()

	t.Run("EveryGatewayRefusingAtStartEndsRunNamingWhy", func(t *testing.T) {
		t.Parallel()
		for _, code := range []codes.Code{codes.Unauthenticated, codes.PermissionDenied, codes.InvalidArgument, codes.AlreadyExists} {
			t.Run(code.String(), func(t *testing.T) {
				t.Parallel()
				a := fakegateway.New(t, "gw-a", fakegateway.FastWelcome())
				b := fakegateway.New(t, "gw-b", fakegateway.FastWelcome())
				refusal := status.Error(code, "worker id \"w\" is refused for a reason the gateway names")
				a.SetOpenFn(func(int) error { return refusal })
				b.SetOpenFn(func(int) error { return refusal })
				w, err := NewWorker([]string{a.Addr(), b.Addr()}, WithLogger(slog.New(slog.DiscardHandler)), WithWorkerID("w"))
				require.NoError(t, err)
				w.Register("t", noop)

				ctx, cancel := context.WithTimeout(context.Background(), liveness)
				defer cancel()
				err = w.Run(ctx)
				require.NoError(t, ctx.Err(), "Run returned on its own, not at the test's deadline")
				require.ErrorIs(t, err, ErrWorkerRefused)
				require.Equal(t, code, status.Code(err), "the gateway's status survives the wrapping")
				require.ErrorContains(t, err, "for a reason the gateway names")
				require.Equal(t, 1, a.OpenCount(), "each gateway was asked once")
				require.Equal(t, 1, b.OpenCount(), "each gateway was asked once")
			})
		}
	})

	t.Run("OneGatewayLettingItInIsEnough", func(t *testing.T) {
		t.Parallel()
		a := fakegateway.New(t, "gw-a", fakegateway.FastWelcome())
		b := fakegateway.New(t, "gw-b", fakegateway.FastWelcome())
		a.SetOpenFn(func(int) error { return status.Error(codes.PermissionDenied, "not on this replica") })
		startWorker(t, []string{a.Addr(), b.Addr()}, map[string]Handler{"t": noop})
		fs := b.NextStream(t)
		require.Equal(t, "worker-1", fs.Open.GetWorkerId())
	})

	t.Run("OutagesAtStartAreRetriedNotRefusals", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		gw.SetOpenFn(refuseFirst(3, status.Error(codes.Unavailable, "starting up")))
		startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": noop})
		gw.NextStream(t)
		require.Equal(t, 4, gw.OpenCount())
	})

	t.Run("RefusalsInterruptedByAnOutageStartCountingAgain", func(t *testing.T) {
		t.Parallel()
		a := fakegateway.New(t, "gw-a", fakegateway.FastWelcome())
		b := fakegateway.New(t, "gw-b", fakegateway.FastWelcome())
		// a refuses, b is down, a refuses, b is down, then a lets it in:
		// never two refusals in a row from both targets.
		a.SetOpenFn(refuseFirst(2, status.Error(codes.Unauthenticated, "token not yet known to this replica")))
		b.SetOpenFn(func(int) error { return status.Error(codes.Unavailable, "restarting") })
		startWorker(t, []string{a.Addr(), b.Addr()}, map[string]Handler{"t": noop})
		a.NextStream(t)
	})

	t.Run("AfterAWelcomeRefusalsAreRetried", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		gw.SetOpenFn(func(nth int) error {
			if nth == 2 || nth == 3 { // the reconnects after the first stream
				return status.Error(codes.AlreadyExists, "worker id is streaming under another identity")
			}
			return nil
		})
		startWorker(t, []string{gw.Addr()}, map[string]Handler{"t": noop})
		gw.NextStream(t).Kill()
		select {
		case fs := <-gw.Streams():
			require.Equal(t, "worker-1", fs.Open.GetWorkerId())
		case <-time.After(liveness):
			t.Fatal("the worker stopped reconnecting after refusals that came after a welcome")
		}
		require.Equal(t, 4, gw.OpenCount())
	})
}
