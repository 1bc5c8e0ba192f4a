package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/pulsequeue/pulse/pkg/buildinfo"
	"github.com/pulsequeue/pulse/pkg/server/config"
	"github.com/pulsequeue/pulse/pkg/server/logging"
)

// Command is a service binary: its configuration type C, how to read it,
// what -h prints, and what each subcommand runs. "serve", the default,
// runs Serve's Spec.
type Command[C any] struct {
	// Name prefixes every error on stderr ("reaper: ...").
	Name string
	// Load reads and validates the configuration from the environment;
	// errors name the variable.
	Load func() (C, error)
	// Usage writes -h's text to w, every PULSE_* variable on a line of its
	// own starting with the name (deploy/deploytest reads the list).
	Usage func(w io.Writer) error
	// LogLevel is the configured level (PULSE_LOG_LEVEL).
	LogLevel func(C) string
	// Serve is the service to run.
	Serve func(cfg C, logger *slog.Logger) Spec
	// ServeCheck, when set, checks what only serving needs (the security
	// settings: credentials, TLS files), after Load and before anything
	// connects, so subcommands such as migrate do not need them. Errors
	// name the variable.
	ServeCheck func(cfg C) error
	// Subcommands are the other commands, by name (control-api's migrate).
	Subcommands map[string]func(ctx context.Context, cfg C, logger *slog.Logger) error
}

// Main runs cmd with the process's arguments and environment and exits:
// 0, or 1 with the error on one line of stderr.
func Main[C any](cmd Command[C]) {
	if err := cmd.Run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %s\n", cmd.Name, OneLine(err.Error()))
		os.Exit(1)
	}
}

// Run runs the subcommand args name (serve when none) until SIGINT or
// SIGTERM; -h, --help and help write the usage to stdout; --version and
// version write "<name> <version>" (package buildinfo) and read nothing
// else, the environment included.
func (cmd Command[C]) Run(args []string, stdout io.Writer) error {
	name := "serve"
	if len(args) > 0 {
		name = args[0]
	}
	sub, known := cmd.Subcommands[name]
	switch {
	case name == "-h" || name == "--help" || name == "help":
		return cmd.Usage(stdout)
	case (name == "--version" || name == "version") && len(args) == 1:
		_, err := fmt.Fprintf(stdout, "%s %s\n", cmd.Name, buildinfo.Version())
		return err
	case name != "serve" && !known:
		return fmt.Errorf("unknown subcommand %q (see %s --help)", name, cmd.Name)
	case len(args) > 1:
		return fmt.Errorf("unexpected arguments after %q: %q (see %s --help)", name, args[1:], cmd.Name)
	}
	cfg, err := cmd.Load()
	if err != nil {
		return err
	}
	if !known && cmd.ServeCheck != nil {
		if err := cmd.ServeCheck(cfg); err != nil {
			return err
		}
	}
	logger, err := logging.New(cmd.Name, cmd.LogLevel(cfg), stdout)
	if err != nil {
		return config.Invalid("PULSE_LOG_LEVEL", "%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if known {
		return sub(ctx, cfg, logger)
	}
	return Run(ctx, cmd.Serve(cfg, logger))
}

// EnvCommand is the Command of a service whose configuration C is read
// by config.Load and has a LogLevel field, with no subcommand: -h prints
// about and the variables C reads.
func EnvCommand[C any](name, about string, logLevel func(C) string, serve func(C, *slog.Logger) Spec) Command[C] {
	var zero C
	return Command[C]{
		Name: name, Load: LoadEnv[C], LogLevel: logLevel, Serve: serve,
		Usage: EnvUsage(name, about, zero),
	}
}

// LoadEnv is a Command's Load for a configuration read by config.Load
// (envconfig defaults in struct tags, a Validate method).
func LoadEnv[C any]() (C, error) {
	var cfg C
	err := config.Load(&cfg)
	return cfg, err
}

// EnvUsage is a Command's Usage listing every variable spec reads after a
// short description: "usage: <name>\n\n<about>\n\nEnvironment:\n  VAR...".
func EnvUsage(name, about string, spec any) func(w io.Writer) error {
	return func(w io.Writer) error {
		vars, err := config.Vars(spec)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "usage: %s [--version]\n\n%s\n\nEnvironment:\n", name, strings.TrimSpace(about))
		for _, v := range vars {
			fmt.Fprintln(w, "  "+v)
		}
		fmt.Fprint(w, "\nTracing is configured by the standard OTEL_* variables (OTLP).\n")
		return nil
	}
}

// OneLine folds a multi-line error (pgx lists every host it tried) so a
// failure is one line in a crash log.
func OneLine(msg string) string {
	return strings.NewReplacer(":\n\t", ": ", "\n\t", "; ", "\n", "; ").Replace(strings.TrimSpace(msg))
}
