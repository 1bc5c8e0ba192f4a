// Command reaper recovers jobs whose worker lease lapsed (retry or
// dead-letter) and deletes finished jobs past their retention age. Any
// number of replicas may run at once.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/pulsequeue/pulse/pkg/server/config"
	"github.com/pulsequeue/pulse/pkg/server/logging"
	"github.com/pulsequeue/pulse/services/reaper/internal/app"
	reaperconfig "github.com/pulsequeue/pulse/services/reaper/internal/config"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "reaper:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) > 1 && (os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help") {
		return usage()
	}
	var cfg reaperconfig.Config
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
	vars, err := config.Vars(&reaperconfig.Config{})
	if err != nil {
		return err
	}
	fmt.Println("usage: reaper\n\nRoutes jobs whose worker lease lapsed through the retry path and deletes\nfinished jobs past their retention age (an age of 0 keeps that status forever).\n\nEnvironment:")
	for _, v := range vars {
		fmt.Println("  " + v)
	}
	return nil
}
