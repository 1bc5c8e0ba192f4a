package deploytest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

const prometheusConfigPath = "deploy/prometheus/prometheus.yml"

// promConfig is the part of prometheus.yml the test checks.
type promConfig struct {
	ScrapeConfigs []struct {
		JobName string `json:"job_name"`
		DNSSD   []struct {
			Names []string `json:"names"`
			Type  string   `json:"type"`
			Port  int      `json:"port"`
		} `json:"dns_sd_configs"`
		StaticConfigs []struct {
			Targets []string `json:"targets"`
		} `json:"static_configs"`
	} `json:"scrape_configs"`
}

// TestPrometheusConfig proves Prometheus scrapes every pulse service, each
// replica of it (DNS service discovery on the compose service name, so a
// scaled gateway tier is scraped whole), on the port the service serves
// /metrics on; and that promtool accepts the file.
func TestPrometheusConfig(t *testing.T) {
	t.Parallel()
	path := repoPath(t, prometheusConfigPath)

	t.Run("PromtoolAcceptsIt", func(t *testing.T) {
		t.Parallel()
		promtool := requireTool(t, "prometheus", "promtool", "Debian: apt-get install -y prometheus")
		out, err := exec.Command(promtool, "check", "config", path).CombinedOutput()
		require.NoError(t, err, "promtool check config:\n%s", out)
		rules := filepath.Join(filepath.Dir(path), "alerts.yml")
		out, err = exec.Command(promtool, "check", "rules", rules).CombinedOutput()
		require.NoError(t, err, "promtool check rules:\n%s", out)
	})

	t.Run("EveryServiceIsScrapedOnItsAdminPort", func(t *testing.T) {
		t.Parallel()
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		var cfg promConfig
		require.NoError(t, yaml.Unmarshal(b, &cfg))
		jobs := map[string]int{}
		for i, sc := range cfg.ScrapeConfigs {
			jobs[sc.JobName] = i
		}
		p := loadCompose(t)
		for command := range longRunning {
			i, ok := jobs[command]
			require.True(t, ok, "prometheus.yml has a scrape job %q", command)
			sc := cfg.ScrapeConfigs[i]
			require.Len(t, sc.DNSSD, 1, "job %s discovers every replica through DNS", command)
			sd := sc.DNSSD[0]
			require.Equal(t, []string{command}, sd.Names, "job %s resolves the compose service name", command)
			require.Equal(t, "A", sd.Type)
			require.Equal(t, composeAdminPort(t, service(t, p, command), command), strconv.Itoa(sd.Port),
				"job %s scrapes the port the service serves /metrics on", command)
		}
	})
}
