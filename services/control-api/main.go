// Command control-api serves pulse's producer and operator API (gRPC and
// HTTP/JSON) and applies the schema migrations (`control-api migrate`).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/pulsequeue/pulse/pkg/server/gogc"
	"github.com/pulsequeue/pulse/pkg/server/logging"

	"github.com/pulsequeue/pulse/services/control-api/internal/app"
	"github.com/pulsequeue/pulse/services/control-api/internal/config"
)

func main() {
	// Before anything allocates: this service's GC target unless GOGC is set.
	gogc.Apply(os.LookupEnv, gogc.ServiceDefault)
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "control-api: %s\n", oneLine(err.Error()))
		os.Exit(1)
	}
}

func run(args []string) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd = args[0]
	}
	switch {
	case cmd == "-h" || cmd == "--help" || cmd == "help":
		return usage(os.Stdout)
	case len(args) > 1:
		return fmt.Errorf("unexpected arguments after %q: %q (see control-api --help)", cmd, args[1:])
	case cmd != "serve" && cmd != "migrate":
		return fmt.Errorf("unknown subcommand %q (see control-api --help)", cmd)
	}

	cfg, err := config.Load()
	if err != nil {
		return err
	}
	logger, err := logging.New(app.Service, cfg.LogLevel, os.Stdout)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if cmd == "migrate" {
		return app.Migrate(ctx, cfg, logger)
	}
	return app.Run(ctx, cfg, logger)
}

// oneLine folds a multi-line error (pgx lists every host it tried) so the
// failure is one line in a crash log.
func oneLine(msg string) string {
	return strings.NewReplacer(":\n\t", ": ", "\n\t", "; ", "\n", "; ").Replace(strings.TrimSpace(msg))
}

func usage(w io.Writer) error {
	fmt.Fprint(w, `Usage: control-api [subcommand]

Subcommands:
  serve      serve the ControlService over gRPC and HTTP/JSON (the default)
  migrate    apply every pending schema migration, then exit
  help       print this help

Environment (name, default, meaning):
`)
	if err := config.WriteUsage(w); err != nil {
		return err
	}
	fmt.Fprint(w, "\nTracing is configured by the standard OTEL_* variables (OTLP).\n")
	return nil
}
