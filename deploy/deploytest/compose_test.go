package deploytest

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"
)

// composeServices are the services docker-compose.yml must define.
var composeServices = []string{
	"postgres", "migrate", "control-api", "dispatch-gateway", "gateway-proxy", "reaper", "scheduler",
	"prometheus", "grafana", "jaeger", "demo-producer", "demo-worker", "demo-worker-python",
}

// pulseServices maps each compose service built from this repo to the
// command it runs.
var pulseServices = map[string]string{
	"migrate":          "control-api",
	"control-api":      "control-api",
	"dispatch-gateway": "dispatch-gateway",
	"reaper":           "reaper",
	"scheduler":        "scheduler",
	"demo-producer":    "demo-producer",
	"demo-worker":      "demo-worker",
}

// loadCompose loads docker-compose.yml the way `docker compose` does
// (schema validation, interpolation with an empty environment, merges,
// normalization), with paths resolved against the repo root.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{repoPath(t, "docker-compose.yml")},
		cli.WithName("pulse"), cli.WithWorkingDirectory(root(t)), cli.WithEnv(nil))
	require.NoError(t, err)
	p, err := opts.LoadProject(t.Context())
	require.NoError(t, err, "docker-compose.yml does not load")
	return p
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	require.True(t, ok, "docker-compose.yml has no service %q", name)
	return s
}

// envValue is a service's value for an environment variable, "" if unset.
func envValue(s types.ServiceConfig, name string) string {
	if v := s.Environment[name]; v != nil {
		return *v
	}
	return ""
}

// adminPort is the port of a long-running pulse service's admin endpoint
// in compose: from its address variable, else the default its -h prints.
func composeAdminPort(t *testing.T, s types.ServiceConfig, command string) string {
	t.Helper()
	addr := envValue(s, longRunning[command])
	require.NotEmpty(t, addr, "%s sets %s explicitly, so its healthcheck and scrape port are visible", s.Name, longRunning[command])
	return addrPort(t, addr)
}

// TestCompose loads docker-compose.yml with compose-spec's Go loader and
// proves it describes the fleet the code expects: every service present;
// every build, Dockerfile target and mounted file present in the repo;
// every PULSE_* variable read by the command it is set on; the gateway
// scalable; start-up ordered on the migrate step; healthchecks that probe
// the port the service really listens on.
func TestCompose(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	df := parseDockerfile(t, repoPath(t, dockerfilePath))

	t.Run("EveryServiceIsPresent", func(t *testing.T) {
		require.ElementsMatch(t, composeServices, p.ServiceNames())
	})

	t.Run("BuildsComeFromThisRepo", func(t *testing.T) {
		for name, command := range pulseServices {
			s := service(t, p, name)
			require.NotNil(t, s.Build, "%s is built from the repo", name)
			ctxDir := s.Build.Context
			if !filepath.IsAbs(ctxDir) {
				ctxDir = filepath.Join(root(t), ctxDir)
			}
			require.Equal(t, root(t), filepath.Clean(ctxDir), "%s builds with the repo root as context (the go.work workspace)", name)
			dockerfile := s.Build.Dockerfile
			if !filepath.IsAbs(dockerfile) {
				dockerfile = filepath.Join(ctxDir, dockerfile)
			}
			require.Equal(t, repoPath(t, dockerfilePath), dockerfile)
			require.FileExists(t, dockerfile)
			require.Equal(t, command, s.Build.Target, "%s builds the %s target", name, command)
			require.Contains(t, df.stages, s.Build.Target, "the Dockerfile has a %s target", command)
			require.Regexp(t, "^pulse/"+regexp.QuoteMeta(command)+":", s.Image, "%s's image is named after its command", name)
		}
		require.Equal(t, []string{"migrate"}, []string(service(t, p, "migrate").Command), "migrate runs `control-api migrate`")
	})

	t.Run("EveryMountedFileExists", func(t *testing.T) {
		mounts := 0
		for _, s := range p.Services {
			for _, v := range s.Volumes {
				if v.Type != types.VolumeTypeBind {
					require.Contains(t, p.Volumes, v.Source, "%s mounts named volume %s, which is declared", s.Name, v.Source)
					continue
				}
				mounts++
				rel, err := filepath.Rel(root(t), v.Source)
				require.NoError(t, err)
				require.False(t, strings.HasPrefix(rel, ".."), "%s mounts %s, outside the repo", s.Name, v.Source)
				_, err = os.Stat(v.Source)
				require.NoError(t, err, "%s mounts %s, which is not in the repo", s.Name, rel)
				require.True(t, v.ReadOnly, "%s mounts %s read-only", s.Name, rel)
			}
		}
		require.Positive(t, mounts, "prometheus, grafana and the proxy mount their configuration")
	})

	t.Run("EveryPulseVariableIsReadByItsService", func(t *testing.T) {
		for name, command := range pulseServices {
			s := service(t, p, name)
			requireReads(t, command, "compose service "+name, sortedKeys(s.Environment))
		}
		for name, command := range pulseServices {
			if varsOf(t, command)["PULSE_DATABASE_URL"] {
				require.NotEmpty(t, envValue(service(t, p, name), "PULSE_DATABASE_URL"), "%s needs PULSE_DATABASE_URL", name)
				u, err := url.Parse(envValue(service(t, p, name), "PULSE_DATABASE_URL"))
				require.NoError(t, err)
				require.Equal(t, "postgres", u.Hostname(), "%s talks to the compose postgres", name)
			}
		}
	})

	t.Run("GatewayScales", func(t *testing.T) {
		for _, name := range []string{"dispatch-gateway", "demo-worker"} {
			s := service(t, p, name)
			require.Empty(t, s.ContainerName, "%s has no container_name: --scale needs distinct names", name)
			for _, port := range s.Ports {
				require.Empty(t, port.Published, "%s publishes no fixed host port: replicas would collide on %s", name, port.Published)
			}
		}
		gwPort := addrPort(t, envValue(service(t, p, "dispatch-gateway"), "PULSE_GRPC_ADDR"))
		require.Equal(t, "dns:///dispatch-gateway:"+gwPort, envValue(service(t, p, "demo-worker"), "PULSE_GATEWAY_ADDRS"),
			"in-compose workers resolve every replica by DNS")

		// Host workers: one published port, the proxy's, forwarding to
		// every replica of the gateway service.
		proxy := service(t, p, "gateway-proxy")
		require.Len(t, proxy.Ports, 1)
		require.NotEmpty(t, proxy.Ports[0].Published)
		var conf string
		for _, v := range proxy.Volumes {
			if v.Target == "/usr/local/etc/haproxy/haproxy.cfg" {
				b, err := os.ReadFile(v.Source)
				require.NoError(t, err)
				conf = string(b)
			}
		}
		require.NotEmpty(t, conf, "gateway-proxy mounts its haproxy.cfg where the haproxy image reads it")
		require.Regexp(t, `(?m)^\s*server-template \S+ \S+ dispatch-gateway:`+gwPort+` .*\bproto h2\b.*\bresolvers docker\b`, conf,
			"the proxy fills its servers from DNS, speaking HTTP/2 (gRPC) to them, so scaled replicas join")
		require.Regexp(t, `(?m)^resolvers docker\n\s+nameserver \S+ 127\.0\.0\.11:53$`, conf, "the proxy asks Docker's DNS")
		require.Regexp(t, `(?m)^\s*bind :`+strconv.Itoa(int(proxy.Ports[0].Target))+` proto h2$`, conf, "the proxy accepts gRPC (h2c) on the published target port")
		require.Equal(t, "127.0.0.1", proxy.Ports[0].HostIP, "the proxy is published on loopback only")
	})

	t.Run("PortsArePublishedOnLoopbackOnly", func(t *testing.T) {
		for _, s := range p.Services {
			for _, port := range s.Ports {
				require.Equal(t, "127.0.0.1", port.HostIP, "%s publishes %d on every interface; the fleet is open (no credentials) and meant for this machine", s.Name, port.Target)
			}
		}
	})

	t.Run("BaseImagesDefaultUpstream", func(t *testing.T) {
		// The build arguments compose passes default to the Dockerfile's
		// own ARG defaults, so `docker compose build` and `docker build`
		// use the same images unless PULSE_GO_IMAGE / PULSE_RUNTIME_IMAGE
		// say otherwise.
		for name := range pulseServices {
			args := service(t, p, name).Build.Args
			for arg, def := range df.args {
				require.NotNil(t, args[arg], "%s passes build argument %s", name, arg)
				require.Equal(t, def, *args[arg], "%s's %s defaults to the Dockerfile's", name, arg)
			}
		}
		for _, s := range p.Services {
			if s.Build == nil {
				require.NotContains(t, s.Image, "pulse-local/", "%s defaults to an upstream image, not a local stand-in", s.Name)
			}
		}
	})

	t.Run("StartOrderFollowsTheMigrateStep", func(t *testing.T) {
		migrate := service(t, p, "migrate")
		require.Equal(t, types.ServiceConditionHealthy, migrate.DependsOn["postgres"].Condition, "migrate waits for a healthy postgres")
		for name := range pulseServices {
			if name == "migrate" {
				continue
			}
			dep, ok := service(t, p, name).DependsOn["migrate"]
			require.True(t, ok, "%s depends on migrate", name)
			require.Equal(t, types.ServiceConditionCompletedSuccessfully, dep.Condition, "%s waits for migrate to succeed", name)
		}
		require.Equal(t, types.ServiceConditionHealthy, service(t, p, "demo-producer").DependsOn["control-api"].Condition)
		require.Equal(t, types.ServiceConditionHealthy, service(t, p, "demo-worker").DependsOn["dispatch-gateway"].Condition)
	})

	t.Run("HealthchecksProbeTheServicePort", func(t *testing.T) {
		pg := service(t, p, "postgres")
		require.NotNil(t, pg.HealthCheck)
		require.Contains(t, strings.Join(pg.HealthCheck.Test, " "), "pg_isready -h 127.0.0.1",
			"postgres is ready once it listens on TCP: the image's init-time server (Unix socket only) must not count")
		probe := probePath(t, df)
		for command := range longRunning {
			s := service(t, p, command)
			require.NotNil(t, s.HealthCheck, "%s has a healthcheck", command)
			require.False(t, s.HealthCheck.Disable)
			test := []string(s.HealthCheck.Test)
			require.Equal(t, []string{"CMD", probe, "http://127.0.0.1:" + composeAdminPort(t, s, command) + "/readyz"}, test,
				"%s's healthcheck runs pulse-probe against its own /readyz", command)
			require.NotNil(t, s.StopGracePeriod, "%s has time to shut down", command)
		}
		require.NotNil(t, service(t, p, "gateway-proxy").HealthCheck)
	})

	t.Run("TracesGoToTheViewer", func(t *testing.T) {
		jaeger := service(t, p, "jaeger")
		require.Equal(t, "0.0.0.0", envValue(jaeger, "JAEGER_LISTEN_HOST"), "jaeger's OTLP receivers listen beyond its loopback")
		for command := range longRunning {
			require.Equal(t, "http://jaeger:4317", envValue(service(t, p, command), "OTEL_EXPORTER_OTLP_ENDPOINT"), "%s exports OTLP to jaeger", command)
		}
		// The demo producer and worker too: the publish, process and
		// settle spans of a job's trace are theirs.
		for _, demo := range []string{"demo-producer", "demo-worker"} {
			require.Equal(t, "http://jaeger:4317", envValue(service(t, p, demo), "OTEL_EXPORTER_OTLP_ENDPOINT"), "%s exports OTLP to jaeger", demo)
		}
	})

	t.Run("PythonDemoIsWired", func(t *testing.T) {
		// The Python SDK's demo has no -h to check its variables against:
		// its docstring lists what it reads, and every variable compose
		// sets on it must be there.
		s := service(t, p, "demo-worker-python")
		require.NotNil(t, s.Build)
		require.Equal(t, "demo-worker-python", s.Build.Target)
		require.Regexp(t, "^pulse/demo-worker-python:", s.Image)
		for arg, def := range df.args {
			require.NotNil(t, s.Build.Args[arg], "demo-worker-python passes build argument %s", arg)
			require.Equal(t, def, *s.Build.Args[arg], "demo-worker-python's %s defaults to the Dockerfile's", arg)
		}
		stage := df.stages["demo-worker-python"]
		require.NotNil(t, stage, "the Dockerfile has a demo-worker-python target")
		require.Equal(t, "debian:bookworm-slim", df.baseImage(stage), "the Python demo runs on Debian 12, whose python3-grpcio the SDK is built for")
		var script string
		for _, in := range stage.body {
			if in.cmd == "COPY" {
				f := strings.Fields(in.args)
				require.Len(t, f, 2, "COPY %s", in.args)
				_, err := os.Stat(repoPath(t, f[0]))
				require.NoError(t, err, "demo-worker-python copies %s, which is not in the repo", f[0])
			}
			if in.cmd == "ENTRYPOINT" {
				args := jsonArgs(t, in.args)
				script = strings.TrimPrefix(args[len(args)-1], "/opt/pulse/")
			}
		}
		user, ok := df.last("demo-worker-python", "USER")
		require.True(t, ok)
		require.NotEqual(t, "root", user.args)
		doc, err := os.ReadFile(repoPath(t, script))
		require.NoError(t, err, "the entrypoint runs %s", script)
		for name := range s.Environment {
			if strings.HasPrefix(name, "PULSE_") {
				require.True(t, strings.Contains(string(doc), "\n  "+name+" "), "demo-worker-python sets %s, which %s does not list", name, script)
			}
		}
		gwPort := addrPort(t, envValue(service(t, p, "dispatch-gateway"), "PULSE_GRPC_ADDR"))
		require.Equal(t, "dns:///dispatch-gateway:"+gwPort, envValue(s, "PULSE_GATEWAY_ADDRS"))
		require.Equal(t, types.ServiceConditionCompletedSuccessfully, s.DependsOn["migrate"].Condition)
		require.Equal(t, types.ServiceConditionHealthy, s.DependsOn["control-api"].Condition)
		require.Equal(t, types.ServiceConditionHealthy, s.DependsOn["dispatch-gateway"].Condition)
		local, err := os.ReadFile(repoPath(t, "scripts/local-images.sh"))
		require.NoError(t, err)
		require.Contains(t, string(local), "export PULSE_PYTHON_IMAGE=$PYTHON_IMAGE", "the Python stand-in is selected offline")
	})

	t.Run("LocalImagesLeaveOutOnlyGrafana", func(t *testing.T) {
		// scripts/local-images.sh points COMPOSE_FILE at both files: every
		// service runs on the stand-ins but Grafana, which has none.
		opts, err := cli.NewProjectOptions([]string{repoPath(t, "docker-compose.yml"), repoPath(t, "deploy/docker/compose.local-images.yml")},
			cli.WithName("pulse"), cli.WithWorkingDirectory(root(t)), cli.WithEnv(nil))
		require.NoError(t, err)
		local, err := opts.LoadProject(t.Context())
		require.NoError(t, err, "docker-compose.yml with compose.local-images.yml does not load")
		var want []string
		for _, name := range composeServices {
			if name != "grafana" {
				want = append(want, name)
			}
		}
		require.ElementsMatch(t, want, local.ServiceNames())
		script, err := os.ReadFile(repoPath(t, "scripts/local-images.sh"))
		require.NoError(t, err)
		require.Contains(t, string(script), "export COMPOSE_FILE=$PWD/docker-compose.yml:$PWD/deploy/docker/compose.local-images.yml")
		require.Contains(t, string(script), "export PULSE_JAEGER_IMAGE=$JAEGER_IMAGE", "the Jaeger stand-in is selected")
		require.NotContains(t, string(script), "export PULSE_OTLP_ENDPOINT=", "tracing stays on with the stand-ins")
	})

	t.Run("GrafanaAllowsAnonymousViewers", func(t *testing.T) {
		g := service(t, p, "grafana")
		require.Equal(t, "true", envValue(g, "GF_AUTH_ANONYMOUS_ENABLED"))
		require.Equal(t, "Viewer", envValue(g, "GF_AUTH_ANONYMOUS_ORG_ROLE"))
	})
}
