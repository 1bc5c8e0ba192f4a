package version_test

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/cli/internal/version"
)

func TestFromBuildInfo(t *testing.T) {
	t.Parallel()
	const rev = "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"ModuleVersion", debug.BuildInfo{Main: debug.Module{Version: "v0.1.0"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}}}, "v0.1.0"},
		{"Revision", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}}}, "0123456789ab"},
		{"DirtyRevision", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}}, "0123456789ab-dirty"},
		{"Nothing", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, version.Unknown},
	} {
		require.Equal(t, tc.want, version.FromBuildInfo(&tc.bi), tc.name)
	}
}

func TestVersionIsTheBuildInfosWhenUnstamped(t *testing.T) {
	t.Parallel()
	bi, ok := debug.ReadBuildInfo()
	require.True(t, ok)
	require.Equal(t, version.FromBuildInfo(bi), version.Version())
}
