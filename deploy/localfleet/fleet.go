package localfleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pulsequeue/pulse/pkg/server/ownedtemp"
	"github.com/pulsequeue/pulse/pkg/server/pgcluster"
)

// Defaults for Options, named so pulse-dev's flags and the docs agree.
// GatewaysDefault is the shipped shape on one machine, as docker compose
// runs it: one gateway, which is cheaper per job than two on the same
// cores (docs/scaling.md); more replicas are for availability, on
// machines of their own.
const (
	GatewaysDefault     = 1
	ReadyTimeoutDefault = 90 * time.Second
	// StopTimeout is how long Down waits after SIGTERM before SIGKILL; it is
	// the services' own default shutdown budget.
	StopTimeout    = 20 * time.Second
	migrateTimeout = 2 * time.Minute
)

// Command names, which are also the folder names under services/ and
// examples/ and the binary names.
const (
	ControlAPI      = "control-api"
	DispatchGateway = "dispatch-gateway"
	Reaper          = "reaper"
	Scheduler       = "scheduler"
	DemoProducer    = "demo-producer"
	DemoWorker      = "demo-worker"
)

// Options choose what Up starts. The zero value (plus RepoRoot or a working
// directory inside the repo) is control-api and one gateway on a fresh
// Postgres.
type Options struct {
	// RepoRoot is the directory holding go.work; empty means found by walking
	// up from the working directory.
	RepoRoot string
	// WorkDir holds binaries (bin/) and logs (logs/); empty means a new temp
	// dir, removed by Down.
	WorkDir string
	// Gateways is how many dispatch-gateway replicas run; 0 means
	// GatewaysDefault.
	Gateways int
	// Demo starts demo-producer and demo-worker against the fleet.
	Demo bool
	// Reaper and Scheduler start those services, when their folders have a
	// main.go; otherwise Up logs that it skipped them.
	Reaper, Scheduler bool
	// Env is extra environment for every service (PULSE_LOG_LEVEL,
	// PULSE_LEASE_TTL, ...). The addresses and database URL the fleet assigns
	// take precedence. When it sets any of PULSE_AUTH, PULSE_AUTH_USERS,
	// PULSE_AUTH_TOKENS or PULSE_AUTH_CERTS, authentication is exactly
	// what it says; otherwise see Open.
	Env map[string]string
	// Open runs the services with PULSE_AUTH=none: no credentials, every
	// caller an operator. Without it (and without credentials in Env) the
	// fleet runs with the development users (DevUsers), and the demo
	// processes authenticate as DevProducerUser and DevWorkerUser.
	Open bool
	// DatabaseURL points the fleet at an existing, reachable Postgres instead
	// of starting a throwaway cluster.
	DatabaseURL string
	// KeepData leaves WorkDir and the Postgres data directory on disk after
	// Down (Postgres is still stopped), to look at logs and data afterwards.
	KeepData bool
	// DurablePostgres runs the throwaway cluster with fsync and synchronous
	// commit on, as production would (benchmarks); the default trades
	// durability for speed (tests, development).
	DurablePostgres bool
	// PostgresSettings are extra postgresql.conf lines for the throwaway
	// cluster (for example shared_preload_libraries for a benchmark).
	PostgresSettings map[string]string
	// ReadyTimeout bounds the wait for each service's /readyz; 0 means
	// ReadyTimeoutDefault.
	ReadyTimeout time.Duration
	// Logger receives progress lines; nil means slog.Default().
	Logger *slog.Logger
	// CAFile is the PEM CA the services' certificates chain to, when Env
	// serves TLS (PULSE_TLS_CERT, PULSE_TLS_KEY): the fleet then reaches
	// control-api at https:// and trusts this CA for its readiness checks.
	// Env setting PULSE_TLS_CERT without it is an error.
	CAFile string
	// Binaries are prebuilt commands by name, as Build returns them; Up
	// builds only the commands it needs that are missing here, so the
	// fleets of one test run can share a single build.
	Binaries map[string]string
}

// Fleet is a running local pulse system. Stop it with Down.
type Fleet struct {
	// ControlHTTP is control-api's HTTP base URL (http://127.0.0.1:port, or
	// https:// when Options.Env serves TLS).
	ControlHTTP string
	// ControlGRPC is control-api's gRPC address (127.0.0.1:port).
	ControlGRPC string
	// GatewayAddrs are the dispatch-gateways' gRPC addresses, for workers.
	GatewayAddrs []string
	// AdminURLs maps each service process name to the HTTP base serving its
	// /metrics, /healthz and /readyz.
	AdminURLs map[string]string
	// DatabaseURL is what every service was given.
	DatabaseURL string
	// Cluster is the throwaway Postgres, nil when Options.DatabaseURL was set.
	Cluster *pgcluster.Cluster
	// Processes are the running services in start order.
	Processes []*Process
	// WorkDir holds bin/ and logs/.
	WorkDir string
	// LogDir holds one <process>.log per process.
	LogDir string

	opts           Options
	logger         *slog.Logger
	httpClient     *http.Client // the readiness checks'; trusts Options.CAFile
	createdWorkDir bool
	downOnce       sync.Once
	downErr        error
}

// workDirPattern names the work directories Up creates. Each names the
// process that created it, and the next Up removes those whose process
// exited without taking the fleet Down (killed by a test timeout, Ctrl-C
// or kill -9; its services died with it, see Start).
const workDirPattern = "pulse-fleet-"

// Up builds and starts a fleet and returns once every service answers
// /readyz. On failure it stops whatever it started and removes its files.
func Up(ctx context.Context, opts Options) (_ *Fleet, err error) {
	if opts.Gateways <= 0 {
		opts.Gateways = GatewaysDefault
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = ReadyTimeoutDefault
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.RepoRoot == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("fleet: %w", err)
		}
		if opts.RepoRoot, err = FindRepoRoot(wd); err != nil {
			return nil, fmt.Errorf("fleet: %w", err)
		}
	}
	httpClient, err := readinessClient(opts)
	if err != nil {
		return nil, err
	}
	f := &Fleet{opts: opts, logger: opts.Logger, WorkDir: opts.WorkDir, AdminURLs: map[string]string{}, httpClient: httpClient}
	if f.WorkDir == "" {
		ownedtemp.RemoveAbandoned("", workDirPattern, nil)
		if f.WorkDir, err = ownedtemp.Make("", workDirPattern); err != nil {
			return nil, fmt.Errorf("fleet: %w", err)
		}
		f.createdWorkDir = true
	}
	f.LogDir = filepath.Join(f.WorkDir, "logs")
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Down())
		}
	}()

	bins, err := f.buildAndStartPostgres(ctx)
	if err != nil {
		return nil, err
	}
	if err := f.migrate(ctx, bins[ControlAPI]); err != nil {
		return nil, err
	}
	if err := f.startServices(ctx, bins); err != nil {
		return nil, err
	}
	if opts.Demo {
		if err := f.startDemo(ctx, bins); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// buildAndStartPostgres compiles the binaries while Postgres initialises.
func (f *Fleet) buildAndStartPostgres(ctx context.Context) (map[string]string, error) {
	names := []string{ControlAPI, DispatchGateway}
	for _, opt := range []struct {
		on   bool
		name string
	}{{f.opts.Reaper, Reaper}, {f.opts.Scheduler, Scheduler}} {
		switch {
		case !opt.on:
		case hasMain(f.opts.RepoRoot, opt.name):
			names = append(names, opt.name)
		default:
			f.logger.Warn("skipping service: no main.go yet", "service", opt.name, "dir", sourceDir(opt.name))
		}
	}
	if f.opts.Demo {
		names = append(names, DemoProducer, DemoWorker)
	}

	f.DatabaseURL = f.opts.DatabaseURL
	var pgErr error
	pgDone := make(chan struct{})
	go func() {
		defer close(pgDone)
		if f.DatabaseURL != "" {
			return
		}
		c, err := pgcluster.Start(ctx, pgcluster.Options{Fast: !f.opts.DurablePostgres, MaxConnections: 300, Settings: f.opts.PostgresSettings})
		if err != nil {
			pgErr = fmt.Errorf("fleet: postgres: %w", err)
			return
		}
		f.Cluster, f.DatabaseURL = c, c.URL("postgres")
	}()
	bins := make(map[string]string, len(names))
	var missing []string
	for _, name := range names {
		if bin := f.opts.Binaries[name]; bin != "" {
			bins[name] = bin
		} else {
			missing = append(missing, name)
		}
	}
	f.logger.Info("building", "commands", missing)
	built, buildErr := Build(ctx, f.opts.RepoRoot, filepath.Join(f.WorkDir, "bin"), missing...)
	<-pgDone
	if err := errors.Join(buildErr, pgErr); err != nil {
		return nil, err
	}
	maps.Copy(bins, built)
	return bins, nil
}

func (f *Fleet) migrate(ctx context.Context, bin string) error {
	p, err := Start(ctx, "migrate", bin, f.env(nil), f.LogDir, "migrate")
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	if err := p.Wait(migrateTimeout); err != nil {
		_ = p.Kill()
		return fmt.Errorf("fleet: control-api migrate: %w\n%s", err, lastLines(p.Logs(), 30))
	}
	return nil
}

// startServices starts control-api, the gateways and the optional services,
// then waits for every /readyz.
func (f *Fleet) startServices(ctx context.Context, bins map[string]string) error {
	httpAddr, grpcAddr, err := twoAddrs()
	if err != nil {
		return err
	}
	scheme := "http://"
	if f.opts.Env["PULSE_TLS_CERT"] != "" {
		scheme = "https://"
	}
	f.ControlHTTP, f.ControlGRPC = scheme+httpAddr, grpcAddr
	if err := f.start(ctx, ControlAPI, bins[ControlAPI], f.ControlHTTP, map[string]string{
		"PULSE_HTTP_ADDR": httpAddr, "PULSE_GRPC_ADDR": grpcAddr,
	}); err != nil {
		return err
	}
	for i := 1; i <= f.opts.Gateways; i++ {
		grpcAddr, adminAddr, err := twoAddrs()
		if err != nil {
			return err
		}
		name := fmt.Sprintf("%s-%d", DispatchGateway, i)
		f.GatewayAddrs = append(f.GatewayAddrs, grpcAddr)
		if err := f.start(ctx, name, bins[DispatchGateway], "http://"+adminAddr, map[string]string{
			"PULSE_GRPC_ADDR": grpcAddr, "PULSE_ADMIN_ADDR": adminAddr, "PULSE_GATEWAY_ID": name,
		}); err != nil {
			return err
		}
	}
	for _, name := range []string{Reaper, Scheduler} {
		if bins[name] == "" {
			continue
		}
		port, err := FreePort()
		if err != nil {
			return err
		}
		adminAddr := "127.0.0.1:" + strconv.Itoa(port)
		if err := f.start(ctx, name, bins[name], "http://"+adminAddr, map[string]string{"PULSE_ADMIN_ADDR": adminAddr}); err != nil {
			return err
		}
	}
	for _, p := range f.Processes {
		if err := f.waitReady(ctx, p, f.AdminURLs[p.Name]+"/readyz"); err != nil {
			return err
		}
	}
	f.logger.Info("fleet ready", "control_api", f.ControlHTTP, "gateways", f.GatewayAddrs)
	return nil
}

func (f *Fleet) startDemo(ctx context.Context, bins map[string]string) error {
	producer := map[string]string{"PULSE_CONTROL_API_ADDR": f.ControlGRPC}
	worker := map[string]string{"PULSE_GATEWAY_ADDRS": strings.Join(f.GatewayAddrs, ",")}
	if f.DevCredentials() {
		producer["PULSE_USER"], producer["PULSE_PASSWORD"] = DevProducerUser, DevProducerPassword
		worker["PULSE_USER"], worker["PULSE_PASSWORD"] = DevWorkerUser, DevWorkerPassword
	}
	if err := f.start(ctx, DemoProducer, bins[DemoProducer], "", producer); err != nil {
		return err
	}
	if err := f.start(ctx, DemoWorker, bins[DemoWorker], "", worker); err != nil {
		return err
	}
	if err := f.startPythonDemo(ctx); err != nil {
		return err
	}
	return f.startTypeScriptDemo(ctx)
}

// start runs one long-lived process and records it; adminURL is empty for
// processes without an admin endpoint.
func (f *Fleet) start(ctx context.Context, name, bin, adminURL string, env map[string]string) error {
	p, err := Start(ctx, name, bin, f.env(env), f.LogDir)
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	f.Processes = append(f.Processes, p)
	if adminURL != "" {
		f.AdminURLs[name] = adminURL
	}
	f.logger.Info("started", "process", name, "pid", p.PID(), "log", p.LogPath)
	return nil
}

// waitReady polls url, giving up early with the process's logs if it exits.
func (f *Fleet) waitReady(ctx context.Context, p *Process, url string) error {
	ctx, cancel := context.WithTimeout(ctx, f.opts.ReadyTimeout)
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := waitHTTP(ctx, f.httpClient, url); err != nil {
		if p.Exited() {
			err = p.Wait(0)
		}
		return fmt.Errorf("fleet: %s not ready: %w\n%s", p.Name, err, lastLines(p.Logs(), 30))
	}
	return nil
}

// waitWorking waits until a demo worker started by another runtime (the
// Python and TypeScript demos) logs its "working" line, which it writes once
// its stop signals are caught: stopped before that, a Node or Python
// process still loading its SDK would die of the SIGTERM instead of
// draining. It gives up early with the process's logs if it exits.
func (f *Fleet) waitWorking(ctx context.Context, p *Process) error {
	ctx, cancel := context.WithTimeout(ctx, f.opts.ReadyTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(p.Logs(), `"working"`) {
		select {
		case <-p.done:
			return fmt.Errorf("fleet: %s exited before it was working: %w\n%s", p.Name, p.Wait(0), lastLines(p.Logs(), 30))
		case <-ctx.Done():
			return fmt.Errorf("fleet: %s did not say it was working: %w\n%s", p.Name, ctx.Err(), lastLines(p.Logs(), 30))
		case <-tick.C:
		}
	}
	return nil
}

// env is the authentication defaults (Options.authEnv), Options.Env, then
// the database URL, then the process's own settings; exec keeps the last
// value of a repeated key.
func (f *Fleet) env(own map[string]string) []string {
	var out []string
	for _, m := range []map[string]string{f.opts.authEnv(), f.opts.Env, {"PULSE_DATABASE_URL": f.DatabaseURL}, own} {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, k+"="+m[k])
		}
	}
	return out
}

// PIDs maps each running process, and the Postgres postmaster when the fleet
// started one, to its process id.
func (f *Fleet) PIDs() map[string]int {
	pids := make(map[string]int, len(f.Processes)+1)
	for _, p := range f.Processes {
		pids[p.Name] = p.PID()
	}
	if f.Cluster != nil {
		if pid, err := f.Cluster.PID(); err == nil {
			pids["postgres"] = pid
		}
	}
	return pids
}

// Paths are the directories the fleet created, which Down removes unless
// Options.KeepData is set.
func (f *Fleet) Paths() []string {
	var paths []string
	if f.createdWorkDir {
		paths = append(paths, f.WorkDir)
	} else {
		paths = append(paths, filepath.Join(f.WorkDir, "bin"), f.LogDir)
	}
	if f.Cluster != nil {
		paths = append(paths, filepath.Dir(f.Cluster.DataDir()))
	}
	return paths
}

// Down stops every process in reverse start order (SIGTERM, then SIGKILL
// after StopTimeout), stops Postgres and removes the fleet's files. It
// reports any process that did not exit cleanly. Calling it again returns
// the first result.
func (f *Fleet) Down() error {
	f.downOnce.Do(func() { f.downErr = f.down() })
	return f.downErr
}

func (f *Fleet) down() error {
	var errs []error
	for i := len(f.Processes) - 1; i >= 0; i-- {
		errs = append(errs, stopProcess(f.Processes[i]))
	}
	if f.Cluster != nil {
		if f.opts.KeepData {
			errs = append(errs, f.Cluster.StopKeepingData())
		} else {
			errs = append(errs, f.Cluster.Stop())
		}
	}
	if f.opts.KeepData && f.createdWorkDir {
		errs = append(errs, ownedtemp.Disown(f.WorkDir))
	}
	if !f.opts.KeepData {
		for _, p := range f.Paths() {
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, fmt.Errorf("fleet: remove %s: %w", p, err))
			}
		}
	}
	return errors.Join(errs...)
}

// stopProcess asks p to stop and insists after StopTimeout.
func stopProcess(p *Process) error {
	if p.Exited() {
		return fmt.Errorf("fleet: %s had already stopped: %w\n%s", p.Name, p.Wait(0), lastLines(p.Logs(), 20))
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	err := p.Wait(StopTimeout)
	if err == nil {
		return nil
	}
	if !p.Exited() {
		_ = p.Kill()
		_ = p.Wait(5 * time.Second)
		return fmt.Errorf("fleet: %s ignored SIGTERM for %s; killed\n%s", p.Name, StopTimeout, lastLines(p.Logs(), 20))
	}
	return fmt.Errorf("fleet: %s did not shut down cleanly: %w\n%s", p.Name, err, lastLines(p.Logs(), 20))
}

// ProcessAlive reports whether pid names a live process; a zombie (exited,
// not yet reaped by its parent) counts as gone.
func ProcessAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !os.IsNotExist(err)
	}
	// The state follows the parenthesised command name, which may hold spaces.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z'
	}
	return true
}

func twoAddrs() (string, string, error) {
	a, err := FreePort()
	if err != nil {
		return "", "", err
	}
	b, err := FreePort()
	if err != nil {
		return "", "", err
	}
	return "127.0.0.1:" + strconv.Itoa(a), "127.0.0.1:" + strconv.Itoa(b), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
