// Package pgcluster starts a throwaway PostgreSQL cluster from the binaries
// installed on the machine (initdb and pg_ctl on PATH or under
// /usr/lib/postgresql/*/bin). Tests, the no-Docker dev fleet and the load
// test use it; nothing in production does.
//
// The server dies with the process that started it: a test binary killed
// by a timeout, a Ctrl-C or kill -9 takes its cluster along instead of
// leaving it running (see watcher), and the next Start removes the files
// such a cluster left behind.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/server/freeport"
	"github.com/pulsequeue/pulse/pkg/server/ownedtemp"
)

// Options tune the cluster. The zero value is a durable-enough cluster for
// development; Fast trades durability for speed in tests.
type Options struct {
	// Fast turns off fsync and synchronous commit: right for tests, wrong
	// for benchmarks that claim durability.
	Fast bool
	// Port to listen on; 0 picks a free one.
	Port int
	// MaxConnections defaults to 200.
	MaxConnections int
	// Dir is the data directory's parent; empty means a new temp dir.
	Dir string
	// Settings are extra postgresql.conf lines, applied last.
	Settings map[string]string
}

// Cluster is a running throwaway PostgreSQL server.
type Cluster struct {
	root    string // removed by Stop
	dataDir string
	port    int
	binDir  string
	cred    *syscall.Credential

	mu      sync.Mutex
	watcher *watcher // nil while the server is stopped
}

// watcher stops the server when this process exits, however it exits. It
// is a child process (sh) reading a pipe whose only write end this
// process holds: when the process ends the kernel closes that end, the
// read returns, and the watcher sends the postmaster SIGQUIT, an immediate
// shutdown that takes its backends with it. pg_ctl detaches the
// postmaster from this process, so nothing else would stop it.
//
// A process, not a goroutine: a test may start its package's cluster from
// inside a testing/synctest bubble, which must not be left with a
// goroutine that outlives it.
type watcher struct {
	cmd  *exec.Cmd
	pipe *os.File // the write end, close-on-exec: no other child inherits it
}

// watchScript waits for end of input, then stops the postmaster ($1).
const watchScript = `read -r _; kill -QUIT "$1" 2>/dev/null`

// tempPattern names the roots Start creates.
const tempPattern = "pulse-pg-"

// BinDir finds the directory holding initdb and pg_ctl.
func BinDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(matches) == 0 {
		return "", errors.New("pgcluster: no PostgreSQL server binaries found (pg_ctl on PATH or /usr/lib/postgresql/*/bin); install postgresql or set PULSE_TEST_DATABASE_URL")
	}
	sort.Slice(matches, func(i, j int) bool { return versionOf(matches[i]) > versionOf(matches[j]) })
	return filepath.Dir(matches[0]), nil
}

func versionOf(path string) int {
	parts := strings.Split(path, string(filepath.Separator))
	for _, p := range parts {
		if n, err := strconv.Atoi(p); err == nil {
			return n
		}
	}
	return 0
}

// Start initialises and starts a cluster. PostgreSQL refuses to run as root,
// so when this process is root the server runs as the "postgres" user.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	root := opts.Dir
	if root == "" {
		removeAbandoned("")
		if root, err = ownedtemp.Make("", tempPattern); err != nil {
			return nil, fmt.Errorf("pgcluster: %w", err)
		}
	}
	c := &Cluster{root: root, dataDir: filepath.Join(root, "data"), binDir: bin}
	if os.Geteuid() == 0 {
		cred, err := postgresCredential()
		if err != nil {
			os.RemoveAll(root)
			return nil, err
		}
		c.cred = cred
		if err := os.Chown(root, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(root)
			return nil, fmt.Errorf("pgcluster: chown %s: %w", root, err)
		}
		// The parent of a MkdirTemp dir is world-traversable (/tmp); make sure
		// the root itself is too so the postgres user can reach it.
		_ = os.Chmod(root, 0o700)
	}
	port := opts.Port
	if port == 0 {
		if port, err = freePort(); err != nil {
			os.RemoveAll(root)
			return nil, err
		}
	}
	c.port = port

	if out, err := c.run(ctx, "initdb", "-D", c.dataDir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--locale=C"); err != nil {
		os.RemoveAll(root)
		return nil, fmt.Errorf("pgcluster: initdb: %w: %s", err, out)
	}
	maxConn := opts.MaxConnections
	if maxConn == 0 {
		maxConn = 200
	}
	settings := map[string]string{
		"listen_addresses":        "'127.0.0.1'",
		"port":                    strconv.Itoa(port),
		"unix_socket_directories": "'" + root + "'",
		"max_connections":         strconv.Itoa(maxConn),
		"shared_buffers":          "'256MB'",
		"log_min_messages":        "warning",
		"logging_collector":       "off",
	}
	if opts.Fast {
		settings["fsync"] = "off"
		settings["synchronous_commit"] = "off"
		settings["full_page_writes"] = "off"
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	var conf strings.Builder
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&conf, "%s = %s\n", k, settings[k])
	}
	f, err := os.OpenFile(filepath.Join(c.dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		os.RemoveAll(root)
		return nil, fmt.Errorf("pgcluster: open postgresql.conf: %w", err)
	}
	_, err = f.WriteString(conf.String())
	f.Close()
	if err != nil {
		os.RemoveAll(root)
		return nil, fmt.Errorf("pgcluster: write postgresql.conf: %w", err)
	}
	if err := c.Restart(ctx); err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	return c, nil
}

// Restart starts the server if it is stopped, or restarts it if it runs; it
// returns once the server accepts connections.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unwatch()
	logFile := filepath.Join(c.root, "postgres.log")
	mode := "start"
	if _, err := os.Stat(filepath.Join(c.dataDir, "postmaster.pid")); err == nil {
		mode = "restart"
	}
	if out, err := c.run(ctx, "pg_ctl", mode, "-D", c.dataDir, "-l", logFile, "-w", "-t", "60", "-m", "fast"); err != nil {
		logTail, _ := os.ReadFile(logFile)
		return fmt.Errorf("pgcluster: pg_ctl %s: %w: %s\n%s", mode, err, out, logTail)
	}
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	return c.watch()
}

// Crash stops the server the way a crash does (pg_ctl stop -m
// immediate: no checkpoint, every connection cut); Restart brings it back
// through crash recovery.
func (c *Cluster) Crash(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unwatch()
	if out, err := c.run(ctx, "pg_ctl", "stop", "-D", c.dataDir, "-w", "-t", "60", "-m", "immediate"); err != nil {
		return fmt.Errorf("pgcluster: pg_ctl stop -m immediate: %w: %s", err, out)
	}
	return nil
}

// watch starts the watcher of the running server. c.mu is held.
func (c *Cluster) watch() error {
	pid, err := c.PID()
	if err != nil {
		return fmt.Errorf("pgcluster: the postmaster's pid: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("pgcluster: watcher pipe: %w", err)
	}
	defer r.Close() // the watcher holds its own copy
	closeInheritedOnExec()
	cmd := exec.Command("sh", "-c", watchScript, "pgcluster-watch", strconv.Itoa(pid))
	cmd.Stdin = r
	// Its own process group, so a terminal's Ctrl-C reaches this process
	// and not the watcher, which must outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("pgcluster: start watcher: %w", err)
	}
	c.watcher = &watcher{cmd: cmd, pipe: w}
	return nil
}

// unwatch stops the watcher, before this process stops the server
// itself. c.mu is held.
func (c *Cluster) unwatch() {
	if c.watcher == nil {
		return
	}
	_ = c.watcher.cmd.Process.Kill() // before the pipe closes: it must not signal anything
	_ = c.watcher.cmd.Wait()
	c.watcher.pipe.Close()
	c.watcher = nil
}

func (c *Cluster) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgcluster: server not accepting connections: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URL is a connection string for database name on this cluster.
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, database)
}

// Port the server listens on.
func (c *Cluster) Port() int { return c.port }

// PID is the running postmaster's process id, from its lock file.
func (c *Cluster) PID() (int, error) {
	return ownedtemp.ReadPID(filepath.Join(c.dataDir, "postmaster.pid"))
}

// DataDir is the cluster's data directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// Stop shuts the server down and removes every file it wrote.
func (c *Cluster) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unwatch()
	var stopErr error
	if _, err := os.Stat(filepath.Join(c.dataDir, "postmaster.pid")); err == nil {
		if out, err := c.run(ctx, "pg_ctl", "stop", "-D", c.dataDir, "-w", "-m", "immediate"); err != nil {
			stopErr = fmt.Errorf("pgcluster: pg_ctl stop: %w: %s", err, out)
		}
	}
	if err := os.RemoveAll(c.root); err != nil && stopErr == nil {
		stopErr = fmt.Errorf("pgcluster: remove %s: %w", c.root, err)
	}
	return stopErr
}

// StopKeepingData shuts the server down cleanly (pg_ctl stop -m fast, with
// its checkpoint) and leaves its files on disk, for good: their root no
// longer names an owner, so no later Start takes them for a killed
// process's leftovers.
func (c *Cluster) StopKeepingData() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unwatch()
	if out, err := c.run(ctx, "pg_ctl", "stop", "-D", c.dataDir, "-w", "-m", "fast"); err != nil {
		return fmt.Errorf("pgcluster: pg_ctl stop: %w: %s", err, out)
	}
	if err := ownedtemp.Disown(c.root); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	return nil
}

// removeAbandoned removes the roots Start made under dir (the temporary
// directory when empty) for processes that have exited while their server
// is gone too: what a process killed before it could Stop its cluster
// leaves (its server died with it). A root whose owner or server still
// runs, or that names no owner, is left alone.
func removeAbandoned(dir string) {
	ownedtemp.RemoveAbandoned(dir, tempPattern, func(root string) bool {
		server, err := ownedtemp.ReadPID(filepath.Join(root, "data", "postmaster.pid"))
		return err == nil && ownedtemp.Alive(server)
	})
}

func (c *Cluster) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	closeInheritedOnExec()
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	cmd.Dir = c.root
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd.CombinedOutput()
}

// closeInheritedOnExec marks, once, every descriptor this process
// inherited (fd 3 and up) close-on-exec. Go opens its own descriptors
// close-on-exec, but an inherited one is not, so pg_ctl would hand it to the
// postmaster, which outlives the process. A fuzzing worker inherits its pipes
// to the fuzzing coordinator that way (fds 3 and 4): the coordinator then
// waits forever for their EOF after the worker exits, and `go test -fuzz`
// of a target using pgtest never ends.
var closeInheritedOnExec = sync.OnceFunc(func() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return // not Linux: nothing known to inherit
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
})

func postgresCredential() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("pgcluster: running as root and no 'postgres' or 'nobody' user to run the server as")
}

func freePort() (int, error) {
	port, err := freeport.Get()
	if err != nil {
		return 0, fmt.Errorf("pgcluster: pick a port: %w", err)
	}
	return port, nil
}
