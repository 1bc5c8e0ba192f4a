package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	pulsesdk "github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
)

// server is control-api's HTTP base URL, shared by every test: one real
// control-api binary over one throwaway Postgres.
var server string

// gateways are the dispatch-gateway addresses, for test workers.
var gateways []string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	// The fleet's binaries are built with the go command, which finds its
	// caches and settings under HOME: pin them first, or every run would
	// download and compile every module again into the throwaway home.
	if err := pinGoEnv(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// No test may pick up the developer's own pulse config or environment.
	home, err := os.MkdirTemp("", "pulse-cli-home-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(home)
	os.Setenv("HOME", home)
	os.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	for _, k := range []string{"PULSE_SERVER", "PULSE_USER", "PULSE_PASSWORD", "PULSE_TOKEN", envCAFile, envClientCert, envClientKey, envAllowPlaintext} {
		os.Unsetenv(k)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fleet, err := localfleet.Up(ctx, localfleet.Options{
		Gateways: 1,
		Env:      map[string]string{"PULSE_AUTH_USERS": "ops:operator:secret,prod:producer:pw,wk:worker:wpw", "PULSE_LOG_LEVEL": "warn"},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting control-api:", err)
		return 1
	}
	defer func() { _ = fleet.Down() }() // the fleet is the tests' scaffolding; its stop errors are not under test
	server = fleet.ControlHTTP
	gateways = fleet.GatewayAddrs
	return m.Run()
}

// pinGoEnv sets, as environment variables, the go command's settings that
// it would otherwise read from under HOME (its caches, its env file).
func pinGoEnv() error {
	names := []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOPROXY", "GOSUMDB", "GONOSUMDB", "GOPRIVATE", "GOFLAGS", "GOTOOLCHAIN"}
	out, err := exec.Command("go", append([]string{"env"}, names...)...).Output()
	if err != nil {
		return fmt.Errorf("go env: %w", err)
	}
	values := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(values) != len(names) {
		return fmt.Errorf("go env: %d values for %d names", len(values), len(names))
	}
	for i, name := range names {
		if os.Getenv(name) == "" && values[i] != "" {
			os.Setenv(name, values[i])
		}
	}
	return nil
}

type result struct {
	code   int
	stdout string
	stderr string
}

// pulse runs the real command tree in-process.
func pulse(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	code := Run(ctx, args, strings.NewReader(stdin), &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func as(user, pw string, args ...string) []string {
	return append([]string{"--server", server, "--user", user, "--password", pw}, args...)
}

func ops(args ...string) []string  { return as("ops", "secret", args...) }
func prod(args ...string) []string { return as("prod", "pw", args...) }

func ok(t *testing.T, args ...string) string {
	t.Helper()
	r := pulse(t, "", args...)
	require.Equalf(t, 0, r.code, "pulse %v: stderr=%s", args, r.stderr)
	require.Empty(t, r.stderr)
	return r.stdout
}

func okJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out := ok(t, append(args, "-o", "json")...)
	require.NoErrorf(t, json.Unmarshal([]byte(out), v), "output: %s", out)
}

func failLine(t *testing.T, r result) string {
	t.Helper()
	require.NotEqual(t, 0, r.code, "stdout=%s", r.stdout)
	line := strings.TrimSuffix(r.stderr, "\n")
	require.NotEmpty(t, line)
	require.NotContains(t, line, "\n", "error must be one line")
	return line
}

func TestJobsLifecycle(t *testing.T) {
	t.Parallel()
	topic := "cli.lifecycle"
	var sub struct {
		ID        string `json:"id"`
		Duplicate bool   `json:"duplicate"`
	}
	okJSON(t, &sub, prod("submit", topic, "--args", `{"n":7}`, "--priority", "9", "--max-attempts", "3", "--idempotency-key", "k-1")...)
	require.NotEmpty(t, sub.ID)
	require.False(t, sub.Duplicate)

	// Same key again: the live job, marked duplicate (table output).
	out := ok(t, prod("submit", topic, "--args", `{"n":7}`, "--idempotency-key", "k-1")...)
	require.Contains(t, out, sub.ID)
	require.Contains(t, out, "duplicate")

	var j job
	okJSON(t, &j, prod("jobs", "get", sub.ID)...)
	require.Equal(t, sub.ID, j.ID)
	require.Equal(t, topic, j.Topic)
	require.Equal(t, "PENDING", j.Status)
	require.EqualValues(t, 9, j.Priority)
	require.EqualValues(t, 3, j.MaxAttempts)
	require.JSONEq(t, `{"n":7}`, string(j.Args))

	out = ok(t, prod("jobs", "get", sub.ID)...)
	require.Contains(t, out, "Status:")
	require.Contains(t, out, "Waiting:")

	// A delayed job.
	at := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	later := strings.TrimSpace(ok(t, prod("submit", topic, "--at", at)...))
	require.NotEmpty(t, later)

	var l jobList
	okJSON(t, &l, prod("jobs", "list", "--topic", topic, "--status", "pending")...)
	ids := map[string]bool{}
	for _, x := range l.Jobs {
		ids[x.ID] = true
	}
	require.True(t, ids[sub.ID] && ids[later], "both jobs listed: %v", ids)
	out = ok(t, prod("jobs", "list", "--topic", topic)...)
	require.Contains(t, out, "STATUS")
	require.Contains(t, out, sub.ID)

	// Paging: one per page.
	okJSON(t, &l, prod("jobs", "list", "--topic", topic, "--limit", "1")...)
	require.Len(t, l.Jobs, 1)
	require.NotEmpty(t, l.NextPageToken)
	var l2 jobList
	okJSON(t, &l2, prod("jobs", "list", "--topic", topic, "--limit", "1", "--page-token", l.NextPageToken)...)
	require.Len(t, l2.Jobs, 1)
	require.NotEqual(t, l.Jobs[0].ID, l2.Jobs[0].ID)

	// Producer may not cancel.
	line := failLine(t, pulse(t, "", prod("jobs", "cancel", sub.ID)...))
	require.Contains(t, line, "operator")

	okJSON(t, &j, ops("jobs", "cancel", sub.ID)...)
	require.Equal(t, "CANCELED", j.Status)
	out = ok(t, ops("jobs", "retry", sub.ID)...)
	require.Contains(t, out, "PENDING")
	okJSON(t, &j, prod("jobs", "get", sub.ID)...)
	require.Equal(t, "PENDING", j.Status)

	// Retrying a PENDING job is an invalid transition: one line, exit 1.
	r := pulse(t, "", ops("jobs", "retry", sub.ID)...)
	failLine(t, r)
	require.Equal(t, ExitError, r.code)
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want string
		code int
	}{
		{"args not JSON", prod("submit", "cli.bad", "--args", "nope"), "--args", ExitUsage},
		{"args not an object", prod("submit", "cli.bad", "--args", "[1]"), "--args", ExitUsage},
		{"bad topic", prod("submit", "bad topic!", "--args", "{}"), "topic", ExitError},
		{"unknown status", prod("jobs", "list", "--status", "sleeping"), "SLEEPING", ExitError},
		{"priority out of range", prod("submit", "cli.bad", "--priority", "11"), "priority", ExitError},
		{"bad --at", prod("submit", "cli.bad", "--at", "tomorrow"), "--at", ExitUsage},
		{"missing reason", ops("dispatch", "pause"), "--reason", ExitUsage},
		{"bad mode", ops("dispatch", "pause", "--reason", "x", "--mode", "nap"), "--mode", ExitUsage},
		{"unknown job", prod("jobs", "get", "0190c8a4-7a51-7c3e-9d43-1f2a3b4c5d6e"), "not_found", ExitError},
		{"unknown flag", prod("jobs", "list", "--colour"), "unknown flag", ExitUsage},
		{"missing arg", prod("jobs", "get"), "arg", ExitUsage},
		{"bad output", prod("jobs", "list", "-o", "yaml"), "table or json", ExitUsage},
		{"wrong password", as("ops", "nope", "jobs", "list"), "401", ExitError},
		{"no server", []string{"jobs", "list"}, "no server", ExitUsage},
		{"drain without wait", ops("dispatch", "drain"), "--wait", ExitUsage},
		{"unknown subcommand", prod("jobs", "frob"), `unknown command "frob" for "pulse jobs"; use one of: cancel, get, list, retry`, ExitUsage},
		{"bare group", prod("dispatch"), `"pulse dispatch" needs a command; use one of: drain, events, pause, resume, status`, ExitUsage},
		{"bare group, no server", []string{"schedules"}, "needs a command", ExitUsage},
		{"bad --timeout", prod("submit", "cli.bad", "--timeout", "soon"), "timeout", ExitUsage},
		{"timeout out of range", prod("submit", "cli.bad", "--timeout", "25h"), "timeout", ExitError},
		{"bad --unique-for", prod("submit", "cli.bad", "--unique-for", "1e1000000"), "unique-for", ExitUsage},
		{"negative unique_for", prod("submit", "cli.bad", "--unique-for", "-1h"), "unique_for", ExitError},
		{"bad --retry-base", prod("submit", "cli.bad", "--retry-base", "soon"), "retry-base", ExitUsage},
		{"retry max below base", prod("submit", "cli.bad", "--retry-base", "1m", "--retry-max", "1s"), "retry.max", ExitError},
		{"retry max alone", prod("submit", "cli.bad", "--retry-max", "1m"), "retry.max", ExitError},
		{"retry both forms", prod("submit", "cli.bad", "--retry-base", "1s", "--retry-fixed", "5s"), "retry", ExitError},
		{"retry fixed too long", prod("submit", "cli.bad", "--retry-fixed", "9000h"), "retry.fixed", ExitError},
		{"retry fixed zero", prod("submit", "cli.bad", "--retry-fixed", "0s"), "retry.fixed", ExitError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := pulse(t, "", tc.args...)
			line := failLine(t, r)
			require.Contains(t, line, tc.want)
			require.True(t, strings.HasPrefix(line, "pulse: "), line)
			require.Equal(t, tc.code, r.code, line)
		})
	}
}

func TestDispatchPauseStatusEventsResume(t *testing.T) {
	t.Parallel()
	topic := "cli.pause"
	reason := "cli test pause " + time.Now().Format(time.RFC3339Nano)

	var ch changeResult
	okJSON(t, &ch, ops("dispatch", "pause", "--topic", topic, "--reason", reason, "--mode", "quiesce", "--for", "30m")...)
	require.True(t, ch.Changed)
	require.True(t, ch.State.Paused)
	require.Equal(t, "quiesce", ch.State.Mode)
	require.Equal(t, "ops", ch.State.Actor)
	require.NotNil(t, ch.State.Until)

	// Same pause again: no change (table).
	out := ok(t, ops("dispatch", "pause", "--topic", topic, "--reason", reason, "--mode", "quiesce", "--for", "30m")...)
	require.Contains(t, out, topic)

	// A producer reads the state but may not pause.
	var st dispatchStatus
	okJSON(t, &st, prod("dispatch", "status")...)
	found := false
	for _, s := range st.Scopes {
		if s.Scope == topic {
			found = true
			require.True(t, s.Paused)
			require.Equal(t, reason, s.Reason)
		}
	}
	require.True(t, found, "scope %s in %+v", topic, st.Scopes)
	out = ok(t, prod("dispatch", "status")...)
	require.Contains(t, out, "PAUSED")
	require.Contains(t, out, reason)

	r := pulse(t, "", prod("dispatch", "pause", "--topic", topic, "--reason", "not allowed")...)
	line := failLine(t, r)
	require.Equal(t, ExitError, r.code)
	require.Contains(t, line, "operator")
	require.Contains(t, line, "403")

	var ev struct {
		Events []struct {
			Scope, Action, Reason, Actor string
		} `json:"events"`
	}
	okJSON(t, &ev, prod("dispatch", "events", "--limit", "500")...)
	paused := false
	for _, e := range ev.Events {
		if e.Scope == topic && e.Action == "pause" && e.Reason == reason && e.Actor == "ops" {
			paused = true
		}
	}
	require.True(t, paused, "pause event in %+v", ev.Events)
	require.Contains(t, ok(t, prod("dispatch", "events")...), "ACTION")

	out = ok(t, ops("dispatch", "resume", "--topic", topic)...)
	require.Contains(t, out, "resumed")
	okJSON(t, &ch, ops("dispatch", "resume", "--topic", topic)...)
	require.False(t, ch.Changed)
	require.False(t, ch.State.Paused)
}

func TestDrainWait(t *testing.T) {
	t.Parallel()
	topic := "cli.drain"
	r := pulse(t, "", ops("dispatch", "drain", "--wait", "--topic", topic, "--timeout", "30s", "--interval", "100ms", "--reason", "cli drain test")...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "paused scope "+topic)
	require.Contains(t, r.stdout, "drained")
	var st dispatchStatus
	okJSON(t, &st, prod("dispatch", "status")...)
	require.True(t, scopePaused(st, topic), "drain leaves the scope paused")

	// Already paused: no second pause, still exit 0.
	r = pulse(t, "", ops("dispatch", "drain", "--wait", "--topic", topic, "--interval", "100ms")...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "already paused")

	// A producer cannot drain.
	r = pulse(t, "", prod("dispatch", "drain", "--wait", "--topic", "cli.drain2")...)
	require.Contains(t, failLine(t, r), "operator")
	ok(t, ops("dispatch", "resume", "--topic", topic)...)
}

func TestSchedules(t *testing.T) {
	t.Parallel()
	name := fmt.Sprintf("cli-sched-%d", time.Now().UnixNano())
	var s schedule
	okJSON(t, &s, ops("schedules", "create", "--name", name, "--topic", "cli.sched", "--kind", "every", "--expression", "1h", "--args", `{"a":1}`)...)
	require.NotEmpty(t, s.ID)
	require.Equal(t, "enabled", scheduleState(s))

	var list struct {
		Schedules []schedule `json:"schedules"`
	}
	okJSON(t, &list, prod("schedules", "list", "--limit", "500")...)
	seen := false
	for _, x := range list.Schedules {
		seen = seen || x.ID == s.ID
	}
	require.True(t, seen)
	require.Contains(t, ok(t, prod("schedules", "get", s.ID)...), name)

	okJSON(t, &s, ops("schedules", "disable", s.ID)...)
	require.Equal(t, "disabled", scheduleState(s))
	require.Contains(t, ok(t, ops("schedules", "enable", s.ID)...), "enabled")
	okJSON(t, &s, ops("schedules", "update", s.ID, "--name", name, "--topic", "cli.sched", "--kind", "cron", "--expression", "0 2 * * *", "--time-zone", "Europe/Paris")...)
	require.Equal(t, "cron", s.Kind)
	var jl jobList
	okJSON(t, &jl, prod("schedules", "jobs", s.ID)...)

	line := failLine(t, pulse(t, "", ops("schedules", "create", "--name", name+"x", "--topic", "cli.sched", "--kind", "every", "--expression", "soon")...))
	require.Contains(t, line, "expression")
	require.Contains(t, failLine(t, pulse(t, "", prod("schedules", "delete", s.ID)...)), "operator")
	require.Contains(t, ok(t, ops("schedules", "delete", s.ID)...), "deleted")
	require.Contains(t, failLine(t, pulse(t, "", prod("schedules", "get", s.ID)...)), "not_found")
}

func TestPasswd(t *testing.T) {
	t.Parallel()
	r := pulse(t, "s3cret pass\n", "passwd", "--cost", "4")
	require.Equal(t, 0, r.code, r.stderr)
	h := strings.TrimSpace(r.stdout)
	require.NoError(t, bcrypt.CompareHashAndPassword([]byte(h), []byte("s3cret pass")))
	require.Error(t, bcrypt.CompareHashAndPassword([]byte(h), []byte("other")))

	r = pulse(t, "pw\n", "passwd", "--cost", "4", "--name", "ops", "--role", "operator")
	require.Equal(t, 0, r.code, r.stderr)
	parts := strings.SplitN(strings.TrimSpace(r.stdout), ":", 3)
	require.Len(t, parts, 3)
	require.Equal(t, []string{"ops", "operator"}, parts[:2])
	require.NoError(t, bcrypt.CompareHashAndPassword([]byte(parts[2]), []byte("pw")))

	failLine(t, pulse(t, "", "passwd"))
}

func TestHelpHasExamples(t *testing.T) {
	t.Parallel()
	for _, path := range [][]string{
		{}, {"jobs"}, {"jobs", "list"}, {"jobs", "get"}, {"jobs", "cancel"}, {"jobs", "retry"}, {"submit"},
		{"schedules"}, {"schedules", "create"}, {"schedules", "update"}, {"schedules", "jobs"},
		{"dispatch"}, {"dispatch", "pause"}, {"dispatch", "resume"}, {"dispatch", "status"},
		{"dispatch", "events"}, {"dispatch", "drain"}, {"login"}, {"passwd"}, {"config"},
	} {
		out := ok(t, append(path, "--help")...)
		require.Contains(t, out, "Examples:", "pulse %v --help", path)
	}
	require.Contains(t, ok(t, "dispatch", "drain", "--help"), "Exit codes")
}

// TestLoginAndPrecedence changes the process environment, so it is not
// parallel (Go runs it before the parallel tests resume).
func TestLoginAndPrecedence(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "xdg"))
	t.Setenv("PULSE_SERVER", "")
	t.Setenv("PULSE_USER", "")
	t.Setenv("PULSE_PASSWORD", "")
	t.Setenv("PULSE_TOKEN", "")

	out := ok(t, "login", "--server", server, "--user", "ops", "--password", "secret")
	dir, err := os.UserConfigDir()
	require.NoError(t, err)
	path := filepath.Join(dir, "pulse", "config.json")
	require.Contains(t, out, path)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	var fc fileConfig
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &fc))
	require.Equal(t, fileConfig{Server: server, User: "ops", Password: "secret"}, fc)

	// The file alone is enough.
	ok(t, "dispatch", "status")
	ok(t, "jobs", "cancel", strings.TrimSpace(ok(t, "submit", "cli.login")))

	var c conn
	okJSON(t, &c, "config")
	require.Equal(t, "config", c.ServerSource)
	require.Equal(t, "config", c.AuthSource)

	// Env beats the file: the producer from env cannot cancel.
	t.Setenv("PULSE_USER", "prod")
	t.Setenv("PULSE_PASSWORD", "pw")
	id := strings.TrimSpace(ok(t, "submit", "cli.login"))
	require.Contains(t, failLine(t, pulse(t, "", "jobs", "cancel", id)), "operator")
	// A bad env server beats the file's good one...
	t.Setenv("PULSE_SERVER", "http://127.0.0.1:1")
	require.Contains(t, failLine(t, pulse(t, "", "dispatch", "status")), "cannot reach")
	okJSON(t, &c, "config")
	require.Equal(t, "env", c.ServerSource)
	require.Equal(t, "env", c.AuthSource)
	require.Equal(t, "prod", c.User)
	// ... and flags beat env.
	ok(t, "--server", server, "--user", "ops", "--password", "secret", "jobs", "cancel", id)
	okJSON(t, &c, "--server", server, "--token", "tkn", "config")
	require.Equal(t, "flag", c.ServerSource)
	require.Equal(t, "bearer", c.Auth)

	// Login with a password on stdin, then a token login replaces it.
	r := pulse(t, "stdinpw\n", "login", "--server", server+"/", "--user", "ops")
	require.Equal(t, 0, r.code, r.stderr)
	b, _ = os.ReadFile(path)
	require.NoError(t, json.Unmarshal(b, &fc))
	require.Equal(t, fileConfig{Server: server, User: "ops", Password: "stdinpw"}, fc)
	ok(t, "login", "--server", server, "--token", "abc")
	b, _ = os.ReadFile(path)
	fc = fileConfig{}
	require.NoError(t, json.Unmarshal(b, &fc))
	require.Equal(t, fileConfig{Server: server, Token: "abc"}, fc)

	failLine(t, pulse(t, "", "login", "--user", "ops", "--password", "x"))
	failLine(t, pulse(t, "", "login", "--server", "ftp://x"))
}

// TestDrainWaitsForRunningJob runs a real worker whose handler blocks: drain
// times out with exit 3 while it runs, and returns 0 once it finishes.
func TestDrainWaitsForRunningJob(t *testing.T) {
	t.Parallel()
	topic := "cli.drainrun"
	release := make(chan struct{})
	started := make(chan string, 1)
	w, err := pulsesdk.NewWorker(gateways, pulsesdk.WithUserPass("wk", "wpw"), pulsesdk.WithConcurrency(1),
		pulsesdk.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(t, err)
	w.Register(topic, func(ctx context.Context, j *pulsesdk.Job) error {
		started <- j.ID
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done //nolint:errcheck // the worker's result after cancel is not under test
	})

	id := strings.TrimSpace(ok(t, prod("submit", topic, "--args", `{"slow":true}`)...))
	select {
	case got := <-started:
		require.Equal(t, id, got)
	case <-time.After(proctest.Patience):
		t.Fatal("job never started")
	}
	var j job
	okJSON(t, &j, prod("jobs", "get", id)...)
	require.Equal(t, "RUNNING", j.Status)

	r := pulse(t, "", ops("dispatch", "drain", "--wait", "--topic", topic, "--timeout", "1s", "--interval", "200ms")...)
	require.Equal(t, ExitDrainTimeout, r.code, "stdout=%s stderr=%s", r.stdout, r.stderr)
	require.Contains(t, failLine(t, r), "timed out")
	require.Contains(t, r.stdout, topic+" running=1")

	// The job finishes once this drain has seen it running, not after some
	// time: the drain then has both a running and a drained poll to print.
	out := &watchWriter{want: topic + " running=1", seen: make(chan struct{})}
	go func() {
		select {
		case <-out.seen:
		case <-time.After(proctest.Patience):
		}
		close(release)
	}()
	var errb bytes.Buffer
	drainCtx, drainCancel := context.WithTimeout(t.Context(), proctest.Patience)
	defer drainCancel()
	code := Run(drainCtx, ops("dispatch", "drain", "--wait", "--topic", topic, "--timeout", "30s", "--interval", "100ms"), strings.NewReader(""), out, &errb)
	r = result{code: code, stdout: out.String(), stderr: errb.String()}
	require.Equal(t, 0, r.code, "stdout=%s stderr=%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "already paused")
	require.Contains(t, r.stdout, topic+" running=1")
	require.Contains(t, r.stdout, "drained")
	ok(t, ops("dispatch", "resume", "--topic", topic)...)
}

// --timeout and --unique-for reach the job: the job shows its timeout, and
// a second submit of the same topic and args within the period prints the
// first job's id, marked duplicate.
func TestSubmitTimeoutAndUniqueFor(t *testing.T) {
	t.Parallel()
	topic := "cli.unique." + strconv.FormatInt(time.Now().UnixNano(), 36)
	var first, second struct {
		ID        string `json:"id"`
		Duplicate bool   `json:"duplicate"`
	}
	okJSON(t, &first, prod("submit", topic, "--args", `{"a":1,"b":2}`, "--timeout", "90s", "--unique-for", "1h")...)
	require.False(t, first.Duplicate)
	okJSON(t, &second, prod("submit", topic, "--args", `{"b":2, "a":1}`, "--unique-for", "1h")...)
	require.True(t, second.Duplicate)
	require.Equal(t, first.ID, second.ID)
	out := ok(t, prod("submit", topic, "--args", `{"a":1,"b":2}`, "--unique-for", "1h")...)
	require.Contains(t, out, first.ID)
	require.Contains(t, out, "(duplicate")

	var j job
	okJSON(t, &j, prod("jobs", "get", first.ID)...)
	require.NotNil(t, j.Timeout)
	require.Equal(t, "1m30s", *j.Timeout)
	require.Contains(t, ok(t, prod("jobs", "get", first.ID)...), "1m30s per attempt")
}

// --retry-base/--retry-max and --retry-fixed reach the job, and jobs get
// shows them.
func TestSubmitRetryBackoff(t *testing.T) {
	t.Parallel()
	topic := "cli.retry." + strconv.FormatInt(time.Now().UnixNano(), 36)
	var exp, fixed struct {
		ID string `json:"id"`
	}
	okJSON(t, &exp, prod("submit", topic, "--retry-base", "2s", "--retry-max", "10m")...)
	okJSON(t, &fixed, prod("submit", topic, "--retry-fixed", "30s")...)

	var j struct {
		Retry *struct {
			Base  string `json:"base"`
			Max   string `json:"max"`
			Fixed string `json:"fixed"`
		} `json:"retry"`
	}
	okJSON(t, &j, prod("jobs", "get", exp.ID)...)
	require.NotNil(t, j.Retry)
	require.Equal(t, "2s", j.Retry.Base)
	require.Equal(t, "10m0s", j.Retry.Max)
	require.Contains(t, ok(t, prod("jobs", "get", exp.ID)...), "2s doubling per attempt, at most 10m0s, jittered")
	require.Contains(t, ok(t, prod("jobs", "get", fixed.ID)...), "30s between attempts")
}

// -h on a group still prints its help and succeeds.
func TestGroupHelpStillSucceeds(t *testing.T) {
	t.Parallel()
	r := pulse(t, "", "jobs", "-h")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "pulse jobs [command]")
	require.NotContains(t, r.stdout, "pulse jobs [flags]")
}

// watchWriter collects output and closes seen once it contains want.
type watchWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// --replace-key replaces the key's pending job: the second submit prints
// the first job's id, marked replaced, and the job has the new args;
// keep_first keeps it; a bad mode is refused naming the field.
func TestSubmitReplaceKey(t *testing.T) {
	t.Parallel()
	topic := "cli.replace"
	first := strings.TrimSpace(ok(t, prod("submit", topic, "--args", `{"v":1}`, "--at", "2099-01-01T00:00:00Z", "--replace-key", "doc-7")...))
	out := ok(t, prod("submit", topic, "--args", `{"v":2}`, "--at", "2099-01-01T00:00:00Z", "--replace-key", "doc-7")...)
	require.Contains(t, out, first)
	require.Contains(t, out, "replaced")
	out = ok(t, prod("submit", topic, "--args", `{"v":3}`, "--replace-key", "doc-7", "--replace-mode", "keep_first")...)
	require.Contains(t, out, first)
	require.Contains(t, out, "kept")

	var j struct {
		Args       json.RawMessage `json:"args"`
		ReplaceKey string          `json:"replace_key"`
		Replaced   int             `json:"replaced"`
	}
	okJSON(t, &j, prod("jobs", "get", first)...)
	require.JSONEq(t, `{"v":2}`, string(j.Args))
	require.Equal(t, "doc-7", j.ReplaceKey)
	require.Equal(t, 1, j.Replaced)

	r := pulse(t, "", prod("submit", topic, "--replace-key", "doc-7", "--replace-mode", "latest")...)
	require.Contains(t, failLine(t, r), "replace_mode")
}

// --depends-on makes the job wait for its parents: it shows the parent it
// waits for in blocked_by; an unknown parent is refused naming the field,
// and --on-parent-failure without --depends-on is a usage error.
func TestSubmitDependsOn(t *testing.T) {
	t.Parallel()
	topic := "cli.depends"
	parent := strings.TrimSpace(ok(t, prod("submit", topic, "--at", "2099-01-01T00:00:00Z")...))
	child := strings.TrimSpace(ok(t, prod("submit", topic, "--depends-on", parent, "--on-parent-failure", "run")...))
	var j struct {
		BlockedBy  int    `json:"blocked_by"`
		WorkflowID string `json:"workflow_id"`
	}
	okJSON(t, &j, prod("jobs", "get", child)...)
	require.Equal(t, 1, j.BlockedBy)
	require.Equal(t, child, j.WorkflowID)

	r := pulse(t, "", prod("submit", topic, "--depends-on", "01a219e2-71b5-71b3-83f5-25ae32f812f3")...)
	require.Contains(t, failLine(t, r), "depends_on[0]")
	r = pulse(t, "", prod("submit", topic, "--on-parent-failure", "run")...)
	require.Contains(t, failLine(t, r), "--depends-on")
}
