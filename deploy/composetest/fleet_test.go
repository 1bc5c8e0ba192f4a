package composetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fleet is one compose project of the whole pulse fleet, under a name of
// its own, with its host ports on 127.0.0.1 chosen free.
type fleet struct {
	root    string   // repository root: compose's project directory
	project string   // compose project name, unique per run
	files   []string // compose files, the repo's first
	env     []string // environment of every docker compose call

	httpPort, grpcPort, gatewayPort, promPort, jaegerPort int
}

// newFleet prepares (but does not start) the project.
func newFleet(t *testing.T, worker string) *fleet {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "docker-compose.yml"))
	f := &fleet{
		root:    root,
		project: fmt.Sprintf("pulse-ct-%d-%d", os.Getpid(), time.Now().Unix()%100000),
		files:   []string{filepath.Join(root, "docker-compose.yml"), filepath.Join(root, "deploy", "composetest", "compose.test.yml")},
	}
	f.httpPort, f.grpcPort, f.gatewayPort, f.promPort, f.jaegerPort = freePort(t), freePort(t), freePort(t), freePort(t), freePort(t)
	f.env = append(os.Environ(),
		"PULSE_IMAGE_TAG="+imageTag,
		"PULSE_HTTP_PORT="+strconv.Itoa(f.httpPort),
		"PULSE_GRPC_PORT="+strconv.Itoa(f.grpcPort),
		"PULSE_GATEWAY_PORT="+strconv.Itoa(f.gatewayPort),
		"PULSE_PROMETHEUS_PORT="+strconv.Itoa(f.promPort),
		"PULSE_GRAFANA_PORT="+strconv.Itoa(freePort(t)),
		"PULSE_JAEGER_PORT="+strconv.Itoa(f.jaegerPort),
		"PULSE_COMPOSETEST_WORKER="+worker,
		"COMPOSE_PROFILES=",
		"COMPOSE_PROJECT_NAME=",
	)
	return f
}

func (f *fleet) httpURL() string { return fmt.Sprintf("http://127.0.0.1:%d", f.httpPort) }
func (f *fleet) promURL() string { return fmt.Sprintf("http://127.0.0.1:%d", f.promPort) }

// imageTag tags the pulse images the test builds (PULSE_IMAGE_TAG), apart
// from a user's dev images; the layers are shared, so a rebuild is quick.
const imageTag = "compose-test"

// freePort is a TCP port on 127.0.0.1 nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// compose runs `docker compose` on the project, bounded by timeout, and
// returns its combined output.
func (f *fleet) compose(timeout time.Duration, args ...string) (string, error) {
	full := []string{"compose", "-p", f.project}
	for _, file := range f.files {
		full = append(full, "-f", file)
	}
	return f.docker(timeout, append(full, args...)...)
}

// docker runs the docker CLI with the project's environment.
func (f *fleet) docker(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Dir = f.root
	cmd.Env = f.env
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("docker %s: gave up after %s: %w", strings.Join(args, " "), timeout, ctx.Err())
	} else if err != nil {
		err = fmt.Errorf("docker %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), err
}

// mustCompose is compose failing the test on an error.
func (f *fleet) mustCompose(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	out, err := f.compose(timeout, args...)
	require.NoError(t, err)
	return out
}

// container is what the test reads of one container of the project.
type container struct {
	ID, Name, Service string
	State             string // running, exited, restarting, ...
	Health            string // healthy, unhealthy, starting, "" (no healthcheck)
	ExitCode          int
	RestartCount      int
	IP                string
	StartedAt         time.Time
	FinishedAt        time.Time
}

// containers lists every container of the project (stopped ones too),
// inspected.
func (f *fleet) containers(t *testing.T) []container {
	t.Helper()
	out, err := f.docker(time.Minute, "ps", "-aq", "--no-trunc", "--filter", "label=com.docker.compose.project="+f.project)
	require.NoError(t, err)
	ids := strings.Fields(out)
	if len(ids) == 0 {
		return nil
	}
	out, err = f.docker(time.Minute, append([]string{"inspect"}, ids...)...)
	require.NoError(t, err)
	var raw []struct {
		ID     string `json:"Id"`
		Name   string
		Config struct{ Labels map[string]string }
		State  struct {
			Status     string
			ExitCode   int
			StartedAt  time.Time
			FinishedAt time.Time
			Health     *struct{ Status string }
		}
		RestartCount    int
		NetworkSettings struct {
			Networks map[string]struct{ IPAddress string }
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &raw))
	var cs []container
	for _, r := range raw {
		c := container{
			ID: r.ID[:12], Name: strings.TrimPrefix(r.Name, "/"), Service: r.Config.Labels["com.docker.compose.service"],
			State: r.State.Status, ExitCode: r.State.ExitCode, RestartCount: r.RestartCount,
			StartedAt: r.State.StartedAt, FinishedAt: r.State.FinishedAt,
		}
		if r.State.Health != nil {
			c.Health = r.State.Health.Status
		}
		for _, n := range r.NetworkSettings.Networks {
			c.IP = n.IPAddress
		}
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b container) int { return strings.Compare(a.Name, b.Name) })
	return cs
}

// of returns the containers of one service.
func of(cs []container, service string) []container {
	var out []container
	for _, c := range cs {
		if c.Service == service {
			out = append(out, c)
		}
	}
	return out
}

func describe(cs []container) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "  %-45s %-10s health=%-9s exit=%d restarts=%d ip=%s\n", c.Name, c.State, c.Health, c.ExitCode, c.RestartCount, c.IP)
	}
	return b.String()
}

// logs is one container's output (stdout and stderr), at most tail lines
// (0: all).
func (f *fleet) logs(name string, tail int) string {
	args := []string{"logs", "--timestamps"}
	if tail > 0 {
		args = append(args, "--tail", strconv.Itoa(tail))
	}
	out, err := f.docker(time.Minute, append(args, name)...)
	if err != nil {
		return fmt.Sprintf("(docker logs %s: %v)", name, err)
	}
	return out
}

// countLines counts the lines of s containing substr.
func countLines(s, substr string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if bytes.Contains(sc.Bytes(), []byte(substr)) {
			n++
		}
	}
	return n
}

// dumpOnFailure prints, when the test has failed, the state of every
// container and the logs of each one that is not running and healthy in
// full (the tail of the others), and writes every log to dir.
func (f *fleet) dumpOnFailure(t *testing.T, dir string) {
	if !t.Failed() {
		return
	}
	cs := f.containers(t)
	t.Logf("compose test FAILED; containers of %s:\n%s", f.project, describe(cs))
	_ = os.MkdirAll(dir, 0o755)
	for _, c := range cs {
		all := f.logs(c.Name, 0)
		_ = os.WriteFile(filepath.Join(dir, c.Name+".log"), []byte(all), 0o644)
		bad := c.State != "running" && !(c.Service == "migrate" && c.ExitCode == 0) ||
			c.Health == "unhealthy" || c.Health == "starting" || c.RestartCount > 0
		if bad {
			t.Logf("==== %s (%s, exit %d, restarts %d, health %q): logs ====\n%s", c.Name, c.State, c.ExitCode, c.RestartCount, c.Health, lastLines(all, 200))
		} else {
			t.Logf("==== %s: last 20 lines ====\n%s", c.Name, lastLines(all, 20))
		}
	}
	t.Logf("every container's full log: %s", dir)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// eventually polls cond every interval until it returns nil or timeout
// passes, then fails with cond's last error.
func eventually(t *testing.T, timeout, interval time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(interval)
	}
}

// docker-compose.yml's development users (x-pulse-auth).
const (
	devOperator, devOperatorPassword = "operator", "dev-operator"
	devProducer, devProducerPassword = "producer", "dev-producer"
	devWorker, devWorkerPassword     = "worker", "dev-worker"
)
