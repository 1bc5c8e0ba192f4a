package localfleet

import (
	"context"
	"fmt"
	"slices"
)

// Restart starts the named process again after it has exited, with the
// same binary, arguments and environment (so on the same addresses) and
// the same log file, puts it in Processes in place of the old one, and
// waits for its /readyz when it serves one. Tests roll a service with it:
// Signal, Wait for the exit, Restart.
func (f *Fleet) Restart(ctx context.Context, name string) (*Process, error) {
	i := slices.IndexFunc(f.Processes, func(p *Process) bool { return p.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("fleet: restart %s: no such process", name)
	}
	old := f.Processes[i]
	if !old.Exited() {
		return nil, fmt.Errorf("fleet: restart %s: still running as pid %d; stop it first", name, old.PID())
	}
	// old.Cmd.Env is the whole environment it ran with; Start adds it after
	// this process's own, so every value is the old one.
	p, err := Start(ctx, name, old.Cmd.Path, old.Cmd.Env, f.LogDir, old.Cmd.Args[1:]...)
	if err != nil {
		return nil, fmt.Errorf("fleet: restart: %w", err)
	}
	f.Processes[i] = p
	f.logger.Info("restarted", "process", name, "pid", p.PID(), "log", p.LogPath)
	if url := f.AdminURLs[name]; url != "" {
		if err := f.waitReady(ctx, p, url+"/readyz"); err != nil {
			return p, err
		}
	}
	return p, nil
}
