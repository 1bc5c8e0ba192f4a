// Package ownedtemp makes temporary directories that name the process
// that made them, and removes the ones whose process has exited without
// removing them: what a test binary killed by a timeout, a Ctrl-C or
// kill -9 leaves behind. The throwaway Postgres clusters and the local
// fleet's work directories use it; nothing in production does.
package ownedtemp

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// OwnerFile, in a directory Make created, holds its owner's process id.
const OwnerFile = "owner.pid"

// Make creates a new directory in dir (os.TempDir() when dir is empty)
// whose name is pattern followed by a random string, as os.MkdirTemp
// does, and names this process its owner. Until the owner file is
// written the directory names no owner, so no sweep takes it meanwhile.
func Make(dir, pattern string) (string, error) {
	path, err := os.MkdirTemp(dir, pattern)
	if err != nil {
		return "", fmt.Errorf("temp dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(path, OwnerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(path)
		return "", fmt.Errorf("temp dir: %w", err)
	}
	return path, nil
}

// Disown keeps path for good: with no owner named, no sweep removes it.
func Disown(path string) error {
	if err := os.Remove(filepath.Join(path, OwnerFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("disown %s: %w", path, err)
	}
	return nil
}

// RemoveAbandoned removes the directories under dir (os.TempDir() when
// dir is empty) whose names start with pattern and whose owner has
// exited. A directory that names no owner (being made, or disowned), whose
// owner still runs, or for which inUse (when not nil) reports true, is
// left alone. It removes what it can and reports nothing: a sweep that
// fails leaves files behind, as there were before it.
func RemoveAbandoned(dir, pattern string, inUse func(path string) bool) {
	if dir == "" {
		dir = os.TempDir()
	}
	paths, _ := filepath.Glob(filepath.Join(dir, pattern+"*"))
	for _, path := range paths {
		owner, err := ReadPID(filepath.Join(path, OwnerFile))
		if err != nil || Alive(owner) {
			continue
		}
		if inUse != nil && inUse(path) {
			continue
		}
		_ = os.RemoveAll(path)
	}
}

// ReadPID reads the process id on the first line of a file (an owner
// file, or a lock file such as Postgres's postmaster.pid).
func ReadPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// Alive reports whether a process with this id exists (signal 0 checks
// without sending anything; EPERM means it exists under another user).
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
