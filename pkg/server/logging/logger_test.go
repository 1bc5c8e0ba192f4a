package logging_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	"go.uber.org/goleak"

	"github.com/pulsequeue/pulse/pkg/server/logging"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("WritesJSONWithTheServiceOnEveryRecord", func(t *testing.T) {
		t.Parallel()
		var buf bytes.Buffer
		logger, err := logging.New("reaper", "info", &buf)
		require.NoError(t, err)

		logger.Info("swept", logging.JobID, "j1", logging.Attempt, 2)

		var rec map[string]any
		require.NoError(t, json.Unmarshal(buf.Bytes(), &rec))
		require.Equal(t, "reaper", rec["service"])
		require.Equal(t, "swept", rec["msg"])
		require.Equal(t, "INFO", rec["level"])
		require.Equal(t, "j1", rec["job_id"])
		require.EqualValues(t, 2, rec["attempt"])
	})

	t.Run("ARecordLoggedInsideASpanCarriesItsTraceID", func(t *testing.T) {
		t.Parallel()
		var buf bytes.Buffer
		logger, err := logging.New("dispatch-gateway", "info", &buf)
		require.NoError(t, err)
		ctx := propagation.TraceContext{}.Extract(context.Background(),
			propagation.MapCarrier{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})

		logger.InfoContext(ctx, "settled", logging.JobID, "j1")

		var rec map[string]any
		require.NoError(t, json.Unmarshal(buf.Bytes(), &rec))
		require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", rec["trace_id"])
		require.Equal(t, "00f067aa0ba902b7", rec["span_id"])
		require.Equal(t, "dispatch-gateway", rec["service"])
	})

	t.Run("DropsRecordsBelowTheLevel", func(t *testing.T) {
		t.Parallel()
		var buf bytes.Buffer
		logger, err := logging.New("reaper", "WARN", &buf)
		require.NoError(t, err)

		logger.Info("quiet")
		logger.Warn("loud")

		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		require.Len(t, lines, 1)
		require.Contains(t, lines[0], `"msg":"loud"`)
	})

	t.Run("RejectsAnUnknownLevelNamingIt", func(t *testing.T) {
		t.Parallel()
		_, err := logging.New("reaper", "verbose", &bytes.Buffer{})
		require.ErrorContains(t, err, `"verbose"`)
	})
}

func TestParseLevel(t *testing.T) {
	t.Parallel()

	for name, want := range map[string]slog.Level{
		"debug": slog.LevelDebug,
		"info":  slog.LevelInfo,
		"warn":  slog.LevelWarn,
		"error": slog.LevelError,
	} {
		t.Run("Parses"+name, func(t *testing.T) {
			t.Parallel()
			got, err := logging.ParseLevel(name)
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}
}
