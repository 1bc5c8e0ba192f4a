package buildinfo_test

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/buildinfo"
)

func TestFromBuildInfo(t *testing.T) {
	t.Parallel()
	const rev = "0123456789abcdef0123456789abcdef01234567"
	settings := func(kv ...string) []debug.BuildSetting {
		var out []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			out = append(out, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"ModuleVersion", debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}, Settings: settings("vcs.revision", rev)}, "v1.4.0"},
		{"PseudoVersion", debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261123180000-0123456789ab+dirty"}}, "v0.0.0-20261123180000-0123456789ab+dirty"},
		{"Revision", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings("vcs.revision", rev, "vcs.modified", "false")}, "0123456789ab"},
		{"DirtyRevision", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings("vcs.revision", rev, "vcs.modified", "true")}, "0123456789ab-dirty"},
		{"Nothing", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, buildinfo.Unknown},
	} {
		require.Equal(t, tc.want, buildinfo.FromBuildInfo(&tc.bi), tc.name)
	}
}

func TestVersionIsNeverDev(t *testing.T) {
	t.Parallel()
	v := buildinfo.Version()
	require.NotEmpty(t, v)
	require.NotEqual(t, "dev", v)
	bi, ok := debug.ReadBuildInfo()
	require.True(t, ok)
	require.Equal(t, buildinfo.FromBuildInfo(bi), v, "unstamped, the version is the build info's")
}
