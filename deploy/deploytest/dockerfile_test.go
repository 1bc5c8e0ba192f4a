package deploytest

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// dockerfilePath is the one Dockerfile of every pulse image.
const dockerfilePath = "deploy/docker/Dockerfile"

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, COPY, ...
	args string
}

// stage is one FROM ... AS name block.
type stage struct {
	name, from string
	body       []instruction
}

// dockerfile is the parsed Dockerfile: global ARG defaults and the stages.
type dockerfile struct {
	args   map[string]string
	stages map[string]*stage
	order  []string
}

// parseDockerfile reads the instructions this package checks; it is not a
// full parser (no heredocs, no escape directive), which the file does not
// need.
func parseDockerfile(t *testing.T, path string) *dockerfile {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	df := &dockerfile{args: map[string]string{}, stages: map[string]*stage{}}
	var cur *stage
	var pending strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && pending.Len() == 0) {
			continue
		}
		if strings.HasSuffix(trimmed, `\`) {
			pending.WriteString(strings.TrimSuffix(trimmed, `\`) + " ")
			continue
		}
		pending.WriteString(trimmed)
		full := pending.String()
		pending.Reset()
		cmd, args, _ := strings.Cut(full, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		switch {
		case in.cmd == "FROM":
			f := strings.Fields(in.args)
			require.Len(t, f, 3, "FROM without AS name: %q", full)
			require.Equal(t, "AS", strings.ToUpper(f[1]), "FROM line %q", full)
			cur = &stage{name: f[2], from: f[0]}
			df.stages[cur.name] = cur
			df.order = append(df.order, cur.name)
		case cur == nil && in.cmd == "ARG":
			k, v, _ := strings.Cut(in.args, "=")
			df.args[k] = v
		case cur == nil:
			t.Fatalf("%s: instruction before the first FROM: %q", path, full)
		default:
			cur.body = append(cur.body, in)
		}
	}
	return df
}

// baseImage is the stage's FROM with ARGs expanded.
func (df *dockerfile) baseImage(s *stage) string {
	from := s.from
	if strings.HasPrefix(from, "${") && strings.HasSuffix(from, "}") {
		if v, ok := df.args[from[2:len(from)-1]]; ok {
			return v
		}
	}
	return from
}

// chain is the stage and every stage it is built FROM, nearest first.
func (df *dockerfile) chain(name string) []*stage {
	var out []*stage
	for s := df.stages[name]; s != nil; s = df.stages[s.from] {
		out = append(out, s)
	}
	return out
}

// last returns the nearest instruction cmd along name's chain.
func (df *dockerfile) last(name, cmd string) (instruction, bool) {
	for _, s := range df.chain(name) {
		for i := len(s.body) - 1; i >= 0; i-- {
			if s.body[i].cmd == cmd {
				return s.body[i], true
			}
		}
	}
	return instruction{}, false
}

// copies maps each file COPY'd from another stage into name's image (its
// chain included) to its source path in that stage.
func (df *dockerfile) copies(name string) map[string]string {
	out := map[string]string{}
	for _, s := range df.chain(name) {
		for _, in := range s.body {
			if in.cmd != "COPY" {
				continue
			}
			f := strings.Fields(in.args)
			if len(f) == 3 && strings.HasPrefix(f[0], "--from=") {
				if _, seen := out[f[2]]; !seen {
					out[f[2]] = f[1]
				}
			}
		}
	}
	return out
}

// jsonArgs decodes an exec-form argument list like ["a", "b"].
func jsonArgs(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	for _, m := range regexp.MustCompile(`"([^"]*)"`).FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	require.NotEmpty(t, out, "exec-form list %q", s)
	return out
}

// TestDockerfile proves the image recipe builds what compose and the
// Kubernetes manifests run: one target per command, each on the distroless
// non-root runtime with its binary and pulse-probe; a Go builder new
// enough for the workspace; every package the build compiles exists.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	df := parseDockerfile(t, repoPath(t, dockerfilePath))

	t.Run("BuilderIsGoAtLeast1267", func(t *testing.T) {
		build := df.stages["build"]
		require.NotNil(t, build, "a stage named build")
		img := df.baseImage(build)
		m := regexp.MustCompile(`^golang:1\.(\d+)\.(\d+)-`).FindStringSubmatch(img)
		require.NotNil(t, m, "builder image %q is golang:1.N.P-...", img)
		minor, _ := strconv.Atoi(m[1])
		patch, _ := strconv.Atoi(m[2])
		require.True(t, minor > 26 || (minor == 26 && patch >= 7), "builder %s: the workspace needs Go >= 1.26.7", img)
	})

	t.Run("NoSyntaxDirective", func(t *testing.T) {
		// BuildKit pulls the frontend image a `# syntax=` line names, so a
		// build on a machine without registry access would fail; the
		// built-in frontend has everything this file uses.
		b, err := os.ReadFile(repoPath(t, dockerfilePath))
		require.NoError(t, err)
		require.NotRegexp(t, `(?im)^#\s*syntax\s*=`, string(b))
	})

	t.Run("BuildCompilesEveryCommandFromTheWorkspace", func(t *testing.T) {
		var run string
		for _, in := range df.stages["build"].body {
			if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
				run = in.args
			}
		}
		require.NotEmpty(t, run, "the build stage runs go build")
		require.Contains(t, run, "--mount=type=bind,target=.", "the source comes in through a bind mount, not a layer")
		require.Contains(t, run, "--mount=type=cache,target=/go/pkg/mod", "the module cache (GOMODCACHE of the golang image) persists between builds")
		require.Contains(t, run, "--mount=type=cache,target=/root/.cache/go-build", "the build cache persists between builds")
		for name, pkg := range commands {
			require.Contains(t, run, " "+pkg, "the build compiles %s", name)
			main, err := os.ReadFile(repoPath(t, strings.TrimPrefix(pkg, "./")+"/main.go"))
			require.NoError(t, err, "%s has a main.go", pkg)
			require.Contains(t, string(main), "package main")
		}
		env, ok := df.last("build", "ENV")
		require.True(t, ok)
		require.Contains(t, env.args, "CGO_ENABLED=0", "static binaries for the distroless static runtime")
	})

	t.Run("OneNonRootDistrolessTargetPerCommand", func(t *testing.T) {
		for name := range commands {
			if name == probeName {
				continue
			}
			s := df.stages[name]
			require.NotNil(t, s, "a target named %s", name)
			chain := df.chain(name)
			base := df.baseImage(chain[len(chain)-1])
			require.True(t, strings.HasPrefix(base, "gcr.io/distroless/static"), "%s runs on distroless static, not %s", name, base)
			user, ok := df.last(name, "USER")
			require.True(t, ok, "%s sets USER", name)
			require.True(t, strings.HasPrefix(user.args, "nonroot"), "%s runs as nonroot, not %s", name, user.args)

			copies := df.copies(name)
			entry, ok := df.last(name, "ENTRYPOINT")
			require.True(t, ok, "%s has an ENTRYPOINT", name)
			exe := jsonArgs(t, entry.args)[0]
			require.Equal(t, "/out/"+name, copies[exe], "%s's entrypoint %s is its own binary", name, exe)
			require.Equal(t, "/out/"+probeName, copies[probePath(t, df)], "%s carries pulse-probe", name)

			if _, ok := longRunning[name]; ok {
				hc, ok := df.last(name, "HEALTHCHECK")
				require.True(t, ok, "%s has a HEALTHCHECK", name)
				require.Equal(t, probePath(t, df), jsonArgs(t, hc.args)[0], "%s's HEALTHCHECK runs pulse-probe", name)
			}
		}
	})
}

// probePath is where the images carry pulse-probe.
func probePath(t *testing.T, df *dockerfile) string {
	t.Helper()
	for dst, src := range df.copies("runtime") {
		if src == "/out/"+probeName {
			return dst
		}
	}
	t.Fatalf("the runtime stage does not COPY /out/%s", probeName)
	return ""
}
