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
	require.Equal(t, []string{"cli.limited", "0", "0", "3", "-", "0", "0", "-", "-", "0", "0", "0"}, strings.Fields(line))

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

func TestTopicsRateLimitSetListClear(t *testing.T) {
	t.Parallel()
	out := ok(t, ops("topics", "rate-limit", "cli.rated", "10/1s", "--key", "args:tenant")...)
	require.Equal(t, "topic cli.rated: at most 10/1s per args:tenant, set by ops\n", out)

	out = ok(t, prod("topics")...)
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "cli.rated ") {
			line = l
		}
	}
	require.NotEmpty(t, line, out)
	require.Equal(t, []string{"cli.rated", "0", "0", "-", "10/1s", "per", "args:tenant", "0", "0", "-", "-", "0", "0", "0"}, strings.Fields(line))

	var list pulsehttp.TopicList
	okJSON(t, &list, prod("topics")...)
	var found bool
	for _, tp := range list.Topics {
		if tp.Topic == "cli.rated" {
			found = true
			require.Nil(t, tp.MaxRunning)
			require.NotNil(t, tp.RateLimit)
			require.Equal(t, int64(10), *tp.RateLimit.RateLimit)
			require.Equal(t, "1s", tp.RateLimit.RateInterval)
			require.Equal(t, "args:tenant", tp.RateLimit.RateKey)
		}
	}
	require.True(t, found, "%+v", list)

	out = ok(t, ops("topics", "rate-limit", "cli.rated", "none")...)
	require.Equal(t, "topic cli.rated: no rate limit\n", out)
}

func TestTopicsKeyLimitsSetListClear(t *testing.T) {
	t.Parallel()
	out := ok(t, ops("topics", "key-limits", "cli.keyed", "--per-key", "2", "--sequence", "block")...)
	require.Equal(t, "topic cli.keyed: at most 2 running per concurrency key, sequences (block on failure), set by ops\n", out)
	ok(t, prod("submit", "cli.keyed", "--concurrency-key", "tenant-a", "--sequence-key", "order-1")...)

	out = ok(t, prod("topics")...)
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "cli.keyed ") {
			line = l
		}
	}
	require.NotEmpty(t, line, out)
	require.Equal(t, []string{"cli.keyed", "1", "0", "2/key", "-"}, strings.Fields(line)[:5])

	var list pulsehttp.TopicList
	okJSON(t, &list, prod("topics")...)
	var found bool
	for _, tp := range list.Topics {
		if tp.Topic == "cli.keyed" {
			found = true
			require.Nil(t, tp.MaxRunning)
			require.NotNil(t, tp.MaxRunningPerKey)
			require.Equal(t, int32(2), *tp.MaxRunningPerKey)
			require.Equal(t, "block", tp.SequenceOnFailure)
		}
	}
	require.True(t, found, "%+v", list)

	// The sequence policy stays while a sequenced job is queued.
	r := pulse(t, "", ops("topics", "key-limits", "cli.keyed", "--per-key", "none", "--sequence", "none")...)
	require.Equal(t, ExitError, r.code, failLine(t, r))
	out = ok(t, ops("topics", "key-limits", "cli.keyed", "--per-key", "none", "--sequence", "continue")...)
	require.Equal(t, "topic cli.keyed: no per-key limit, sequences (continue on failure), set by ops\n", out)
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
		{"rate zero", ops("topics", "rate-limit", "cli.bad", "0/1s"), "1 to 10000", ExitUsage},
		{"rate huge", ops("topics", "rate-limit", "cli.bad", "99999999999/1s"), "1 to 10000", ExitUsage},
		{"rate without interval", ops("topics", "rate-limit", "cli.bad", "10"), "N/INTERVAL", ExitUsage},
		{"rate bad interval", ops("topics", "rate-limit", "cli.bad", "10/soon"), "duration", ExitUsage},
		{"rate interval too long", ops("topics", "rate-limit", "cli.bad", "10/25h"), "rate_interval", ExitError},
		{"rate interval zero", ops("topics", "rate-limit", "cli.bad", "10/0s"), "rate_interval", ExitError},
		{"rate bad key", ops("topics", "rate-limit", "cli.bad", "10/1s", "--key", "tenant"), "rate_key", ExitError},
		{"producer sets a rate", prod("topics", "rate-limit", "cli.bad", "10/1s"), "operator", ExitError},
		{"per-key zero", ops("topics", "key-limits", "cli.bad", "--per-key", "0"), "1 to 1000000", ExitUsage},
		{"per-key huge", ops("topics", "key-limits", "cli.bad", "--per-key", "99999999999"), "1 to 1000000", ExitUsage},
		{"key limits without a flag", ops("topics", "key-limits", "cli.bad"), "--per-key or --sequence", ExitUsage},
		{"bad sequence policy", ops("topics", "key-limits", "cli.bad", "--sequence", "skip"), "block, continue or none", ExitUsage},
		{"producer sets key limits", prod("topics", "key-limits", "cli.bad", "--per-key", "1"), "operator", ExitError},
		{"concurrency key too long", prod("submit", "cli.bad", "--concurrency-key", strings.Repeat("k", 256)), "concurrency_key", ExitError},
		{"sequence key with NUL", prod("submit", "cli.bad", "--sequence-key", "a\x00b"), "sequence_key", ExitError},
		{"sequence key without a policy", prod("submit", "cli.bad", "--sequence-key", "s1"), "sequence", ExitError},
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

// pulse topics breaker sets, shows and clears a topic's breaker; a missing
// setting is a usage error, a bad one the server's error naming the field.
func TestTopicBreakerCommands(t *testing.T) {
	t.Parallel()
	out := ok(t, ops("topics", "breaker", "cli.brk", "--failure-ratio", "0.5", "--window", "2m", "--min-volume", "20", "--cooldown", "30s")...)
	require.Regexp(t, `cli\.brk +closed +0\.5 +2m0s +20 +30s +0 +- +ops`, out)
	out = ok(t, prod("topics", "breakers")...)
	require.Regexp(t, `cli\.brk +closed`, out)

	r := pulse(t, "", ops("topics", "breaker", "cli.brk", "--failure-ratio", "0.5")...)
	require.Equal(t, ExitUsage, r.code, r.stderr)
	require.Contains(t, failLine(t, r), "--window")
	r = pulse(t, "", ops("topics", "breaker", "cli.brk", "--failure-ratio", "2", "--window", "1m", "--min-volume", "1", "--cooldown", "1s")...)
	require.Contains(t, failLine(t, r), "failure_ratio")
	r = pulse(t, "", prod("topics", "breaker", "cli.brk", "--clear")...)
	require.NotEqual(t, 0, r.code)

	out = ok(t, ops("topics", "breaker", "cli.brk", "--clear")...)
	require.Contains(t, out, "topic cli.brk: no breaker")
	r = pulse(t, "", ops("topics", "breaker", "cli.brk", "--clear")...)
	require.Contains(t, failLine(t, r), "not found")
}
