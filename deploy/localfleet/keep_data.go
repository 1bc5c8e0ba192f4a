package localfleet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/pulsequeue/pulse/pkg/server/pgcluster"
)

// stopPostgresKeepingData shuts the cluster down cleanly without removing
// its files (pgcluster's Stop always removes them). pg_ctl runs as the data
// directory's owner, because Postgres refuses to be driven by root.
func stopPostgresKeepingData(c *pgcluster.Cluster) error {
	bin, err := pgcluster.BinDir()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pg_ctl"), "stop", "-D", c.DataDir(), "-w", "-m", "fast")
	cmd.Dir = filepath.Dir(c.DataDir())
	if fi, err := os.Stat(c.DataDir()); err == nil && os.Geteuid() == 0 {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: st.Uid, Gid: st.Gid}}
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("fleet: pg_ctl stop: %w: %s", err, out)
	}
	return nil
}
