package deploytest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const k8sDir = "deploy/k8s"

// k8sObjects is `kustomize build deploy/k8s`, every object strictly decoded
// into its typed Kubernetes API struct (an unknown or misspelt field fails).
type k8sObjects struct {
	deployments map[string]*appsv1.Deployment
	jobs        map[string]*batchv1.Job
	services    map[string]*corev1.Service
	hpas        map[string]*autoscalingv2.HorizontalPodAutoscaler
	pdbs        map[string]*policyv1.PodDisruptionBudget
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
}

func buildK8s(t *testing.T) *k8sObjects {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resources, err := k.Run(filesys.MakeFsOnDisk(), repoPath(t, k8sDir))
	require.NoError(t, err, "kustomize build %s", k8sDir)
	objs := &k8sObjects{
		deployments: map[string]*appsv1.Deployment{}, jobs: map[string]*batchv1.Job{},
		services: map[string]*corev1.Service{}, hpas: map[string]*autoscalingv2.HorizontalPodAutoscaler{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, configMaps: map[string]*corev1.ConfigMap{},
		secrets: map[string]*corev1.Secret{},
	}
	for _, r := range resources.Resources() {
		b, err := r.AsYAML()
		require.NoError(t, err)
		kind, name := r.GetKind(), r.GetName()
		var into any
		switch kind {
		case "Deployment":
			into = fresh(objs.deployments, name)
		case "Job":
			into = fresh(objs.jobs, name)
		case "Service":
			into = fresh(objs.services, name)
		case "HorizontalPodAutoscaler":
			into = fresh(objs.hpas, name)
		case "PodDisruptionBudget":
			into = fresh(objs.pdbs, name)
		case "ConfigMap":
			into = fresh(objs.configMaps, name)
		case "Secret":
			into = fresh(objs.secrets, name)
		default:
			t.Fatalf("%s %s: a kind this test does not check; add it", kind, name)
		}
		require.NoError(t, yaml.UnmarshalStrict(b, into), "%s %s does not match the Kubernetes API:\n%s", kind, name, b)
	}
	return objs
}

// fresh puts a new, empty object under name in m and returns it for the
// manifest to be decoded into.
func fresh[T any](m map[string]*T, name string) *T {
	v := new(T)
	m[name] = v
	return v
}

// containerEnv is every variable a container gets, with its value where
// the manifests hold one (literal env, ConfigMaps, Secrets), resolving
// envFrom against the built objects.
func (o *k8sObjects) containerEnv(t *testing.T, where string, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, ok := o.configMaps[from.ConfigMapRef.Name]
			require.True(t, ok, "%s: envFrom names ConfigMap %q, which the kustomization does not build", where, from.ConfigMapRef.Name)
			for k, v := range cm.Data {
				env[from.Prefix+k] = v
			}
		case from.SecretRef != nil:
			s, ok := o.secrets[from.SecretRef.Name]
			require.True(t, ok, "%s: envFrom names Secret %q, which the kustomization does not build", where, from.SecretRef.Name)
			for k, v := range s.StringData {
				env[from.Prefix+k] = v
			}
			for k, v := range s.Data {
				env[from.Prefix+k] = string(v)
			}
		}
	}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// probePort resolves a probe's port (named or numbered) to the container
// port number.
func probePort(t *testing.T, c corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %q", c.Name, p.StrVal)
	return 0
}

// TestKubernetesManifests builds deploy/k8s with kustomize, decodes every
// object strictly into the typed API, and proves: a Deployment per service
// probing /healthz (liveness) and /readyz (readiness) on the port the
// service's own address variable names, with resource requests, scrape
// annotations, a grace period above its shutdown timeout, images named
// like compose's, and only PULSE_* variables the binary reads; the gateway
// with its own replica count, an HPA, a PDB and a headless Service; the
// migrate step as a Job running `control-api migrate`.
func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	objs := buildK8s(t)
	compose := loadCompose(t)

	t.Run("EveryManifestIsAResource", func(t *testing.T) {
		var kust struct{ Resources []string }
		b, err := os.ReadFile(repoPath(t, k8sDir+"/kustomization.yaml"))
		require.NoError(t, err)
		require.NoError(t, yaml.Unmarshal(b, &kust))
		files, err := filepath.Glob(repoPath(t, k8sDir+"/*.yaml"))
		require.NoError(t, err)
		for _, f := range files {
			if base := filepath.Base(f); base != "kustomization.yaml" {
				require.Contains(t, kust.Resources, base, "%s is not listed in kustomization.yaml's resources", base)
			}
		}
	})

	t.Run("EveryServiceHasAProbedDeployment", func(t *testing.T) {
		require.Len(t, objs.deployments, len(longRunning))
		for command, addrVar := range longRunning {
			d, ok := objs.deployments[command]
			require.True(t, ok, "a Deployment named %s", command)
			require.NotNil(t, d.Spec.Replicas, "%s sets its replica count", command)
			pod := d.Spec.Template
			require.Len(t, pod.Spec.Containers, 1)
			c := pod.Spec.Containers[0]
			where := "Deployment " + command

			// Image: the same repository compose builds.
			repo, _, _ := strings.Cut(c.Image, ":")
			composeRepo, _, _ := strings.Cut(service(t, compose, command).Image, ":")
			require.Equal(t, "pulse/"+command, repo, "%s runs its own image", where)
			require.Equal(t, composeRepo, repo, "%s's image is the one compose builds", where)

			// Environment: only what the binary reads; its required URL.
			env := objs.containerEnv(t, where, c)
			requireReads(t, command, where, sortedKeys(env))
			require.Contains(t, env, "PULSE_DATABASE_URL", "%s gets the database URL", where)
			require.NotContains(t, c.Env, corev1.EnvVar{Name: "PULSE_DATABASE_URL"}, "the URL comes from a Secret")

			// Probes: on the admin address the service listens on.
			require.Contains(t, env, addrVar, "%s sets %s, so the probe port is visible", where, addrVar)
			admin, err := strconv.Atoi(addrPort(t, env[addrVar]))
			require.NoError(t, err)
			for _, pr := range []struct {
				kind string
				p    *corev1.Probe
				path string
			}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
				require.NotNil(t, pr.p, "%s has a %s probe", where, pr.kind)
				require.NotNil(t, pr.p.HTTPGet, "%s's %s probe is an HTTP GET", where, pr.kind)
				require.Equal(t, pr.path, pr.p.HTTPGet.Path, "%s's %s probe path", where, pr.kind)
				require.Equal(t, int32(admin), probePort(t, c, pr.p.HTTPGet.Port), "%s's %s probe is on %s", where, pr.kind, env[addrVar])
			}

			// Resources, scraping, graceful stop.
			require.False(t, c.Resources.Requests.Cpu().IsZero(), "%s requests CPU", where)
			require.False(t, c.Resources.Requests.Memory().IsZero(), "%s requests memory", where)
			ann := pod.Annotations
			require.Equal(t, "true", ann["prometheus.io/scrape"], "%s is scraped", where)
			require.Equal(t, strconv.Itoa(admin), ann["prometheus.io/port"], "%s is scraped on its admin port", where)
			require.Equal(t, "/metrics", ann["prometheus.io/path"])
			shutdown, err := time.ParseDuration(env["PULSE_SHUTDOWN_TIMEOUT"])
			require.NoError(t, err, "%s sets PULSE_SHUTDOWN_TIMEOUT", where)
			require.NotNil(t, pod.Spec.TerminationGracePeriodSeconds)
			require.Greater(t, time.Duration(*pod.Spec.TerminationGracePeriodSeconds)*time.Second, shutdown,
				"%s: Kubernetes must not SIGKILL before the graceful shutdown bound", where)

			// Selector matches the pod.
			for k, v := range d.Spec.Selector.MatchLabels {
				require.Equal(t, v, pod.Labels[k], "%s's selector matches its pods", where)
			}
		}
	})

	t.Run("GatewayHasHPAPDBAndHeadlessService", func(t *testing.T) {
		const gw = "dispatch-gateway"
		d := objs.deployments[gw]
		require.NotNil(t, d)
		podLabels := d.Spec.Template.Labels
		c := d.Spec.Template.Spec.Containers[0]
		grpcPort, err := strconv.Atoi(addrPort(t, objs.containerEnv(t, gw, c)["PULSE_GRPC_ADDR"]))
		require.NoError(t, err)

		hpa, ok := objs.hpas[gw]
		require.True(t, ok, "an HPA for the gateway")
		require.Equal(t, autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: gw}, hpa.Spec.ScaleTargetRef)
		require.NotNil(t, hpa.Spec.MinReplicas)
		require.GreaterOrEqual(t, *hpa.Spec.MinReplicas, int32(2), "at least two gateways, so one can restart")
		require.Greater(t, hpa.Spec.MaxReplicas, *hpa.Spec.MinReplicas)
		require.LessOrEqual(t, *hpa.Spec.MinReplicas, *d.Spec.Replicas)
		require.NotEmpty(t, hpa.Spec.Metrics)

		pdb, ok := objs.pdbs[gw]
		require.True(t, ok, "a PDB for the gateway")
		require.True(t, pdb.Spec.MaxUnavailable != nil || pdb.Spec.MinAvailable != nil)
		for k, v := range pdb.Spec.Selector.MatchLabels {
			require.Equal(t, v, podLabels[k], "the PDB selects the gateway pods")
		}

		svc, ok := objs.services[gw]
		require.True(t, ok, "a Service named %s (workers dial dns:///%s...)", gw, gw)
		require.Equal(t, corev1.ClusterIPNone, svc.Spec.ClusterIP, "the gateway Service is headless: DNS returns every pod for client-side balancing")
		require.NotEmpty(t, svc.Spec.Selector)
		for k, v := range svc.Spec.Selector {
			require.Equal(t, v, podLabels[k], "the Service selects the gateway pods")
		}
		var servesGRPC bool
		for _, p := range svc.Spec.Ports {
			if p.Port == int32(grpcPort) && probePort(t, c, p.TargetPort) == int32(grpcPort) {
				servesGRPC = true
			}
		}
		require.True(t, servesGRPC, "the headless Service exposes the gateway's gRPC port %d", grpcPort)
	})

	t.Run("MigrateIsAJob", func(t *testing.T) {
		require.Len(t, objs.jobs, 1)
		for name, j := range objs.jobs {
			spec := j.Spec.Template.Spec
			require.Contains(t, []corev1.RestartPolicy{corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}, spec.RestartPolicy)
			require.Len(t, spec.Containers, 1)
			c := spec.Containers[0]
			require.True(t, strings.HasPrefix(c.Image, "pulse/control-api:"), "Job %s runs the control-api image", name)
			require.Equal(t, []string{"migrate"}, append(append([]string{}, c.Command...), c.Args...), "Job %s runs `control-api migrate`", name)
			env := objs.containerEnv(t, "Job "+name, c)
			requireReads(t, "control-api", "Job "+name, sortedKeys(env))
			require.Contains(t, env, "PULSE_DATABASE_URL")
			require.False(t, c.Resources.Requests.Memory().IsZero(), "Job %s requests memory", name)
		}
	})

	t.Run("SecretsHoldTheCredentials", func(t *testing.T) {
		for _, cm := range objs.configMaps {
			for k := range cm.Data {
				require.NotContains(t, []string{"PULSE_DATABASE_URL", "PULSE_AUTH_USERS", "PULSE_AUTH_TOKENS"}, k,
					"ConfigMap %s holds %s; it belongs in a Secret", cm.Name, k)
			}
		}
		var auth bool
		for _, s := range objs.secrets {
			_, users := s.StringData["PULSE_AUTH_USERS"]
			_, tokens := s.StringData["PULSE_AUTH_TOKENS"]
			auth = auth || users || tokens
		}
		require.True(t, auth, "a Secret carries the auth settings")
	})
}
