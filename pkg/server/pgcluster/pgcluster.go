// Package pgcluster starts a throwaway PostgreSQL cluster from the binaries
// installed on the machine (initdb and pg_ctl on PATH or under
// /usr/lib/postgresql/*/bin). Tests, the no-Docker dev fleet and the load
// test use it; nothing in production does.
//
// The server is a child of the process that started it and dies with it:
// a test binary killed by a timeout, a Ctrl-C or kill -9 takes its cluster
// along instead of leaving it running, and the next Start removes the
// files such a cluster left behind.
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

	mu     sync.Mutex
	server *server // nil while stopped
}

// server is one run of the postmaster, a child of this process.
type server struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the postmaster has exited
}

// ownerFile, in a cluster's root, holds the process id of the process that
// started it; removeAbandoned reads it.
const ownerFile = "owner.pid"

// tempPattern names the roots Start creates.
const tempPattern = "pulse-pg-"

// BinDir finds the directory holding the server binaries: initdb, pg_ctl
// and postgres.
func BinDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			if _, err := exec.LookPath("initdb"); err == nil {
				return dir, nil
			}
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(matches) == 0 {
		return "", errors.New("pgcluster: no PostgreSQL server binaries found (pg_ctl and postgres on PATH or /usr/lib/postgresql/*/bin); install postgresql or set PULSE_TEST_DATABASE_URL")
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
		removeAbandoned(os.TempDir())
		root, err = os.MkdirTemp("", tempPattern)
		if err != nil {
			return nil, fmt.Errorf("pgcluster: temp dir: %w", err)
		}
		if err := os.WriteFile(filepath.Join(root, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			os.RemoveAll(root)
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

// Restart starts the server if it is stopped, or stops it the way pg_ctl's
// fast mode does and starts it again if it runs; it returns once the
// server accepts connections.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.server != nil {
		if err := c.stopServer(syscall.SIGINT); err != nil {
			return err
		}
	}
	logFile := filepath.Join(c.root, "postgres.log")
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("pgcluster: open log: %w", err)
	}
	closeInheritedOnExec()
	cmd := exec.Command(filepath.Join(c.binDir, "postgres"), "-D", c.dataDir)
	cmd.Dir = c.root
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group keeps a terminal's Ctrl-C away from the
	// server: it stops because its parent does. Pdeathsig sends it
	// SIGQUIT (an immediate shutdown, its backends with it) when the
	// thread that started it exits; Go ends a thread only when a goroutine
	// locked to it returns, which Restart's callers do not do, so in
	// effect when this process exits, however it exits.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("pgcluster: start postgres: %w", err)
	}
	srv := &server{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // how it exited is in its log
		log.Close()
		close(srv.exited)
	}()
	c.server = srv
	if err := c.waitReady(ctx, srv); err != nil {
		_ = c.stopServer(syscall.SIGQUIT)
		logTail, _ := os.ReadFile(logFile)
		return fmt.Errorf("pgcluster: start postgres: %w\n%s", err, logTail)
	}
	return nil
}

// Crash stops the server the way a crash does (an immediate shutdown, as
// pg_ctl stop -m immediate: no checkpoint, every connection cut); Restart
// brings it back through crash recovery.
func (c *Cluster) Crash(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopServer(syscall.SIGQUIT)
}

// stopServer sends the postmaster sig (SIGINT: a fast shutdown, SIGQUIT:
// an immediate one) and waits for it to exit, killing it after a minute.
// c.mu is held.
func (c *Cluster) stopServer(sig syscall.Signal) error {
	srv := c.server
	if srv == nil {
		return nil
	}
	c.server = nil
	select {
	case <-srv.exited:
		return nil
	default:
	}
	if err := srv.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("pgcluster: signal postgres: %w", err)
	}
	select {
	case <-srv.exited:
		return nil
	case <-time.After(stopPatience):
	}
	_ = srv.cmd.Process.Kill()
	<-srv.exited
	return fmt.Errorf("pgcluster: postgres did not stop within %s of %s; killed", stopPatience, sig)
}

// stopPatience bounds a shutdown before the postmaster is killed.
const stopPatience = time.Minute

func (c *Cluster) waitReady(ctx context.Context, srv *server) error {
	deadline := time.Now().Add(time.Minute)
	for {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server not accepting connections: %w", err)
		}
		select {
		case <-srv.exited:
			return errors.New("server exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// URL is a connection string for database name on this cluster.
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, database)
}

// Port the server listens on.
func (c *Cluster) Port() int { return c.port }

// DataDir is the cluster's data directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// Stop shuts the server down (an immediate shutdown: nothing of it is
// kept) and removes every file it wrote.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	stopErr := c.stopServer(syscall.SIGQUIT)
	c.mu.Unlock()
	if err := os.RemoveAll(c.root); err != nil && stopErr == nil {
		stopErr = fmt.Errorf("pgcluster: remove %s: %w", c.root, err)
	}
	return stopErr
}

// StopKeepingData shuts the server down cleanly (a fast shutdown, with its
// checkpoint) and leaves its files on disk.
func (c *Cluster) StopKeepingData() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopServer(syscall.SIGINT)
}

// removeAbandoned removes the roots Start made under dir for processes
// that have exited while their server is gone too: what a process killed
// before it could Stop its cluster leaves (its server died with it). A
// root whose owner or server still runs, or that names no owner, is left
// alone.
func removeAbandoned(dir string) {
	roots, _ := filepath.Glob(filepath.Join(dir, tempPattern+"*"))
	for _, root := range roots {
		owner, err := readPID(filepath.Join(root, ownerFile))
		if err != nil || alive(owner) {
			continue
		}
		if server, err := readPID(filepath.Join(root, "data", "postmaster.pid")); err == nil && alive(server) {
			continue
		}
		_ = os.RemoveAll(root)
	}
}

// readPID reads the process id on the first line of path.
func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// alive reports whether a process with this id exists (signal 0 checks
// without sending anything; EPERM means it exists under another user).
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
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
