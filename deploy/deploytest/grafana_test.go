package deploytest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestGrafanaProvisioning proves Grafana starts with the compose
// Prometheus as its datasource and loads the dashboards folder compose
// mounts, and that every dashboard there is valid JSON naming that
// datasource.
func TestGrafanaProvisioning(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	g := service(t, p, "grafana")
	mounted := map[string]string{} // container path -> repo path
	for _, v := range g.Volumes {
		mounted[v.Target] = v.Source
	}

	var ds struct {
		Datasources []struct {
			UID, Type, URL string
			IsDefault      bool `json:"isDefault"`
		}
	}
	dsDir := mounted["/etc/grafana/provisioning/datasources"]
	require.NotEmpty(t, dsDir, "grafana mounts a datasources provisioning folder")
	b, err := os.ReadFile(filepath.Join(dsDir, "prometheus.yml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &ds))
	require.Len(t, ds.Datasources, 2, "Prometheus and the Jaeger trace viewer")
	prom := ds.Datasources[0]
	require.Equal(t, "prometheus", prom.Type)
	require.True(t, prom.IsDefault)
	service(t, p, "prometheus")
	require.Equal(t, "http://prometheus:9090", prom.URL, "the datasource is the compose prometheus service")
	traces := ds.Datasources[1]
	require.Equal(t, "jaeger", traces.Type)
	service(t, p, "jaeger")
	require.Equal(t, "http://jaeger:16686", traces.URL, "exemplars link to the compose jaeger service")

	var providers struct {
		Providers []struct {
			Type    string
			Options struct{ Path string }
		}
	}
	provDir := mounted["/etc/grafana/provisioning/dashboards"]
	require.NotEmpty(t, provDir, "grafana mounts a dashboards provisioning folder")
	b, err = os.ReadFile(filepath.Join(provDir, "pulse.yml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &providers))
	require.Len(t, providers.Providers, 1)
	require.Equal(t, "file", providers.Providers[0].Type)
	dashDir := mounted[providers.Providers[0].Options.Path]
	require.NotEmpty(t, dashDir, "the provider's path %s is a folder compose mounts", providers.Providers[0].Options.Path)

	files, err := filepath.Glob(filepath.Join(dashDir, "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "the dashboards folder holds at least one dashboard")
	uids := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var d struct {
			UID, Title string
			Panels     []struct {
				Datasource struct{ UID string }
				Targets    []struct {
					Expr string
				}
			}
		}
		require.NoError(t, json.Unmarshal(b, &d), "%s is JSON", f)
		require.NotEmpty(t, d.UID, "%s has a uid", f)
		require.NotContains(t, uids, d.UID, "%s repeats the uid of %s", f, uids[d.UID])
		uids[d.UID] = f
		for _, panel := range d.Panels {
			require.Equal(t, prom.UID, panel.Datasource.UID, "%s: panels use the provisioned datasource", f)
			for _, tg := range panel.Targets {
				require.NotEmpty(t, strings.TrimSpace(tg.Expr), "%s: a panel target without a query", f)
			}
		}
	}
}
