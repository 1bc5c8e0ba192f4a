package deploytest

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// grpcServerMetrics are what go-grpc-middleware's prometheus provider
// exports with the handling-time histogram on (pkg/server/metrics).
var grpcServerMetrics = []string{
	"grpc_server_started_total", "grpc_server_handled_total", "grpc_server_msg_received_total",
	"grpc_server_msg_sent_total", "grpc_server_handling_seconds",
}

var (
	metricLiteral = regexp.MustCompile(`"(pulse_[a-z0-9_]+)"`)
	metricRef     = regexp.MustCompile(`\b((?:pulse|grpc_server)_[a-z0-9_]+)`)
)

// exportedMetrics collects every pulse_* metric name declared as a string
// literal in the services' and shared packages' Go source (the metric
// definition files), plus the gRPC server metrics.
func exportedMetrics(t *testing.T, root string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, m := range grpcServerMetrics {
		out[m] = true
	}
	for _, dir := range []string{"services", filepath.Join("pkg", "server")} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range metricLiteral.FindAllStringSubmatch(string(b), -1) {
				out[m[1]] = true
			}
			return nil
		})
		require.NoError(t, err)
	}
	return out
}

// missingMetrics returns the metric names expr uses that nothing exports
// (histogram and summary series suffixes are stripped first).
func missingMetrics(expr string, exported map[string]bool) []string {
	var missing []string
	for _, m := range metricRef.FindAllStringSubmatch(expr, -1) {
		name := m[1]
		if !exported[name] {
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				name = strings.TrimSuffix(name, suffix)
			}
		}
		if !exported[name] {
			missing = append(missing, m[1])
		}
	}
	return missing
}

// TestDashboardsAndAlertsUseExportedMetrics fails when a Grafana panel or
// an alert rule names a metric no pulse service exports — a renamed metric
// would otherwise leave an empty panel or an alert that can never fire.
func TestDashboardsAndAlertsUseExportedMetrics(t *testing.T) {
	t.Parallel()
	repo := root(t)
	exported := exportedMetrics(t, repo)
	require.Contains(t, exported, "pulse_jobs_settled_total", "the scan found the gateway's metrics")

	t.Run("TheCheckCatchesAnUnknownMetric", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, []string{"pulse_no_such_metric_total"},
			missingMetrics(`sum(rate(pulse_no_such_metric_total[5m])) / sum(rate(pulse_jobs_settled_total[5m]))`, exported))
		require.Empty(t, missingMetrics(`histogram_quantile(0.9, rate(pulse_queue_wait_seconds_bucket[5m]))`, exported))
	})

	exprs := map[string]string{} // where → expr
	dashboards, err := filepath.Glob(filepath.Join(repo, "deploy", "grafana", "dashboards", "*.json"))
	require.NoError(t, err)
	for _, file := range dashboards {
		raw, err := os.ReadFile(file)
		require.NoError(t, err)
		var doc any
		require.NoError(t, json.Unmarshal(raw, &doc))
		collectExprs(doc, filepath.Base(file), exprs)
	}
	raw, err := os.ReadFile(filepath.Join(repo, "deploy", "prometheus", "alerts.yml"))
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs["alerts.yml: "+r.Alert] = r.Expr
		}
	}
	require.NotEmpty(t, exprs)

	var problems []string
	for where, expr := range exprs {
		for _, m := range missingMetrics(expr, exported) {
			problems = append(problems, where+": "+m)
		}
	}
	sort.Strings(problems)
	require.Empty(t, problems, "metrics no service exports")
}

// collectExprs finds every "expr" string anywhere in a dashboard document.
func collectExprs(v any, where string, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		if e, ok := x["expr"].(string); ok && e != "" {
			out[where+": "+e] = e
		}
		for _, c := range x {
			collectExprs(c, where, out)
		}
	case []any:
		for _, c := range x {
			collectExprs(c, where, out)
		}
	}
}
