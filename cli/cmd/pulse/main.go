// Command pulse is the operator CLI for pulse: a client of control-api's
// HTTP/JSON API. Run `pulse --help` for the command tree.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/pulsequeue/pulse/cli/internal/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := app.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
