package deploytest

import (
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// credentialServices are the services that refuse to start without
// credentials (PULSE_AUTH defaults to required; ADR-0031).
var credentialServices = []string{"control-api", "dispatch-gateway"}

// users parses a PULSE_AUTH_USERS value into user -> "role:password".
func users(t *testing.T, spec string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range strings.Split(spec, ",") {
		name, rest, ok := strings.Cut(strings.TrimSpace(e), ":")
		require.True(t, ok, "PULSE_AUTH_USERS entry %q", e)
		out[name] = rest
	}
	return out
}

// TestComposeShipsWorkingDevelopmentCredentials: `docker compose up` must
// start (credentials set, plaintext allowed explicitly on the private
// network), and the demo producer and worker must authenticate as users
// the services know, with the role they need.
func TestComposeShipsWorkingDevelopmentCredentials(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	var known map[string]string
	for _, name := range credentialServices {
		s := service(t, p, name)
		require.NotEqual(t, "none", envValue(s, "PULSE_AUTH"), "%s runs with credentials", name)
		spec := envValue(s, "PULSE_AUTH_USERS")
		require.NotEmpty(t, spec, "%s has development users", name)
		require.Equal(t, "true", envValue(s, "PULSE_ALLOW_PLAINTEXT_CREDENTIALS"),
			"%s listens beyond loopback in plaintext: it must say so explicitly, or it refuses to start", name)
		if known == nil {
			known = users(t, spec)
		}
		require.Equal(t, known, users(t, spec), "control-api and the gateways know the same users")
	}
	for demo, role := range map[string]string{"demo-producer": "producer", "demo-worker": "worker"} {
		s := service(t, p, demo)
		user, pass := envValue(s, "PULSE_USER"), envValue(s, "PULSE_PASSWORD")
		require.NotEmpty(t, user, "%s authenticates", demo)
		require.Equal(t, role+":"+pass, known[user], "%s's user %s is a %s with that password", demo, user, role)
		require.Equal(t, "true", envValue(s, "PULSE_ALLOW_PLAINTEXT_CREDENTIALS"),
			"%s sends credentials across the compose network in plaintext: the SDK refuses that unless told", demo)
	}
	for _, name := range []string{"reaper", "scheduler"} {
		require.Empty(t, envValue(service(t, p, name), "PULSE_AUTH_USERS"), "%s reads no credentials", name)
	}
}

// TestKubernetesServesTLSAndVerifiesPostgres: the Kubernetes example must
// start (credentials over TLS, never plaintext beyond loopback) and reach
// Postgres with verify-full against a mounted CA.
func TestKubernetesServesTLSAndVerifiesPostgres(t *testing.T) {
	t.Parallel()
	objs := buildK8s(t)

	mounted := func(c corev1.Container, pod corev1.PodSpec, file string) string {
		t.Helper()
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(file, m.MountPath+"/") {
				for _, v := range pod.Volumes {
					if v.Name == m.Name {
						require.NotNil(t, v.Secret, "%s is mounted from a Secret", file)
						_, ok := objs.secrets[v.Secret.SecretName]
						require.True(t, ok, "%s comes from Secret %s, which the kustomization builds", file, v.Secret.SecretName)
						return v.Secret.SecretName
					}
				}
			}
		}
		t.Fatalf("%s is not under any mounted volume of %s", file, c.Name)
		return ""
	}
	secretHas := func(secret, file string) {
		t.Helper()
		s := objs.secrets[secret]
		_, inString := s.StringData[path.Base(file)]
		_, inData := s.Data[path.Base(file)]
		require.True(t, inString || inData, "Secret %s has the key %s", secret, path.Base(file))
	}

	for _, name := range credentialServices {
		d := objs.deployments[name]
		require.NotNil(t, d, name)
		c := d.Spec.Template.Spec.Containers[0]
		env := objs.containerEnv(t, name, c)
		require.NotEqual(t, "none", env["PULSE_AUTH"], "%s runs with credentials", name)
		require.NotEqual(t, "true", env["PULSE_ALLOW_PLAINTEXT_CREDENTIALS"], "%s must not allow plaintext credentials", name)
		for _, v := range []string{"PULSE_TLS_CERT", "PULSE_TLS_KEY"} {
			require.NotEmpty(t, env[v], "%s serves TLS (%s)", name, v)
			secretHas(mounted(c, d.Spec.Template.Spec, env[v]), env[v])
		}
	}
	for _, pr := range []*corev1.Probe{
		objs.deployments["control-api"].Spec.Template.Spec.Containers[0].LivenessProbe,
		objs.deployments["control-api"].Spec.Template.Spec.Containers[0].ReadinessProbe,
	} {
		require.Equal(t, corev1.URISchemeHTTPS, pr.HTTPGet.Scheme, "control-api's HTTP port serves TLS, so its probes use HTTPS")
	}

	type podOf struct {
		c   corev1.Container
		pod corev1.PodSpec
	}
	var pods []podOf
	for _, d := range objs.deployments {
		pods = append(pods, podOf{d.Spec.Template.Spec.Containers[0], d.Spec.Template.Spec})
	}
	for _, j := range objs.jobs {
		pods = append(pods, podOf{j.Spec.Template.Spec.Containers[0], j.Spec.Template.Spec})
	}
	for _, p := range pods {
		env := objs.containerEnv(t, p.c.Name, p.c)
		u, err := url.Parse(env["PULSE_DATABASE_URL"])
		require.NoError(t, err)
		q := u.Query()
		require.Equal(t, "verify-full", q.Get("sslmode"), "%s verifies Postgres's certificate and name", p.c.Name)
		root := q.Get("sslrootcert")
		require.NotEmpty(t, root, "%s names the CA it verifies Postgres against", p.c.Name)
		secretHas(mounted(p.c, p.pod, root), root)
	}
}
