// Command modproxy serves this repository's Go modules, as they are in the
// working tree, at one version, in the layout of a file-based module proxy
// (GOPROXY=file:///dir): for every module of go.work, <path>/@v/list and
// <version>.info, .mod and .zip, the zip made with golang.org/x/mod/zip
// from the module's tracked and not-ignored untracked files (nested
// modules left out, as the go command leaves them out).
//
// A module is served as a release would tag it: its go.mod and go.sum as
// they are (no go.sum carries lines for pulse's own modules; the go
// command records those on first download, from the checksum database
// or, for this proxy, with GONOSUMDB=github.com/pulsequeue/*).
//
//	go run ./modproxy -root .. -version v0.1.0 -out /tmp/proxy
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

// pathPrefix is the module path every module of the repository starts with.
const pathPrefix = "github.com/pulsequeue/pulse"

func main() {
	root := flag.String("root", ".", "the repository's root (the directory holding go.work)")
	version := flag.String("version", "", "the version to serve every module at (e.g. v0.1.0)")
	out := flag.String("out", "", "the proxy directory to write (GOPROXY=file://<out>)")
	flag.Parse()
	if err := run(*root, *version, *out); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

// mod is one module of the repository.
type mod struct {
	path  string   // module path
	dir   string   // directory relative to the root, slash-separated
	files []string // files of the module, relative to the root
	gomod []byte
	deps  []string // pulse module paths go.mod requires
}

func run(root, version, out string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("-version: %q is not a canonical semantic version (like v0.1.0)", version)
	}
	if out == "" {
		return errors.New("-out: required")
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	mods, err := load(root)
	if err != nil {
		return err
	}
	paths := make([]string, 0, len(mods))
	for p := range mods {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		m := mods[p]
		for _, d := range m.deps {
			if mods[d] == nil {
				return fmt.Errorf("%s requires %s, which is not a module of go.work", p, d)
			}
		}
		zipData, err := makeZip(root, m, version)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if err := serve(out, m, version, zipData); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}

// load reads every module go.work uses.
func load(root string) (map[string]*mod, error) {
	work, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork("go.work", work, nil)
	if err != nil {
		return nil, err
	}
	listed, err := gitFiles(root)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, u := range wf.Use {
		dirs = append(dirs, path.Clean(filepath.ToSlash(u.Path)))
	}
	// Every module root of the tree, to leave nested modules out.
	var roots []string
	for _, f := range listed {
		if path.Base(f) == "go.mod" {
			roots = append(roots, path.Dir(f))
		}
	}
	mods := map[string]*mod{}
	for _, d := range dirs {
		gomod, err := os.ReadFile(filepath.Join(root, d, "go.mod"))
		if err != nil {
			return nil, err
		}
		mf, err := modfile.Parse(d+"/go.mod", gomod, nil)
		if err != nil {
			return nil, err
		}
		m := &mod{path: mf.Module.Mod.Path, dir: d, gomod: gomod}
		for _, r := range mf.Require {
			if isPulse(r.Mod.Path) {
				m.deps = append(m.deps, r.Mod.Path)
			}
		}
		for _, f := range listed {
			if owner(f, roots) == d {
				m.files = append(m.files, f)
			}
		}
		mods[m.path] = m
	}
	return mods, nil
}

func isPulse(p string) bool { return p == pathPrefix || strings.HasPrefix(p, pathPrefix+"/") }

// owner is the innermost module root holding file f.
func owner(f string, roots []string) string {
	best := ""
	for _, r := range roots {
		if (r == "." || strings.HasPrefix(f, r+"/")) && len(r) > len(best) {
			best = r
		}
	}
	return best
}

// gitFiles lists the tracked files and the untracked ones git does not
// ignore, relative to root, that exist in the working tree.
func gitFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	outb, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var files []string
	for f := range strings.SplitSeq(strings.TrimRight(string(outb), "\x00"), "\x00") {
		if f == "" {
			continue
		}
		fi, err := os.Lstat(filepath.Join(root, f))
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the working tree, or a symlink
		}
		files = append(files, f)
	}
	slices.Sort(files)
	return slices.Compact(files), nil
}

// file is a module file for modzip.Create; data, when set, replaces the
// file's contents on disk.
type file struct {
	name string // path inside the module
	abs  string
	data []byte
}

func (f file) Path() string { return f.name }
func (f file) Lstat() (os.FileInfo, error) {
	if f.data != nil {
		return memInfo{name: path.Base(f.name), size: int64(len(f.data))}, nil
	}
	return os.Lstat(f.abs)
}
func (f file) Open() (io.ReadCloser, error) {
	if f.data != nil {
		return io.NopCloser(bytes.NewReader(f.data)), nil
	}
	return os.Open(f.abs)
}

func makeZip(root string, m *mod, version string) ([]byte, error) {
	var files []modzip.File
	for _, f := range m.files {
		name := f
		if m.dir != "." {
			name = strings.TrimPrefix(f, m.dir+"/")
		}
		zf := file{name: name, abs: filepath.Join(root, f)}
		if name == "go.mod" {
			zf.data = m.gomod // the bytes served as <version>.mod
		}
		files = append(files, zf)
	}
	var buf bytes.Buffer
	if err := modzip.Create(&buf, module.Version{Path: m.path, Version: version}, files); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// memInfo describes a file served from memory.
type memInfo struct {
	name string
	size int64
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) Mode() os.FileMode  { return 0o644 }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return false }
func (i memInfo) Sys() any           { return nil }

// serve writes m at version into the proxy directory out.
func serve(out string, m *mod, version string, zipData []byte) error {
	esc, err := module.EscapePath(m.path)
	if err != nil {
		return err
	}
	dir := filepath.Join(out, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		version + ".info": info,
		version + ".mod":  m.gomod,
		version + ".zip":  zipData,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	list := filepath.Join(dir, "list")
	old, err := os.ReadFile(list)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(old))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	semver.Sort(versions)
	return os.WriteFile(list, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}
