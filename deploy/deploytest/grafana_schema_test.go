package deploytest

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/stretchr/testify/require"
)

// sdkModule is the Grafana foundation SDK, whose generated types are
// Grafana's own dashboard schema.
const sdkModule = "github.com/grafana/grafana-foundation-sdk/go"

// TestDashboardsDecodeAsGrafanaReadsThem decodes every dashboard in
// deploy/grafana/dashboards strictly into the foundation SDK's
// dashboard.Dashboard (an unknown field anywhere, a value of the wrong
// type, a missing required field fails), with every panel's options and
// field config decoded by its panel plugin's own types and every query by
// the Prometheus datasource's. Then what the SDK cannot say: every panel
// queries Prometheus through the provisioned datasource, every query has
// an expression, every panel sets a unit Grafana knows, and every
// variable is a Prometheus query variable.
func TestDashboardsDecodeAsGrafanaReadsThem(t *testing.T) {
	t.Parallel()
	plugins.RegisterDefaultPlugins()
	known := grafanaUnits(t)
	files, err := filepath.Glob(filepath.Join(repoPath(t, "deploy/grafana/dashboards"), "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile(f)
			require.NoError(t, err)
			var d dashboard.Dashboard //nolint:staticcheck // the v1 schema is what file provisioning reads (ADR-0036)
			require.NoError(t, decodeStrict(raw, &d), "%s does not decode as Grafana's dashboard schema", f)
			require.NoError(t, d.Validate())
			require.NotNil(t, d.Uid)
			require.NotEmpty(t, d.Panels)

			// The SDK's PanelOrRowPanel drops a panel that decoded without
			// error (its empty error list is a typed nil), so each panel is
			// read again on its own, as strictly.
			var doc struct{ Panels []json.RawMessage }
			require.NoError(t, json.Unmarshal(raw, &doc))
			require.Len(t, doc.Panels, len(d.Panels))
			for i, rawPanel := range doc.Panels {
				p := &dashboard.Panel{}
				require.NoError(t, decodeStrict(rawPanel, p), "%s: panel %d", f, i)
				title := ""
				if p.Title != nil {
					title = *p.Title
				}
				require.NotEmpty(t, title, "%s: a panel without a title", f)
				require.NotNil(t, p.Datasource, "%s: panel %q names no datasource", f, title)
				require.Equal(t, "prometheus", deref(p.Datasource.Type), "%s: panel %q", f, title)
				require.Equal(t, "prometheus", deref(p.Datasource.Uid), "%s: panel %q uses the provisioned datasource", f, title)
				// Each query again on its own, as the Prometheus datasource's
				// query type (the SDK drops the ones it decoded, as above).
				var rawTargets struct{ Targets []json.RawMessage }
				require.NoError(t, json.Unmarshal(rawPanel, &rawTargets))
				require.NotEmpty(t, rawTargets.Targets, "%s: panel %q has no query", f, title)
				for i, rawQuery := range rawTargets.Targets {
					q := &prometheus.Dataquery{}
					require.NoError(t, decodeStrict(rawQuery, q), "%s: panel %q query %d is not a Prometheus query", f, title, i)
					require.NotNil(t, q.Datasource, "%s: panel %q query %d names no datasource", f, title, i)
					require.Equal(t, "prometheus", deref(q.Datasource.Uid), "%s: panel %q query %d", f, title, i)
					require.NotEmpty(t, strings.TrimSpace(q.Expr), "%s: panel %q query %d has no expression", f, title, i)
					require.NotEmpty(t, deref(q.RefId), "%s: panel %q query %d has no refId", f, title, i)
				}
				require.NotNil(t, p.FieldConfig, "%s: panel %q has no field config", f, title)
				unit := deref(p.FieldConfig.Defaults.Unit)
				require.NotEmpty(t, unit, "%s: panel %q sets no unit", f, title)
				require.True(t, known[unit], "%s: panel %q: unit %q is not one Grafana knows", f, title, unit)
			}

			for _, v := range d.Templating.List {
				require.Equal(t, dashboard.VariableTypeQuery, v.Type, "%s: variable %s", f, v.Name)
				require.NotNil(t, v.Datasource, "%s: variable %s names no datasource", f, v.Name)
				require.Equal(t, "prometheus", deref(v.Datasource.Uid), "%s: variable %s", f, v.Name)
				require.NotNil(t, v.Query, "%s: variable %s has no query", f, v.Name)
			}
			for _, a := range d.Annotations.List {
				require.NotNil(t, a.Datasource, "%s: annotation %s names no datasource", f, a.Name)
				require.Equal(t, "prometheus", deref(a.Datasource.Uid), "%s: annotation %s", f, a.Name)
			}
		})
	}
}

// TestTheSchemaCheckCatchesMistakes proves the strict decode is strict: a
// misspelled field (of the dashboard, a panel, a query), a value of the
// wrong type and an unknown panel option each fail it.
func TestTheSchemaCheckCatchesMistakes(t *testing.T) {
	t.Parallel()
	plugins.RegisterDefaultPlugins()
	const base = `{"title":"t","uid":"u","schemaVersion":39,"panels":[{"type":"timeseries","id":1,"title":"p",` +
		`"datasource":{"type":"prometheus","uid":"prometheus"},"gridPos":{"h":8,"w":12,"x":0,"y":0},` +
		`"targets":[{"refId":"A","datasource":{"type":"prometheus","uid":"prometheus"},"expr":"up"}],` +
		`"fieldConfig":{"defaults":{"unit":"s"},"overrides":[]}%s}],"templating":{"list":[]},"annotations":{"list":[]}%s}`
	var ok dashboard.Dashboard //nolint:staticcheck // the v1 schema is what file provisioning reads (ADR-0036)
	require.NoError(t, decodeStrict([]byte(strings.Replace(strings.Replace(base, "%s", "", 1), "%s", "", 1)), &ok))
	for name, bad := range map[string][2]string{
		"misspelled dashboard field": {"", `,"refersh":"5s"`},
		"misspelled panel field":     {`,"descriptionText":"x"`, ""},
		"wrong type":                 {"", `,"editable":"yes"`},
		"unknown panel option":       {`,"options":{"legend":{"showLegend":true,"displayMode":"list","placement":"bottom","calcs":[]},"lgend":{}}`, ""},
	} {
		doc := strings.Replace(strings.Replace(base, "%s", bad[0], 1), "%s", bad[1], 1)
		var d dashboard.Dashboard //nolint:staticcheck // the v1 schema is what file provisioning reads (ADR-0036)
		err := decodeStrict([]byte(doc), &d)
		require.Error(t, err, "%s must fail the strict decode: %s", name, doc)
		t.Logf("%s: %v", name, err)
	}
	doc := strings.Replace(strings.Replace(strings.Replace(base, "%s", "", 1), "%s", "", 1), `"expr":"up"`, `"expr":"up","legnedFormat":"x"`, 1)
	var d dashboard.Dashboard //nolint:staticcheck // the v1 schema is what file provisioning reads (ADR-0036)
	err := decodeStrict([]byte(doc), &d)
	require.Error(t, err, "a misspelled query field must fail the strict decode")
	t.Logf("misspelled query field: %v", err)
}

// grafanaUnits returns every unit id the foundation SDK's units package
// declares (Grafana's unit picker), read from its source in the module
// cache.
func grafanaUnits(t *testing.T) map[string]bool {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", sdkModule)
	cmd.Dir = repoPath(t, "deploy/deploytest")
	out, err := cmd.Output()
	require.NoError(t, err, "go list -m %s", sdkModule)
	dir := strings.TrimSpace(string(out))
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, "units", "types_gen.go"), nil, 0)
	require.NoError(t, err)
	units := map[string]bool{}
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			for _, v := range s.(*ast.ValueSpec).Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					u, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					units[u] = true
				}
			}
		}
	}
	require.Greater(t, len(units), 100, "the units package lists Grafana's units")
	return units
}

// decodeStrict is v.UnmarshalJSONStrict(raw), with the SDK's empty error
// list (a typed nil) read as no error.
func decodeStrict(raw []byte, v interface{ UnmarshalJSONStrict([]byte) error }) error {
	err := v.UnmarshalJSONStrict(raw)
	var errs cog.BuildErrors
	if errors.As(err, &errs) && len(errs) == 0 {
		return nil
	}
	return err
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
