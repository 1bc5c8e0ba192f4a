package deploytest

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// alertTests is the part of a promtool unit-test file the test reads.
type alertTests struct {
	RuleFiles []string         `json:"rule_files"`
	Tests     []alertTestGroup `json:"tests"`
}

// alertTestGroup is one group of a promtool unit-test file.
type alertTestGroup struct {
	Name       string `json:"name"`
	AlertTests []struct {
		EvalTime  string `json:"eval_time"`
		Alertname string `json:"alertname"`
		ExpAlerts []struct {
			ExpLabels map[string]string `json:"exp_labels"`
		} `json:"exp_alerts"`
	} `json:"alert_rule_test"`
}

// pausedGroup names the unit-test group of the pause-aware promise.
const pausedGroup = "a deliberate pause fires nothing but PulseDispatchPausedForLong after 2h"

// TestAlertRules runs deploy/prometheus/alerts_test.yml with promtool
// (each alert firing on the series that should fire it, silent before),
// and checks the file covers every alert of alerts.yml: a case where it
// fires, a case where it stays silent, and the deliberate pause, during
// which every alert is checked and only PulseDispatchPausedForLong fires,
// once the pause is 2 hours old.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	dir := repoPath(t, "deploy/prometheus")

	raw, err := os.ReadFile(filepath.Join(dir, "alerts.yml"))
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert string }
		}
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts = append(alerts, r.Alert)
			}
		}
	}
	require.NotEmpty(t, alerts)

	raw, err = os.ReadFile(filepath.Join(dir, "alerts_test.yml"))
	require.NoError(t, err)
	var tests alertTests
	require.NoError(t, yaml.Unmarshal(raw, &tests))
	require.Equal(t, []string{"alerts.yml"}, tests.RuleFiles)

	t.Run("EveryAlertIsCovered", func(t *testing.T) {
		t.Parallel()
		fires, silent := map[string]bool{}, map[string]bool{}
		for _, g := range tests.Tests {
			for _, c := range g.AlertTests {
				require.Contains(t, alerts, c.Alertname, "group %q tests an alert alerts.yml does not have", g.Name)
				if len(c.ExpAlerts) > 0 {
					fires[c.Alertname] = true
				} else {
					silent[c.Alertname] = true
				}
			}
		}
		for _, a := range alerts {
			require.True(t, fires[a], "alerts_test.yml has no case where %s fires", a)
			require.True(t, silent[a], "alerts_test.yml has no case where %s stays silent", a)
		}
	})

	t.Run("ADeliberatePauseFiresOnlyPausedForLong", func(t *testing.T) {
		t.Parallel()
		i := slices.IndexFunc(tests.Tests, func(g alertTestGroup) bool { return g.Name == pausedGroup })
		require.GreaterOrEqual(t, i, 0, "alerts_test.yml has the group %q", pausedGroup)
		checkedAt1h := map[string]bool{}
		firedPaused := false
		for _, c := range tests.Tests[i].AlertTests {
			if c.EvalTime == "1h" {
				require.Empty(t, c.ExpAlerts, "%s fires 1h into a deliberate pause", c.Alertname)
				checkedAt1h[c.Alertname] = true
			}
			if len(c.ExpAlerts) > 0 {
				require.Equal(t, "PulseDispatchPausedForLong", c.Alertname, "only the long pause alert fires during a pause")
				firedPaused = true
			}
		}
		for _, a := range alerts {
			require.True(t, checkedAt1h[a], "the pause group checks %s stays silent at 1h", a)
		}
		require.True(t, firedPaused, "the pause group shows PulseDispatchPausedForLong firing")
	})

	t.Run("PromtoolTestRules", func(t *testing.T) {
		t.Parallel()
		promtool := requireTool(t, "prometheus", "promtool", "Debian: apt-get install -y prometheus")
		cmd := exec.Command(promtool, "test", "rules", "alerts_test.yml")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool test rules alerts_test.yml:\n%s", out)
		require.Contains(t, string(out), "SUCCESS", "promtool's verdict:\n%s", out)
		t.Logf("promtool test rules: %d groups, %s", len(tests.Tests), strings.TrimSpace(string(out)))
	})
}
