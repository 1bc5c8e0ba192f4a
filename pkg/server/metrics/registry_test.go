package metrics_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/pulsequeue/pulse/pkg/buildinfo"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func names(t *testing.T, reg *prometheus.Registry) map[string]bool {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := make(map[string]bool, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = true
	}
	return out
}

func TestNewRegistry(t *testing.T) {
	t.Parallel()

	t.Run("ExportsRuntimeAndProcessMetrics", func(t *testing.T) {
		t.Parallel()
		got := names(t, metrics.NewRegistry("reaper"))
		require.True(t, got["go_goroutines"])
		require.True(t, got["process_start_time_seconds"])
	})

	t.Run("LabelsTheServiceInfoWithTheServiceName", func(t *testing.T) {
		t.Parallel()
		mfs, err := metrics.NewRegistry("scheduler").Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != "pulse_service_info" {
				continue
			}
			require.Len(t, mf.GetMetric(), 1)
			m := mf.GetMetric()[0]
			require.Equal(t, 1.0, m.GetGauge().GetValue())
			require.Equal(t, "service", m.GetLabel()[0].GetName())
			require.Equal(t, "scheduler", m.GetLabel()[0].GetValue())
			return
		}
		t.Fatal("pulse_service_info not exported")
	})

	t.Run("ExportsTheBuildVersion", func(t *testing.T) {
		t.Parallel()
		mfs, err := metrics.NewRegistry("reaper").Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != "pulse_build_info" {
				continue
			}
			require.Len(t, mf.GetMetric(), 1)
			labels := map[string]string{}
			for _, l := range mf.GetMetric()[0].GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			require.Equal(t, map[string]string{"service": "reaper", "version": buildinfo.Version()}, labels)
			require.NotEqual(t, "dev", labels["version"])
			return
		}
		t.Fatal("pulse_build_info not exported")
	})
}

func TestGRPCServerMetrics(t *testing.T) {
	t.Parallel()

	t.Run("RecordsHandledCallsAndHandlingTime", func(t *testing.T) {
		t.Parallel()
		reg := metrics.NewRegistry("dispatch-gateway")
		m := metrics.GRPCServerMetrics(reg)

		info := &grpc.UnaryServerInfo{FullMethod: "/pulse.v1.Test/Call"}
		_, err := m.UnaryServerInterceptor()(t.Context(), nil, info,
			func(context.Context, any) (any, error) { return "ok", nil })
		require.NoError(t, err)

		got := names(t, reg)
		require.True(t, got["grpc_server_handled_total"])
		require.True(t, got["grpc_server_handling_seconds"])
	})

	t.Run("PanicsWhenRegisteredTwice", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		metrics.GRPCServerMetrics(reg)
		require.Panics(t, func() { metrics.GRPCServerMetrics(reg) })
	})
}
