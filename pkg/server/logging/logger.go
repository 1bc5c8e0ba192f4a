package logging

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/pulsequeue/pulse/pkg/tracelog"
)

// New returns a JSON logger writing to w at the given level, with
// service=<service> on every record so logs from the whole fleet can share
// one stream, and trace_id/span_id on every record logged with a context
// holding a span (pkg/tracelog): a request's, or a job's. level is one of
// debug, info, warn or error.
func New(service, level string, w io.Writer) (*slog.Logger, error) {
	lvl, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	h := tracelog.NewHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl}))
	return slog.New(h).With(Service, service), nil
}

// ParseLevel parses a level name as New accepts it, so a service can
// validate its configuration before building a logger.
func ParseLevel(level string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(level)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("logging: unknown level %q (want debug, info, warn or error)", level)
}
