package composetest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

// Topics of the test's jobs, each run by one kind of worker, so a topic's
// jobs completing proves that path works.
const (
	topicProxy = "composetest.proxy" // test-worker-proxy: a container, through gateway-proxy
	topicDNS   = "composetest.dns"   // test-worker-dns: a container, dns:///dispatch-gateway:50052
	topicHost  = "composetest.host"  // this process, through the proxy's published port
	// topicReaped's one job is abandoned by a worker of this process, for
	// the reaper to take (the dashboards' reaped panels).
	topicReaped = "composetest.reaped"
)

// services the test starts: every service of docker-compose.yml but
// grafana (no image for it here), plus the test's workers.
var services = []string{
	"postgres", "migrate", "control-api", "dispatch-gateway", "gateway-proxy", "reaper", "scheduler",
	"prometheus", "jaeger", "demo-producer", "demo-worker", "demo-worker-python", "test-worker-proxy", "test-worker-dns",
}

// healthchecked are the services whose containers must report healthy.
var healthchecked = []string{"postgres", "control-api", "dispatch-gateway", "gateway-proxy", "reaper", "scheduler", "prometheus"}

// afterMigrate are the services that must start only after migrate exited.
var afterMigrate = []string{"control-api", "dispatch-gateway", "reaper", "scheduler", "demo-producer", "demo-worker", "demo-worker-python", "test-worker-proxy", "test-worker-dns"}

// TestComposeUp runs docker-compose.yml for real: it builds every pulse
// image from deploy/docker/Dockerfile, starts the fleet with three gateway
// replicas, and drives it from the host the way the README does. See
// scripts/compose-test.sh, which prepares the machine and runs it.
func TestComposeUp(t *testing.T) {
	if os.Getenv("PULSE_COMPOSE_TEST") != "1" {
		t.Skip("needs Docker; run with `make compose-test`")
	}
	timings := &phases{}
	defer timings.log(t)

	worker := buildWorker(t)
	f := newFleet(t, worker)
	t.Logf("compose project %s: control-api http://127.0.0.1:%d (gRPC %d), gateway-proxy 127.0.0.1:%d, prometheus http://127.0.0.1:%d, jaeger http://127.0.0.1:%d",
		f.project, f.httpPort, f.grpcPort, f.gatewayPort, f.promPort, f.jaegerPort)
	t.Cleanup(func() {
		f.dumpOnFailure(t, filepath.Join(f.root, ".artifacts", "compose-test"))
		if os.Getenv("PULSE_COMPOSE_KEEP") == "1" {
			t.Logf("PULSE_COMPOSE_KEEP=1: leaving project %s up; remove it with: docker compose -p %s down -v", f.project, f.project)
			return
		}
		// Safety net; the last step checks down -v itself.
		_, _ = f.compose(3*time.Minute, "down", "-v", "--remove-orphans", "-t", "10")
	})
	var j jobs
	started := time.Now()

	step := func(name string, fn func(t *testing.T)) {
		t.Helper()
		start := time.Now()
		ok := t.Run(name, fn)
		timings.add(name, time.Since(start))
		if !ok {
			t.FailNow()
		}
	}

	step("Build", func(t *testing.T) {
		out := f.mustCompose(t, 30*time.Minute, "build")
		t.Logf("docker compose build:\n%s", lastLines(out, 15))
	})

	step("Up", func(t *testing.T) {
		args := append([]string{"up", "-d", "--no-build", "--scale", "dispatch-gateway=3"}, services...)
		f.mustCompose(t, 10*time.Minute, args...)
		f.waitHealthy(t, map[string]int{"dispatch-gateway": 3, "demo-worker": 2}, 5*time.Minute)
	})

	step("MigrateRanOnceBeforeTheServices", func(t *testing.T) {
		cs := f.containers(t)
		m := of(cs, "migrate")
		require.Len(t, m, 1, "one migrate container")
		require.Equal(t, "exited", m[0].State)
		require.Equal(t, 0, m[0].ExitCode)
		require.Zero(t, m[0].RestartCount)
		logs := f.logs(m[0].Name, 0)
		require.Equal(t, 1, countLines(logs, "database schema is current"), "migrate ran once:\n%s", logs)
		require.Positive(t, countLines(logs, "migration applied"), "migrate applied the schema to the new volume:\n%s", logs)
		pg := of(cs, "postgres")
		require.Len(t, pg, 1)
		require.True(t, m[0].StartedAt.After(pg[0].StartedAt), "migrate started after postgres")
		for _, name := range afterMigrate {
			for _, c := range of(cs, name) {
				require.True(t, c.StartedAt.After(m[0].FinishedAt),
					"%s started at %s, before migrate finished at %s", c.Name, c.StartedAt.Format(time.RFC3339Nano), m[0].FinishedAt.Format(time.RFC3339Nano))
			}
		}
	})

	step("PostgresRunsWithTheFilesSettings", func(t *testing.T) {
		// The image's entrypoint passes the service's command's -c flags on
		// to postgres: the server running is the one the file describes.
		out := f.mustCompose(t, time.Minute, "exec", "-T", "postgres",
			"psql", "-U", "pulse", "-d", "pulse", "-Atc", "SHOW max_wal_size")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Equal(t, "8GB", strings.TrimSpace(lines[len(lines)-1]), "postgres's max_wal_size:\n%s", out)
	})

	step("PublishedURLsAnswer", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz", "/metrics", "/ui/", "/v1/dispatch"} {
			require.NoError(t, call(http.MethodGet, f.httpURL()+path, nil, http.StatusOK, nil), "control-api %s", path)
		}
		for _, path := range []string{"/-/ready", "/api/v1/targets"} {
			require.NoError(t, call(http.MethodGet, f.promURL()+path, nil, http.StatusOK, nil), "prometheus %s", path)
		}
		// The README's targets page; Debian's Prometheus (the local
		// stand-in) serves only its classic pages, under /classic/.
		targetsPage := "/targets"
		if strings.HasPrefix(os.Getenv("PULSE_PROMETHEUS_IMAGE"), "pulse-local/") {
			targetsPage = "/classic/targets"
		}
		require.NoError(t, call(http.MethodGet, f.promURL()+targetsPage, nil, http.StatusOK, nil), "prometheus %s", targetsPage)
		ts, err := f.targets()
		require.NoError(t, err)
		jobsScraped := map[string]bool{}
		for _, tg := range ts {
			jobsScraped[tg.Job] = true
		}
		for _, job := range []string{"control-api", "dispatch-gateway", "reaper", "scheduler", "prometheus"} {
			require.True(t, jobsScraped[job], "prometheus scrapes %s: %v", job, ts)
		}
		require.NoError(t, call(http.MethodGet, f.jaegerURL()+"/api/services", nil, http.StatusOK, nil), "jaeger's query API")
	})

	// What the dashboards show needs some of everything: a schedule
	// firing (email.send, which demo-worker runs) and calls that fail
	// (a job that does not exist).
	step("DashboardInputs", func(t *testing.T) {
		require.NoError(t, call(http.MethodPost, f.httpURL()+"/v1/schedules",
			map[string]string{"name": "composetest-every-second", "topic": tracedTopic, "kind": "every", "expression": "1s"},
			http.StatusCreated, nil))
		client, err := pulse.NewClient(fmt.Sprintf("127.0.0.1:%d", f.grpcPort), pulse.WithUserPass(devProducer, devProducerPassword))
		require.NoError(t, err)
		defer client.Close()
		for range 5 {
			_, err := client.Get(context.Background(), "00000000-0000-4000-8000-000000000000")
			require.Error(t, err, "no such job")
		}
		// And a reaped job: a worker that stops while its handler hangs
		// drops the result; the lease lapses and the reaper takes it.
		stuck, err := client.Enqueue(context.Background(), topicReaped, map[string]int{"n": 1})
		require.NoError(t, err)
		abandonAJob(t, fmt.Sprintf("127.0.0.1:%d", f.gatewayPort), stuck.ID)
	})

	// A worker on the host, through gateway-proxy's published port, as
	// the README tells host workers to connect; it runs until the test
	// ends.
	hostWorker := startHostWorker(t, fmt.Sprintf("127.0.0.1:%d", f.gatewayPort))

	step("JobsCompleteThroughProxyAndDNS", func(t *testing.T) {
		for _, topic := range []string{topicProxy, topicDNS, topicHost} {
			for range 4 {
				_, err := f.submit(&j, topic, 50)
				require.NoError(t, err)
			}
		}
		// And through control-api's published gRPC port, with the SDK.
		client, err := pulse.NewClient(fmt.Sprintf("127.0.0.1:%d", f.grpcPort), pulse.WithUserPass(devProducer, devProducerPassword))
		require.NoError(t, err)
		defer client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var reqs []pulse.JobRequest
		for i := range 20 {
			reqs = append(reqs, pulse.JobRequest{Topic: topicHost, Args: map[string]int{"grpc": i}})
		}
		subs, err := client.EnqueueMany(ctx, reqs)
		require.NoError(t, err)
		for _, s := range subs {
			j.add(topicHost, s.ID)
		}
		f.requireAllCompleted(t, j.snapshot(), 2*time.Minute)
		require.Positive(t, hostWorker.done(), "the host worker ran jobs")
	})

	step("OneTracePerJobInJaeger", f.oneTracePerJob)

	step("AnExemplarLeadsToItsTrace", func(t *testing.T) { f.followAnExemplar(t, started) })

	step("EveryReplicaServedWork", func(t *testing.T) {
		f.requireStreamsOnEveryReplica(t)
		// Work for every stream, then the counters of every replica.
		for _, topic := range []string{topicProxy, topicDNS, topicHost} {
			_, err := f.submit(&j, topic, 200)
			require.NoError(t, err)
		}
		f.requireAllCompleted(t, j.snapshot(), 2*time.Minute)
		instances := f.gatewayTargets(t, time.Minute)
		require.Len(t, instances, 3)
		eventually(t, time.Minute, 2*time.Second, "every replica claimed and settled jobs", func() error {
			claimed, err := f.promVector(`sum by (instance) (pulse_jobs_dispatched_total{job="dispatch-gateway"})`, time.Time{})
			if err != nil {
				return err
			}
			settled, err := f.promVector(`sum by (instance) (pulse_jobs_settled_total{job="dispatch-gateway",outcome="completed"})`, time.Time{})
			if err != nil {
				return err
			}
			for _, in := range instances {
				if claimed[in] <= 0 || settled[in] <= 0 {
					return fmt.Errorf("claimed %v, settled %v", claimed, settled)
				}
			}
			t.Logf("jobs claimed per replica %v, settled per replica %v", claimed, settled)
			return nil
		})
	})

	step("PauseStopsEveryReplica", func(t *testing.T) {
		instances := f.gatewayTargets(t, time.Minute)
		require.NoError(t, call(http.MethodPost, f.httpURL()+"/v1/dispatch/pause",
			map[string]string{"reason": "compose test", "for": "10m"}, http.StatusOK, nil))
		paused := time.Now()
		resumed := false
		defer func() {
			if !resumed { // leave the fleet usable for the failure dump
				_ = call(http.MethodPost, f.httpURL()+"/v1/dispatch/resume", map[string]string{}, http.StatusOK, nil)
			}
		}()
		// Every gateway's gate holds the pause, as Prometheus saw it.
		eventually(t, 30*time.Second, time.Second, "every gateway reports the pause", func() error {
			v, err := f.promVector(`pulse_dispatch_paused{job="dispatch-gateway",scope="*"}`, time.Time{})
			if err != nil {
				return err
			}
			for _, in := range instances {
				if v[in] != 1 {
					return fmt.Errorf("pulse_dispatch_paused by replica: %v", v)
				}
			}
			return nil
		})
		var held []string
		for _, topic := range []string{topicProxy, topicDNS, topicHost} {
			ids, err := f.submit(&j, topic, 30)
			require.NoError(t, err)
			held = append(held, ids...)
		}
		// Claim counters from a scrape well after the pause returned, then
		// from one 15 s later: no replica may have claimed in between.
		before := paused.Add(7 * time.Second)
		after := before.Add(15 * time.Second)
		time.Sleep(time.Until(after.Add(6 * time.Second)))
		const claims = `sum by (instance) (pulse_jobs_dispatched_total{job="dispatch-gateway"})`
		a, err := f.promVector(claims, before)
		require.NoError(t, err)
		b, err := f.promVector(claims, after)
		require.NoError(t, err)
		for _, in := range instances {
			require.Contains(t, a, in)
			require.Equal(t, a[in], b[in], "replica %s claimed jobs while paused (claims at +7s %v, at +22s %v)", in, a, b)
		}
		t.Logf("claims per replica while paused: %v, unchanged for 15s", b)
		for _, id := range held {
			js, err := f.job(id)
			require.NoError(t, err)
			require.Equal(t, "PENDING", js.Status, "job %s submitted while paused", id)
			require.NotNil(t, js.Waiting, "job %s says why it waits", id)
			require.Equal(t, "paused", js.Waiting.Reason)
		}
		require.NoError(t, call(http.MethodPost, f.httpURL()+"/v1/dispatch/resume", map[string]string{}, http.StatusOK, nil))
		resumed = true
		f.requireAllCompleted(t, j.snapshot(), 2*time.Minute)
	})

	step("KilledGatewayLosesNoJob", func(t *testing.T) {
		instances := f.gatewayTargets(t, time.Minute)
		require.Len(t, instances, 3)
		l := f.startLoad(&j, []string{topicProxy, topicDNS, topicHost}, 10, 250*time.Millisecond, 3000, 90*time.Second)
		time.Sleep(5 * time.Second)
		// The victim: the replica with the most worker streams, as
		// Prometheus sees it.
		conns, err := f.promVector(`pulse_gateway_connected_workers{job="dispatch-gateway"}`, time.Time{})
		require.NoError(t, err)
		total := sum(conns)
		victim := slices.MaxFunc(instances, func(a, b string) int { return int(conns[a] - conns[b]) })
		require.Positive(t, conns[victim], "connected workers by replica: %v", conns)
		var victimC container
		for _, c := range of(f.containers(t), "dispatch-gateway") {
			if c.IP+":9101" == victim {
				victimC = c
			}
		}
		require.NotEmpty(t, victimC.ID, "no container has %s", victim)
		t.Logf("killing %s (%s) with SIGKILL under load; it holds %.0f of %.0f worker streams", victimC.Name, victim, conns[victim], total)
		_, err = f.docker(time.Minute, "kill", "-s", "KILL", victimC.ID)
		require.NoError(t, err)
		killed := time.Now()
		time.Sleep(10 * time.Second)
		sent := l.finish(t)
		t.Logf("submitted %d jobs during the kill", sent)

		// Its workers are back, on the other replicas.
		eventually(t, time.Minute, 2*time.Second, "every worker stream reconnected to the surviving replicas", func() error {
			left := f.gatewayTargets(t, 30*time.Second)
			if slices.Contains(left, victim) {
				return fmt.Errorf("%s is still scraped", victim)
			}
			c, err := f.promVector(`pulse_gateway_connected_workers{job="dispatch-gateway"}`, time.Time{})
			if err != nil {
				return err
			}
			if sum(c) != total {
				return fmt.Errorf("%.0f streams on %v, want %.0f", sum(c), c, total)
			}
			t.Logf("all %.0f worker streams connected to %v, %.1fs after the kill", total, c, time.Since(killed).Seconds())
			return nil
		})
		// Jobs the dead replica had claimed come back when their lease
		// lapses (30 s) and the reaper sweeps (10 s).
		f.requireAllCompleted(t, j.snapshot(), 3*time.Minute)

		f.mustCompose(t, 5*time.Minute, "up", "-d", "--no-build", "--no-deps", "--scale", "dispatch-gateway=3", "dispatch-gateway")
		f.waitHealthy(t, map[string]int{"dispatch-gateway": 3, "demo-worker": 2}, 3*time.Minute)
	})

	step("ScaleTo1AndBackTo3UnderLoad", func(t *testing.T) {
		l := f.startLoad(&j, []string{topicProxy, topicDNS, topicHost}, 10, 250*time.Millisecond, 4000, 150*time.Second)
		time.Sleep(3 * time.Second)
		conns, err := f.promVector(`pulse_gateway_connected_workers{job="dispatch-gateway"}`, time.Time{})
		require.NoError(t, err)
		total := sum(conns)

		start := time.Now()
		f.mustCompose(t, 5*time.Minute, "up", "-d", "--no-build", "--no-deps", "--scale", "dispatch-gateway=1", "dispatch-gateway")
		t.Logf("scaled to 1 in %.1fs", time.Since(start).Seconds())
		f.waitHealthy(t, map[string]int{"dispatch-gateway": 1, "demo-worker": 2}, 2*time.Minute)
		eventually(t, time.Minute, 2*time.Second, "every worker stream on the one replica", func() error {
			in := f.gatewayTargets(t, 30*time.Second)
			c, err := f.promVector(`pulse_gateway_connected_workers{job="dispatch-gateway"}`, time.Time{})
			if err != nil {
				return err
			}
			if len(in) != 1 || c[in[0]] != total {
				return fmt.Errorf("streams by replica %v, want %.0f on one", c, total)
			}
			return nil
		})

		start = time.Now()
		f.mustCompose(t, 5*time.Minute, "up", "-d", "--no-build", "--no-deps", "--scale", "dispatch-gateway=3", "dispatch-gateway")
		f.waitHealthy(t, map[string]int{"dispatch-gateway": 3, "demo-worker": 2}, 2*time.Minute)
		t.Logf("scaled back to 3 in %.1fs", time.Since(start).Seconds())
		require.Len(t, f.gatewayTargets(t, time.Minute), 3)
		time.Sleep(5 * time.Second)
		sent := l.finish(t)
		t.Logf("submitted %d jobs while scaling", sent)
		f.requireAllCompleted(t, j.snapshot(), 3*time.Minute)
	})

	step("EveryJobCompletedAndTheDemoRan", func(t *testing.T) {
		f.requireAllCompleted(t, j.snapshot(), time.Minute)
		t.Logf("%d test jobs submitted from the host, every one COMPLETED", j.count())
		// What a newcomer watching `docker compose up` sees.
		cs := f.containers(t)
		p := of(cs, "demo-producer")
		require.NotEmpty(t, p)
		require.Positive(t, countLines(f.logs(p[0].Name, 0), `"msg":"progress"`), "demo-producer logs its progress")
		w := of(cs, "demo-worker")
		require.NotEmpty(t, w)
		require.Positive(t, countLines(f.logs(w[0].Name, 0), `"msg":"progress"`), "demo-worker logs its progress")
		py := of(cs, "demo-worker-python")
		require.NotEmpty(t, py)
		require.Positive(t, countLines(f.logs(py[0].Name, 0), `"msg":"progress"`), "the Python SDK's demo logs its progress")
		for _, c := range cs {
			if c.Service != "dispatch-gateway" { // one was killed on purpose
				require.Zero(t, c.RestartCount, "%s restarted", c.Name)
			}
		}
	})

	step("EveryDashboardPanelHasData", func(t *testing.T) { f.everyPanelHasData(t, started) })

	step("DownRemovesEverything", func(t *testing.T) {
		hostWorker.stop()
		f.mustCompose(t, 3*time.Minute, "down", "-v", "--remove-orphans", "-t", "20")
		label := "label=com.docker.compose.project=" + f.project
		for _, kind := range [][]string{{"ps", "-aq"}, {"network", "ls", "-q"}, {"volume", "ls", "-q"}} {
			out, err := f.docker(time.Minute, append(kind, "--filter", label)...)
			require.NoError(t, err)
			require.Empty(t, strings.TrimSpace(out), "docker %s still lists the project's: %s", strings.Join(kind, " "), out)
		}
		for _, kind := range [][]string{{"network", "ls", "--format", "{{.Name}}"}, {"volume", "ls", "--format", "{{.Name}}"}} {
			out, err := f.docker(time.Minute, kind...)
			require.NoError(t, err)
			for _, name := range strings.Fields(out) {
				require.False(t, strings.HasPrefix(name, f.project+"_"), "docker %s: %s is left", strings.Join(kind, " "), name)
			}
		}
	})
}

// waitHealthy waits until every service the test started is up: a
// container per replica (want gives the scaled counts, default 1), each
// running and, if it has a healthcheck, healthy; migrate exited 0. A
// container that exited otherwise or restarts fails at once.
func (f *fleet) waitHealthy(t *testing.T, want map[string]int, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	eventually(t, timeout, 2*time.Second, "every service up and healthy", func() error {
		cs := f.containers(t)
		var waiting []string
		for _, svc := range services {
			n := 1
			if w, ok := want[svc]; ok {
				n = w
			}
			got := of(cs, svc)
			if svc == "dispatch-gateway" { // a killed replica may linger
				got = slices.DeleteFunc(got, func(c container) bool { return c.State != "running" })
			}
			if len(got) != n {
				waiting = append(waiting, fmt.Sprintf("%s has %d containers, want %d", svc, len(got), n))
				continue
			}
			for _, c := range got {
				switch {
				case svc == "migrate" && c.State == "exited" && c.ExitCode == 0:
				case svc == "migrate" && c.State == "exited":
					t.Fatalf("migrate exited %d:\n%s", c.ExitCode, f.logs(c.Name, 100))
				case c.State == "exited" || c.State == "dead" || c.State == "restarting" || c.RestartCount > 0:
					t.Fatalf("%s is %s (exit %d, %d restarts):\n%s\ncontainers:\n%s", c.Name, c.State, c.ExitCode, c.RestartCount, f.logs(c.Name, 100), describe(cs))
				case c.State != "running":
					waiting = append(waiting, c.Name+" is "+c.State)
				case slices.Contains(healthchecked, svc) && c.Health == "":
					t.Fatalf("%s has no healthcheck", c.Name)
				case c.Health == "unhealthy":
					t.Fatalf("%s is unhealthy:\n%s", c.Name, f.logs(c.Name, 100))
				case c.Health != "" && c.Health != "healthy":
					waiting = append(waiting, c.Name+" is "+c.Health)
				}
			}
		}
		if len(waiting) > 0 {
			return fmt.Errorf("%s", strings.Join(waiting, "; "))
		}
		return nil
	})
	t.Logf("every service up and healthy after %.1fs", time.Since(start).Seconds())
}

// requireStreamsOnEveryReplica makes sure each gateway replica holds at
// least one worker stream, so each can claim: the DNS worker's twelve
// streams are placed by gRPC's round-robin, and should one replica get
// none, the worker is restarted to place them again (at most 3 times).
func (f *fleet) requireStreamsOnEveryReplica(t *testing.T) {
	t.Helper()
	for try := 0; ; try++ {
		instances := f.gatewayTargets(t, time.Minute)
		var conns map[string]float64
		err := func() error {
			deadline := time.Now().Add(30 * time.Second)
			for {
				var err error
				conns, err = f.promVector(`pulse_gateway_connected_workers{job="dispatch-gateway"}`, time.Time{})
				if err != nil {
					return err
				}
				ok := len(conns) == len(instances)
				for _, in := range instances {
					ok = ok && conns[in] > 0
				}
				if ok {
					return nil
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("worker streams by replica: %v", conns)
				}
				time.Sleep(2 * time.Second)
			}
		}()
		if err == nil {
			t.Logf("worker streams by replica: %v", conns)
			return
		}
		require.Less(t, try, 3, "a replica has no worker stream: %v", err)
		t.Logf("%v; restarting test-worker-dns to place its streams again", err)
		f.mustCompose(t, 2*time.Minute, "restart", "test-worker-dns")
	}
}

func sum(m map[string]float64) float64 {
	s := 0.0
	for _, v := range m {
		s += v
	}
	return s
}

// buildWorker builds cmd/compose-worker as a static binary for the test
// containers to run.
func buildWorker(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("pulse-compose-worker-%d", os.Getpid()))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "compose-worker")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/compose-worker")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/compose-worker:\n%s", out)
	require.NoError(t, os.Chmod(bin, 0o755))
	return bin
}

// hostWorker is an SDK worker in the test process.
type hostWorker struct {
	n    atomic.Int64
	stop func()
}

func (h *hostWorker) done() int64 { return h.n.Load() }

func startHostWorker(t *testing.T, addr string) *hostWorker {
	t.Helper()
	h := &hostWorker{}
	w, err := pulse.NewWorker([]string{addr}, pulse.WithConcurrency(8), pulse.WithWorkerID("compose-test-host"),
		pulse.WithUserPass(devWorker, devWorkerPassword))
	require.NoError(t, err)
	w.Register(topicHost, func(ctx context.Context, job *pulse.Job) error {
		h.n.Add(1)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	h.stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-stopped:
			if err != nil {
				t.Errorf("host worker: %v", err)
			}
		case <-time.After(time.Minute):
			t.Errorf("host worker did not stop within a minute")
		}
	})
	t.Cleanup(h.stop)
	return h
}

// phases records how long each step took, logged at the end.
type phases struct {
	names []string
	took  map[string]time.Duration
}

func (p *phases) add(name string, d time.Duration) {
	if p.took == nil {
		p.took = map[string]time.Duration{}
	}
	p.names = append(p.names, name)
	p.took[name] = d
}

func (p *phases) log(t *testing.T) {
	var b strings.Builder
	var total time.Duration
	for _, name := range p.names {
		fmt.Fprintf(&b, "  %-36s %6.1fs\n", name, p.took[name].Seconds())
		total += p.took[name]
	}
	fmt.Fprintf(&b, "  %-36s %6.1fs\n", "total", total.Seconds())
	t.Logf("compose test steps:\n%s", b.String())
}

// abandonAJob runs a worker of topicReaped until it has started job id,
// then stops it while the handler hangs: the worker gives up on the
// handler after its shutdown timeout and drops the result, so the job's
// lease lapses and the reaper reaps it. The handler is released when the
// test ends.
func abandonAJob(t *testing.T, addr, id string) {
	t.Helper()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	started := make(chan string, 1)
	w, err := pulse.NewWorker([]string{addr}, pulse.WithConcurrency(1), pulse.WithWorkerID("compose-test-abandons"),
		pulse.WithUserPass(devWorker, devWorkerPassword), pulse.WithShutdownTimeout(time.Second),
		pulse.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	w.Register(topicReaped, func(ctx context.Context, job *pulse.Job) error {
		started <- job.ID
		<-release // ignores its context: hangs past the shutdown
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	select {
	case got := <-started:
		require.Equal(t, id, got)
	case <-time.After(time.Minute):
		cancel()
		t.Fatalf("job %s did not start on the abandoning worker within a minute", id)
	}
	cancel()
	select {
	case <-stopped:
	case <-time.After(time.Minute):
		t.Fatalf("the abandoning worker did not stop within a minute")
	}
}
