package app

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
)

func TestTopicsLimitListClear(t *testing.T) {
	t.Parallel()
	out := ok(t, ops("topics", "limit", "cli.limited", "3")...)
	require.Equal(t, "topic cli.limited: at most 3 running, set by ops (0 running now)\n", out)

	out = ok(t, prod("topics")...)
	require.True(t, strings.HasPrefix(out, "TOPIC "), out)
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "cli.limited ") {
			line = l
		}
	}
	require.NotEmpty(t, line, out)
	require.Equal(t, []string{"cli.limited", "0", "0", "3", "0", "0", "-", "-", "0", "0", "0"}, strings.Fields(line))

	var list pulsehttp.TopicList
	okJSON(t, &list, prod("topics")...)
	var found bool
	for _, tp := range list.Topics {
		if tp.Topic == "cli.limited" {
			found = true
			require.NotNil(t, tp.MaxRunning)
			require.Equal(t, int32(3), *tp.MaxRunning)
			require.Equal(t, "ops", tp.LimitUpdatedBy)
		}
	}
	require.True(t, found, "%+v", list)

	out = ok(t, ops("topics", "limit", "cli.limited", "none")...)
	require.Equal(t, "topic cli.limited: no limit (0 running)\n", out)
}

func TestTopicsBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
		code int
	}{
		{"negative", ops("topics", "limit", "cli.bad", "--", "-1"), "0 to 1000000", ExitUsage},
		{"negative as a flag", ops("topics", "limit", "cli.bad", "-1"), "unknown shorthand", ExitUsage},
		{"too large", ops("topics", "limit", "cli.bad", "1000001"), "0 to 1000000", ExitUsage},
		{"not a number", ops("topics", "limit", "cli.bad", "lots"), "or none", ExitUsage},
		{"missing limit", ops("topics", "limit", "cli.bad"), "arg", ExitUsage},
		{"bad topic", ops("topics", "limit", "bad topic!", "1"), "topic", ExitError},
		{"producer sets", prod("topics", "limit", "cli.bad", "1"), "operator", ExitError},
		{"unknown subcommand", prod("topics", "frob"), `unknown command "frob" for "pulse topics"`, ExitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := pulse(t, "", tc.args...)
			line := failLine(t, r)
			require.Contains(t, line, tc.want)
			require.Equal(t, tc.code, r.code, line)
		})
	}
}
