// Command dispatch-gateway serves workers: it streams them claimed jobs and
// takes their heartbeats and results. Run any number of replicas.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/pulsequeue/pulse/pkg/server/config"
	"github.com/pulsequeue/pulse/pkg/server/gogc"
	"github.com/pulsequeue/pulse/pkg/server/logging"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/app"
	gwconfig "github.com/pulsequeue/pulse/services/dispatch-gateway/internal/config"
)

func main() {
	// Before anything allocates: this service's GC target unless GOGC is set.
	gogc.Apply(os.LookupEnv, gogc.ServiceDefault)
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dispatch-gateway:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) > 1 && (os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help") {
		return usage()
	}
	var cfg gwconfig.Config
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
	vars, err := config.Vars(&gwconfig.Config{})
	if err != nil {
		return err
	}
	fmt.Println("usage: dispatch-gateway\n\nServes DispatchService (StreamJobs, Heartbeat, ReportResult) to workers.\n\nEnvironment:")
	for _, v := range vars {
		fmt.Println("  " + v)
	}
	return nil
}
