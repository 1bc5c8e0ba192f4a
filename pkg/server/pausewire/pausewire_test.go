package pausewire_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/pausewire"
)

func TestModeNames(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]pulsev1.PauseMode{
		"drain": pulsev1.PauseMode_PAUSE_MODE_DRAIN, "QUIESCE": pulsev1.PauseMode_PAUSE_MODE_QUIESCE,
	} {
		got, ok := pausewire.ModeNamed(name)
		require.True(t, ok, name)
		require.Equal(t, want, got, name)
	}
	for _, bad := range []string{"", "freeze", "drain "} {
		_, ok := pausewire.ModeNamed(bad)
		require.False(t, ok, bad)
	}
	require.Equal(t, "drain", pausewire.ModeName(pulsev1.PauseMode_PAUSE_MODE_UNSPECIFIED), "unset is drain")
	require.Equal(t, "drain", pausewire.ModeName(pulsev1.PauseMode_PAUSE_MODE_DRAIN))
	require.Equal(t, "quiesce", pausewire.ModeName(pulsev1.PauseMode_PAUSE_MODE_QUIESCE))
	require.Equal(t, "", pausewire.ModeName(pulsev1.PauseMode(99)))
}
