package conformance_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
)

// envSDKTest selects the SDKs to hold to the contracts: "all", or a
// comma-separated list of registry names. make sdk-test sets it to all.
const envSDKTest = "PULSE_SDK_TEST"

// fleetEnv makes leases lapse in seconds, the reaper sweep five times a
// second and retries wait milliseconds, so the lease contracts finish
// quickly; every wait stays a liveness bound (proctest.Patience).
var fleetEnv = map[string]string{
	"PULSE_LEASE_TTL":          "2s",
	"PULSE_HEARTBEAT_INTERVAL": "500ms",
	"PULSE_SWEEP_INTERVAL":     "200ms",
	"PULSE_RETRY_BACKOFF_UNIT": "10ms",
}

// leaseTTL is fleetEnv's PULSE_LEASE_TTL.
const leaseTTL = 2 * time.Second

// contract is one guarantee every SDK's worker must keep. Contracts run in
// this order on one fleet per SDK; reconnect kills gateways, so it is last.
type contract struct {
	name, says string
	run        func(t *testing.T, h *harness)
}

var contracts = []contract{
	{"slots", "slots never exceeded", testSlots},
	{"settle-once", "every assigned job settled exactly once", testSettleOnce},
	{"retries", "fail, permanent failure and retry-after reach the server", testRetries},
	{"heartbeats", "heartbeats extend the lease", testHeartbeats},
	{"lease-lost", "a lost lease stops the handler; its report is refused", testLeaseLost},
	{"cancel", "cancel reaches the handler", testCancel},
	{"timeout", "a job's timeout stops the handler", testTimeout},
	{"quiesce", "quiesce holds at a checkpoint", testQuiesce},
	{"bad-input", "NUL, invalid UTF-8, huge errors harm no other job", testBadInput},
	{"drain", "drain on SIGTERM finishes what was claimed", testDrain},
	{"reconnect", "reconnection to another gateway when one dies", testReconnect},
}

// harness is what a contract works with: the SDK's driver command, the
// fleet, a Go producer and the database.
type harness struct {
	sdk     string
	command []string
	fleet   *localfleet.Fleet
	client  *pulse.Client
	db      *pgxpool.Pool
}

// TestConformance runs every contract against every selected SDK, one
// fleet per SDK, and prints the contract × SDK table.
func TestConformance(t *testing.T) {
	selected := selectedSDKs(t)
	root, err := localfleet.FindRepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	bins := buildFleet(t, root)
	table := newTable(selected)
	t.Cleanup(func() { fmt.Print(table.String()) })
	for _, s := range selected {
		t.Run(s.name, func(t *testing.T) {
			command := s.prepare(t, root)
			h := upHarness(t, s.name, command, bins)
			for _, c := range contracts {
				ok := t.Run(c.name, func(t *testing.T) { c.run(t, h) })
				table.set(c.name, s.name, ok)
			}
		})
	}
}

// selectedSDKs reads envSDKTest. The suite does not run in make test: it
// installs toolchains' packages and runs a fleet per SDK, so it has its own
// target (make sdk-test); asking for an SDK the registry lacks fails.
func selectedSDKs(t *testing.T) []sdk {
	v := os.Getenv(envSDKTest)
	if v == "" {
		t.Skipf("the SDK conformance suite runs with make sdk-test (set %s=all or a list of %s)", envSDKTest, sdkNames())
	}
	if v == "all" {
		return sdks
	}
	var out []sdk
	for _, name := range strings.Split(v, ",") {
		i := slices.IndexFunc(sdks, func(s sdk) bool { return s.name == strings.TrimSpace(name) })
		if i < 0 {
			t.Fatalf("%s names SDK %q; the registry has %s", envSDKTest, name, sdkNames())
		}
		out = append(out, sdks[i])
	}
	return out
}

func sdkNames() string {
	var names []string
	for _, s := range sdks {
		names = append(names, s.name)
	}
	return strings.Join(names, ", ")
}

func buildFleet(t *testing.T, root string) map[string]string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*proctest.Patience)
	defer cancel()
	bins, err := localfleet.Build(ctx, root, t.TempDir(), localfleet.ControlAPI, localfleet.DispatchGateway, localfleet.Reaper)
	if err != nil {
		t.Fatal(err)
	}
	return bins
}

func upHarness(t *testing.T, name string, command []string, bins map[string]string) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*proctest.Patience)
	defer cancel()
	f, err := localfleet.Up(ctx, localfleet.Options{
		// Not open: the fleet runs with the development users, so every
		// contract also holds each SDK's basic auth to the gateways.
		Reaper: true, Gateways: 2, Env: fleetEnv, Binaries: bins,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("fleet up: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range f.Processes {
				t.Logf("--- %s log tail ---\n%s", p.Name, lastLines(p.Logs(), 30))
			}
		}
		if err := f.Down(); err != nil {
			t.Errorf("fleet down: %v", err)
		}
	})
	if !f.DevCredentials() {
		t.Fatal("the fleet does not run with the development users")
	}
	client, err := pulse.NewClient(f.ControlGRPC, pulse.WithUserPass(localfleet.DevOperatorUser, localfleet.DevOperatorPassword))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	db, err := pgxpool.New(ctx, f.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return &harness{sdk: name, command: command, fleet: f, client: client, db: db}
}

// topic is the contract's own topic for this SDK.
func (h *harness) topic(t *testing.T) string {
	return "conformance." + h.sdk + "." + strings.ReplaceAll(t.Name()[strings.LastIndex(t.Name(), "/")+1:], "_", "-")
}

// driver starts the SDK's driver on the contract's topic.
func (h *harness) driver(t *testing.T, concurrency int, shutdown time.Duration) *driver {
	t.Helper()
	return startDriver(t, h.command, driverSpec{
		WorkerID: h.topic(t), Topics: []string{h.topic(t)}, Gateways: h.fleet.GatewayAddrs,
		Concurrency: concurrency, ShutdownTimeout: shutdown,
	})
}

// job is one job to enqueue: its args (the op) and options.
type job struct {
	args map[string]any
	opts []pulse.EnqueueOption
}

func op(name string, kv ...any) job {
	a := map[string]any{"op": name}
	for i := 0; i+1 < len(kv); i += 2 {
		a[kv[i].(string)] = kv[i+1]
	}
	return job{args: a}
}

func (j job) with(opts ...pulse.EnqueueOption) job {
	j.opts = append(j.opts, opts...)
	return j
}

// enqueue submits jobs to topic in one batch and returns their ids.
func (h *harness) enqueue(t *testing.T, topic string, jobs ...job) []string {
	t.Helper()
	reqs := make([]pulse.JobRequest, len(jobs))
	for i, j := range jobs {
		reqs[i] = pulse.JobRequest{Topic: topic, Args: j.args, Options: j.opts}
	}
	subs, err := h.client.EnqueueMany(t.Context(), reqs)
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	ids := make([]string, len(subs))
	for i, s := range subs {
		ids[i] = s.ID
	}
	return ids
}

// get reads a job from control-api.
func (h *harness) get(t *testing.T, id string) *pulse.JobInfo {
	t.Helper()
	info, err := h.client.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("get job %s: %v", id, err)
	}
	return info
}

// waitStatus waits until job id has status and returns it.
func (h *harness) waitStatus(t *testing.T, id string, status pulsetype.Status) *pulse.JobInfo {
	t.Helper()
	var info *pulse.JobInfo
	proctest.WaitFor(t, fmt.Sprintf("job %s to be %s", id, status), func() bool {
		info = h.get(t, id)
		if info.Status.Terminal() && info.Status != status {
			t.Fatalf("job %s ended %s (attempts %d, errors %+v), want %s", id, info.Status, info.Attempts, info.Errors, status)
		}
		return info.Status == status
	})
	return info
}

// waitCompleted waits until every job is completed and returns them.
func (h *harness) waitCompleted(t *testing.T, ids []string) []*pulse.JobInfo {
	t.Helper()
	out := make([]*pulse.JobInfo, len(ids))
	for i, id := range ids {
		out[i] = h.waitStatus(t, id, pulsetype.StatusCompleted)
	}
	return out
}

// checkNoBadLines fails the test if the driver printed anything but events.
func checkNoBadLines(t *testing.T, d *driver) {
	t.Helper()
	if bad := d.badLines(); len(bad) > 0 {
		t.Errorf("driver printed %d stdout lines that are not events, first %q", len(bad), bad[0])
	}
}

// checkOnce fails unless every job has exactly one started and one
// finished event per attempt it ran, for attempts 1..attempts.
func checkOnce(t *testing.T, d *driver, infos []*pulse.JobInfo) {
	t.Helper()
	for _, info := range infos {
		for a := 1; a <= info.Attempts; a++ {
			for _, kind := range []string{"started", "finished"} {
				if n := len(d.find(jobEvent(kind, info.ID, a))); n != 1 {
					t.Errorf("job %s attempt %d: %d %s events, want exactly 1", info.ID, a, n, kind)
				}
			}
		}
		if n := len(d.find(func(e event) bool { return e.Job == info.ID && e.Attempt > info.Attempts })); n > 0 {
			t.Errorf("job %s: %d events for attempts past its %d", info.ID, n, info.Attempts)
		}
	}
}

// table is the contract × SDK result grid.
type table struct {
	mu   sync.Mutex
	sdks []string
	res  map[string]map[string]bool
}

func newTable(s []sdk) *table {
	tb := &table{res: map[string]map[string]bool{}}
	for _, x := range s {
		tb.sdks = append(tb.sdks, x.name)
	}
	return tb
}

func (tb *table) set(contract, sdk string, ok bool) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.res[contract] == nil {
		tb.res[contract] = map[string]bool{}
	}
	tb.res[contract][sdk] = ok
}

func (tb *table) String() string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var b strings.Builder
	b.WriteString("\nSDK conformance (docs/sdk-conformance.md)\n")
	fmt.Fprintf(&b, "%-12s", "contract")
	for _, s := range tb.sdks {
		fmt.Fprintf(&b, " %-10s", s)
	}
	b.WriteString(" what it holds\n")
	for _, c := range contracts {
		fmt.Fprintf(&b, "%-12s", c.name)
		for _, s := range tb.sdks {
			cell := "not run"
			if ok, ran := tb.res[c.name][s]; ran {
				cell = map[bool]string{true: "pass", false: "FAIL"}[ok]
			}
			fmt.Fprintf(&b, " %-10s", cell)
		}
		b.WriteString(" " + c.says + "\n")
	}
	return b.String()
}

// killGateway SIGKILLs the named gateway process and waits for it to be
// gone.
func (h *harness) killGateway(t *testing.T, name string) {
	t.Helper()
	p := h.process(t, name)
	if err := p.Kill(); err != nil {
		t.Fatalf("kill %s: %v", name, err)
	}
	_ = p.Wait(proctest.Patience) // a SIGKILLed process never exits cleanly
	if !p.Exited() {
		t.Fatalf("%s still runs after SIGKILL", name)
	}
}

// restartGateway starts the named gateway again on its address.
func (h *harness) restartGateway(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Patience)
	defer cancel()
	if _, err := h.fleet.Restart(ctx, name); err != nil {
		t.Fatalf("restart %s: %v", name, err)
	}
}

func (h *harness) process(t *testing.T, name string) *localfleet.Process {
	t.Helper()
	i := slices.IndexFunc(h.fleet.Processes, func(p *localfleet.Process) bool { return p.Name == name })
	if i < 0 {
		t.Fatalf("the fleet has no process %s", name)
	}
	return h.fleet.Processes[i]
}
