// Command scheduler turns At, Every and Cron schedules into jobs, each
// occurrence exactly once across any number of replicas, and serves its
// admin surface (/metrics, /healthz, /readyz).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/pulsequeue/pulse/pkg/server/config"
	"github.com/pulsequeue/pulse/pkg/server/logging"
	"github.com/pulsequeue/pulse/services/scheduler/internal/app"
	schedconfig "github.com/pulsequeue/pulse/services/scheduler/internal/config"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "scheduler:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) > 1 && (os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help") {
		return usage()
	}
	var cfg schedconfig.Config
	if err := config.Load(&cfg); err != nil {
		return err
	}
	logger, err := logging.New(app.Service, cfg.LogLevel, os.Stdout)
	if err != nil {
		return fmt.Errorf("PULSE_LOG_LEVEL: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return app.Run(ctx, cfg, logger)
}

func usage() error {
	vars, err := config.Vars(&schedconfig.Config{})
	if err != nil {
		return err
	}
	fmt.Println("usage: scheduler\n\nTurns schedules into jobs, each occurrence exactly once; serves /metrics,\n/healthz and /readyz.\n\nEnvironment:")
	for _, v := range vars {
		fmt.Println("  " + v)
	}
	return nil
}
