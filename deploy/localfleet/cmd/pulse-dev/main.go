// Command pulse-dev runs the whole pulse system on this machine without
// Docker: a throwaway Postgres, control-api, dispatch-gateways, the reaper and
// scheduler (once they exist) and, by default, a demo producer and worker.
// Run it from anywhere inside the repository:
//
//	go run ./deploy/localfleet/cmd/pulse-dev [-gateways 1] [-demo=true] [-keep-data=false] [-status 5s]
//
// It prints where everything listens and commands to try, then a one-line
// status (jobs done, failed, queued, running) every -status interval.
// Ctrl-C (or SIGTERM) stops every process, stops Postgres and removes every
// file it created unless -keep-data is set.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/deploy/localfleet"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "pulse-dev:", err)
		os.Exit(1)
	}
}

func run() error {
	gateways := flag.Int("gateways", localfleet.GatewaysDefault, "number of dispatch-gateway replicas")
	demo := flag.Bool("demo", true, "also run demo-producer and demo-worker so the dashboards move")
	keepData := flag.Bool("keep-data", false, "leave logs, binaries and the Postgres data directory on disk after exit")
	statusEvery := flag.Duration("status", 5*time.Second, "print a one-line status this often (0: never)")
	flag.Parse()

	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := localfleet.FindRepoRoot(wd)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fleet, err := localfleet.Up(ctx, localfleet.Options{
		RepoRoot:  root,
		Gateways:  *gateways,
		Demo:      *demo,
		Reaper:    true,
		Scheduler: true,
		KeepData:  *keepData,
		Logger:    logger,
	})
	if err != nil {
		return err
	}
	pids, paths := fleet.PIDs(), fleet.Paths()
	printSummary(os.Stdout, fleet, pids, paths)
	if *statusEvery > 0 {
		go printStatus(ctx, os.Stdout, fleet.DatabaseURL, *statusEvery, logger)
	}

	<-ctx.Done()
	stop() // a second Ctrl-C now kills pulse-dev the default way
	fmt.Println("pulse-dev: stopping the fleet ...")
	downErr := fleet.Down()
	if left := leftovers(pids, paths, *keepData); len(left) > 0 {
		return fmt.Errorf("left behind: %s", strings.Join(left, ", "))
	}
	if downErr != nil {
		return downErr
	}
	if *keepData {
		fmt.Printf("pulse-dev: stopped; %d processes exited; kept %s\n", len(pids), strings.Join(paths, " "))
	} else {
		fmt.Printf("pulse-dev: stopped; %d processes exited and %d directories removed; nothing left behind\n", len(pids), len(paths))
	}
	return nil
}

// printSummary tells a developer where to look. The "pids:" and "data:"
// lines are also read by the end-to-end test.
func printSummary(w io.Writer, f *localfleet.Fleet, pids map[string]int, paths []string) {
	fmt.Fprintln(w, "pulse-dev: the fleet is up")
	fmt.Fprintf(w, "  control-api http:  %s\n", f.ControlHTTP)
	fmt.Fprintf(w, "  dashboard:         %s/ui/\n", f.ControlHTTP)
	fmt.Fprintf(w, "  mcp (agents):      %s/mcp  (or `pulse mcp` over stdio; docs/mcp.md)\n", f.ControlHTTP)
	fmt.Fprintf(w, "  control-api grpc:  %s\n", f.ControlGRPC)
	fmt.Fprintf(w, "  gateways grpc:     %s\n", strings.Join(f.GatewayAddrs, ","))
	fmt.Fprintf(w, "  database:          %s\n", f.DatabaseURL)
	fmt.Fprintln(w, "  metrics:")
	for _, name := range sortedKeys(f.AdminURLs) {
		fmt.Fprintf(w, "    %-20s %s/metrics\n", name, f.AdminURLs[name])
	}
	fmt.Fprintf(w, "  logs:              %s\n", f.LogDir)
	fmt.Fprintf(w, "  data: %s\n", strings.Join(paths, " "))
	var pidList []string
	for _, name := range sortedKeys(pids) {
		pidList = append(pidList, fmt.Sprintf("%s=%d", name, pids[name]))
	}
	fmt.Fprintf(w, "  pids: %s\n", strings.Join(pidList, " "))
	curlAuth, cliAuth := "", ""
	if f.DevCredentials() {
		fmt.Fprintf(w, "  credentials:       development users (not secrets; 127.0.0.1 only), user:password\n")
		fmt.Fprintf(w, "    operator         %s:%s  (everything; the dashboard)\n", localfleet.DevOperatorUser, localfleet.DevOperatorPassword)
		fmt.Fprintf(w, "    producer         %s:%s  (submit and read jobs)\n", localfleet.DevProducerUser, localfleet.DevProducerPassword)
		fmt.Fprintf(w, "    worker           %s:%s  (run jobs)\n", localfleet.DevWorkerUser, localfleet.DevWorkerPassword)
		curlAuth = " -u " + localfleet.DevOperatorUser + ":" + localfleet.DevOperatorPassword
		cliAuth = fmt.Sprintf(" PULSE_USER=%s PULSE_PASSWORD=%s", localfleet.DevOperatorUser, localfleet.DevOperatorPassword)
	}
	fmt.Fprintln(w, "  try (from the repository root, in another terminal):")
	fmt.Fprintf(w, "    curl -s%s -X POST %s/v1/jobs -H 'Content-Type: application/json' -d '{\"topic\":\"email.send\",\"args\":{\"to\":\"a@example.com\"}}'\n", curlAuth, f.ControlHTTP)
	fmt.Fprintf(w, "    curl -s%s '%s/v1/jobs?limit=10'\n", curlAuth, f.ControlHTTP)
	fmt.Fprintf(w, "    export PULSE_SERVER=%s%s   # the pulse CLI's server and user\n", f.ControlHTTP, cliAuth)
	fmt.Fprintln(w, "    go run ./cli/cmd/pulse jobs list --limit 10")
	fmt.Fprintln(w, "    go run ./cli/cmd/pulse dispatch pause --reason 'trying pause'")
	fmt.Fprintln(w, "    go run ./cli/cmd/pulse dispatch resume")
	fmt.Fprintln(w, "    go run ./cli/cmd/pulse mcp   # control-api's MCP tools on stdio, for an agent client")
	fmt.Fprintln(w, "  Ctrl-C stops everything.")
}

// statusSQL counts the jobs by what a developer watches. A dev fleet's
// table is small; a production one would read the throughput rollup.
const statusSQL = `
SELECT count(*) FILTER (WHERE status = 'COMPLETED'),
       count(*) FILTER (WHERE status = 'DEAD_LETTERED'),
       count(*) FILTER (WHERE status IN ('PENDING', 'RETRYING')),
       count(*) FILTER (WHERE status = 'RUNNING'),
       coalesce(sum(jsonb_array_length(errors)), 0)
FROM jobs`

// printStatus prints one status line every interval until ctx is done, so
// the console shows the fleet is alive. The line starts "status:"; the
// end-to-end test reads it.
func printStatus(ctx context.Context, w io.Writer, databaseURL string, every time.Duration, logger *slog.Logger) {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		logger.Warn("pulse-dev: no status line: cannot connect to the database", "error", err)
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var done, dead, queued, running, failures int64
		if err := conn.QueryRow(ctx, statusSQL).Scan(&done, &dead, &queued, &running, &failures); err != nil {
			if ctx.Err() == nil {
				logger.Warn("pulse-dev: status query failed", "error", err)
			}
			continue
		}
		fmt.Fprintf(w, "status: %s  done %d · failed attempts %d · dead %d · queued %d · running %d\n",
			time.Now().Format(time.TimeOnly), done, failures, dead, queued, running)
	}
}

// leftovers names any process still alive or directory still present, with
// a short grace for processes the kernel has not finished tearing down.
func leftovers(pids map[string]int, paths []string, keepData bool) []string {
	deadline := time.Now().Add(5 * time.Second)
	for {
		var left []string
		for _, name := range sortedKeys(pids) {
			if localfleet.ProcessAlive(pids[name]) {
				left = append(left, fmt.Sprintf("%s (pid %d)", name, pids[name]))
			}
		}
		if !keepData {
			for _, p := range paths {
				if _, err := os.Stat(p); err == nil {
					left = append(left, p)
				}
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
