package app

import (
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
)

// maxTopicLimit is the largest limit control-api takes; a larger one is a
// usage error caught before any request.
const maxTopicLimit = 1_000_000

// maxRateLimit is the most starts per interval control-api takes
// (pulsetype.MaxRateLimit).
const maxRateLimit = 10_000

// maxRunningPerKey is the largest per-key cap control-api takes
// (pulsetype.MaxRunningPerKey).
const maxRunningPerKey = 1_000_000

func newTopicsCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topics",
		Short: "List topics with their counts, limits and workers",
		Long: `List every topic that has live or dead-lettered jobs, a limit, a pause, a
connected worker or throughput in the last hour: its pending, running,
retrying and dead-lettered jobs, the oldest due job's wait, its fleet-wide
limit on running jobs, whether it is paused, its connected workers, and the
attempts completed and failed in the last hour. See docs/topics.md.`,
		Example: `  pulse topics
  pulse topics -o json | jq '.topics[] | select(.max_running != null)'
  pulse topics limit email.send 20`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := e.call(cmd, "GET", "/v1/topics", nil, nil)
			if err != nil {
				return err
			}
			return e.emit(raw, func(w io.Writer) error {
				var r pulsehttp.TopicList
				if err := decode(raw, &r); err != nil {
					return err
				}
				printTopics(w, r.Topics)
				return nil
			})
		},
	}
	cmd.AddCommand(newTopicLimitCmd(e))
	cmd.AddCommand(newTopicRateLimitCmd(e))
	cmd.AddCommand(newTopicBreakerCmd(e), newTopicBreakersCmd(e))
	cmd.AddCommand(newTopicKeyLimitsCmd(e))
	return cmd
}

func printTopics(w io.Writer, topics []pulsehttp.Topic) {
	fmt.Fprintln(w, "TOPIC\tPENDING\tRUNNING\tLIMIT\tRATE\tRETRYING\tDEAD\tOLDEST\tPAUSED\tWORKERS\tDONE/1H\tFAILED/1H")
	for _, t := range topics {
		limit, rate, oldest, paused := "-", "-", "-", "-"
		if t.MaxRunning != nil {
			limit = strconv.Itoa(int(*t.MaxRunning))
		}
		if t.MaxRunningPerKey != nil {
			perKey := strconv.Itoa(int(*t.MaxRunningPerKey)) + "/key"
			if t.MaxRunning != nil {
				limit += " " + perKey
			} else {
				limit = perKey
			}
		}
		if t.RateLimit != nil {
			rate = rateText(*t.RateLimit)
		}
		if t.OldestPendingAge != nil {
			oldest = *t.OldestPendingAge
		}
		if t.Paused {
			paused = "PAUSED"
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%d\t%d\t%s\t%s\t%d\t%d\t%d\n", t.Topic, t.Pending, t.Running, limit, rate,
			t.Retrying, t.DeadLettered, oldest, paused, t.ConnectedWorkers, t.CompletedLastHour, t.FailedLastHour)
	}
}

func newTopicLimitCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "limit TOPIC N|none",
		Short: "Set or clear a topic's fleet-wide limit on running jobs (operator)",
		Long: `Set how many jobs of TOPIC may run at once across every gateway, 0 to
1000000 (0 starts nothing), or none to clear the limit. It holds from the next
claim on every gateway; lowering it below what runs stops nothing, the topic
starts nothing until its running jobs fall below the limit.`,
		Example: `  pulse topics limit email.send 20
  pulse topics limit reports.build 0
  pulse topics limit email.send none`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic, value := args[0], args[1]
			var body pulsehttp.TopicLimit
			if !strings.EqualFold(value, "none") {
				n, err := strconv.ParseInt(value, 10, 64)
				if err != nil || n < 0 || n > maxTopicLimit {
					return usageErrorf("the limit must be a whole number from 0 to %d, or none, not %q", maxTopicLimit, value)
				}
				body.MaxRunning = &n
			}
			raw, err := e.call(cmd, "PUT", "/v1/topics/"+url.PathEscape(topic), nil, body)
			if err != nil {
				return err
			}
			return e.emit(raw, func(w io.Writer) error {
				var t pulsehttp.Topic
				if err := decode(raw, &t); err != nil {
					return err
				}
				if t.MaxRunning == nil {
					fmt.Fprintf(w, "topic %s: no limit (%d running)\n", t.Topic, t.Running)
					return nil
				}
				fmt.Fprintf(w, "topic %s: at most %d running, set by %s (%d running now)\n", t.Topic, *t.MaxRunning, dash(t.LimitUpdatedBy), t.Running)
				return nil
			})
		},
	}
}

// rateText shows a rate limit as "10/1s", with the key source when it is
// not the topic as a whole: "10/1s per job", "10/1s per args:tenant".
func rateText(rl pulsehttp.RateLimit) string {
	if rl.RateLimit == nil {
		return "-"
	}
	s := fmt.Sprintf("%d/%s", *rl.RateLimit, rl.RateInterval)
	if rl.RateKey != "" && rl.RateKey != "none" {
		s += " per " + rl.RateKey
	}
	return s
}

func newTopicRateLimitCmd(e *env) *cobra.Command {
	var key string
	cmd := &cobra.Command{
		Use:   "rate-limit TOPIC N/INTERVAL|none",
		Short: "Set or clear a topic's fleet-wide rate limit on starts (operator)",
		Long: `Let at most N jobs of TOPIC start in any INTERVAL (a duration: 1s, 1m, 1h),
across every gateway, or none to clear the rate limit. N is 1 to 10000,
INTERVAL 1ms to 24h. --key says what the limit counts by: none (the topic as
a whole, the default), job (each job's --rate-key) or args:FIELD (the value of
a top-level args field, taken when the job is submitted). It holds from the
next claim on every gateway; starts already made in the window count.`,
		Example: `  pulse topics rate-limit email.send 10/1s
  pulse topics rate-limit api.call 100/1m --key args:tenant
  pulse topics rate-limit email.send none`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic, value := args[0], args[1]
			var body pulsehttp.RateLimit
			if !strings.EqualFold(value, "none") {
				n, every, ok := strings.Cut(value, "/")
				limit, err := strconv.ParseInt(n, 10, 64)
				if !ok || err != nil || limit < 1 || limit > maxRateLimit {
					return usageErrorf("the rate must be N/INTERVAL with N from 1 to %d, like 10/1s, or none, not %q", maxRateLimit, value)
				}
				if _, err := time.ParseDuration(every); err != nil {
					return usageErrorf("the rate's interval must be a duration like 1s or 1m, not %q", every)
				}
				body = pulsehttp.RateLimit{RateLimit: &limit, RateInterval: every, RateKey: key}
			} else if cmd.Flags().Changed("key") {
				return usageErrorf("--key goes with a rate, not with none")
			}
			raw, err := e.call(cmd, "PUT", "/v1/topics/"+url.PathEscape(topic)+"/rate-limit", nil, body)
			if err != nil {
				return err
			}
			return e.emit(raw, func(w io.Writer) error {
				var t pulsehttp.Topic
				if err := decode(raw, &t); err != nil {
					return err
				}
				if t.RateLimit == nil {
					fmt.Fprintf(w, "topic %s: no rate limit\n", t.Topic)
					return nil
				}
				fmt.Fprintf(w, "topic %s: at most %s, set by %s\n", t.Topic, rateText(*t.RateLimit), dash(t.LimitUpdatedBy))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&key, "key", "none", "what the limit counts by: none, job or args:FIELD")
	return cmd
}

func newTopicBreakerCmd(e *env) *cobra.Command {
	var ratio float64
	var minVolume int64
	var window, cooldown time.Duration
	var clearIt bool
	cmd := &cobra.Command{
		Use:   "breaker TOPIC",
		Short: "Set or clear a topic's circuit breaker (operator)",
		Long: `Set TOPIC's circuit breaker: when, of at least --min-volume attempts settled
within --window (whole minutes, 1m-24h), the failed share reaches
--failure-ratio (above 0, at most 1), the breaker pauses the topic (actor
breaker) for --cooldown (1s-24h); then it lets one attempt at a time through:
a completion closes it, a failure opens it again. Resuming the topic
(pulse dispatch resume --topic) overrides it. --clear removes the breaker,
resuming its pause first. See docs/flow-control.md.`,
		Example: `  pulse topics breaker payments.charge --failure-ratio 0.5 --window 1m --min-volume 20 --cooldown 30s
  pulse topics breaker payments.charge --clear`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := "/v1/topics/" + url.PathEscape(args[0]) + "/breaker"
			if clearIt {
				for _, f := range []string{"failure-ratio", "window", "min-volume", "cooldown"} {
					if cmd.Flags().Changed(f) {
						return usageErrorf("--clear takes no --%s", f)
					}
				}
				if _, err := e.call(cmd, "DELETE", path, nil, nil); err != nil {
					return err
				}
				return e.emit([]byte(`{"cleared":true}`), func(w io.Writer) error {
					fmt.Fprintf(w, "topic %s: no breaker\n", args[0])
					return nil
				})
			}
			for _, f := range []string{"failure-ratio", "window", "min-volume", "cooldown"} {
				if !cmd.Flags().Changed(f) {
					return usageErrorf("--%s is required (or --clear)", f)
				}
			}
			body := pulsehttp.TopicBreakerSettings{FailureRatio: &ratio, MinVolume: &minVolume,
				Window: window.String(), Cooldown: cooldown.String()}
			raw, err := e.call(cmd, "PUT", path, nil, body)
			if err != nil {
				return err
			}
			return e.emit(raw, func(w io.Writer) error {
				var b pulsehttp.TopicBreaker
				if err := decode(raw, &b); err != nil {
					return err
				}
				printBreakers(w, []pulsehttp.TopicBreaker{b})
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.Float64Var(&ratio, "failure-ratio", 0, "open at this failed share of the window's attempts, above 0 and at most 1")
	f.DurationVar(&window, "window", 0, "the attempts judged: those settled within this, whole minutes, 1m-24h")
	f.Int64Var(&minVolume, "min-volume", 0, "judge only when the window holds at least this many attempts, 1-1000000")
	f.DurationVar(&cooldown, "cooldown", 0, "how long the breaker keeps the topic paused, 1s-24h")
	f.BoolVar(&clearIt, "clear", false, "remove the topic's breaker")
	return cmd
}

func newTopicBreakersCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "breakers",
		Short: "List every topic's circuit breaker and its state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := e.call(cmd, "GET", "/v1/breakers", nil, nil)
			if err != nil {
				return err
			}
			return e.emit(raw, func(w io.Writer) error {
				var r pulsehttp.TopicBreakerList
				if err := decode(raw, &r); err != nil {
					return err
				}
				printBreakers(w, r.Breakers)
				return nil
			})
		},
	}
}

func printBreakers(w io.Writer, bs []pulsehttp.TopicBreaker) {
	fmt.Fprintln(w, "TOPIC\tSTATE\tRATIO\tWINDOW\tMIN\tCOOLDOWN\tOPENS\tOPEN UNTIL\tSET BY")
	for _, b := range bs {
		until := "-"
		if b.OpenUntil != nil && b.State == "open" {
			until = ts(b.OpenUntil)
		}
		fmt.Fprintf(w, "%s\t%s\t%g\t%s\t%d\t%s\t%d\t%s\t%s\n", b.Topic, b.State, b.FailureRatio, b.Window, b.MinVolume,
			b.Cooldown, b.Opens, until, dash(b.UpdatedBy))
	}
}

func newTopicKeyLimitsCmd(e *env) *cobra.Command {
	var perKey, sequence string
	cmd := &cobra.Command{
		Use:   "key-limits TOPIC",
		Short: "Set or clear a topic's per-key limits: running per concurrency key, and sequences (operator)",
		Long: `Set TOPIC's per-key limits as a whole (docs/flow-control.md). --per-key N lets
at most N jobs with one concurrency key (pulse submit --concurrency-key) run at
once across every gateway, 1 to 1000000, and the claims serve the keys
round-robin, so one key's backlog never starves another's. --sequence block or
continue lets TOPIC take sequenced jobs (pulse submit --sequence-key): jobs
with one sequence key start one at a time in submit order, and a dead-lettered
one holds the ones after it until it is retried (block) or not (continue). A
flag left out, or none, clears that limit. It holds from the next claim on
every gateway. Refused on a topic with a rate limit; clearing --sequence is
refused while sequenced jobs of TOPIC are queued or running.`,
		Example: `  pulse topics key-limits reports.build --per-key 2
  pulse topics key-limits orders.apply --sequence block
  pulse topics key-limits reports.build --per-key none --sequence none`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("per-key") && !cmd.Flags().Changed("sequence") {
				return usageErrorf("--per-key or --sequence is required (none clears it)")
			}
			var body pulsehttp.TopicKeyLimits
			if cmd.Flags().Changed("per-key") && !strings.EqualFold(perKey, "none") {
				n, err := strconv.ParseInt(perKey, 10, 64)
				if err != nil || n < 1 || n > maxRunningPerKey {
					return usageErrorf("--per-key must be a whole number from 1 to %d, or none, not %q", maxRunningPerKey, perKey)
				}
				body.MaxRunningPerKey = &n
			}
			switch {
			case strings.EqualFold(sequence, "none") || sequence == "":
			case sequence == "block" || sequence == "continue":
				body.SequenceOnFailure = sequence
			default:
				return usageErrorf("--sequence must be block, continue or none, not %q", sequence)
			}
			raw, err := e.call(cmd, "PUT", "/v1/topics/"+url.PathEscape(args[0])+"/key-limits", nil, body)
			if err != nil {
				return err
			}
			return e.emit(raw, func(w io.Writer) error {
				var t pulsehttp.Topic
				if err := decode(raw, &t); err != nil {
					return err
				}
				capText, seq := "no per-key limit", "no sequences"
				if t.MaxRunningPerKey != nil {
					capText = fmt.Sprintf("at most %d running per concurrency key", *t.MaxRunningPerKey)
				}
				if t.SequenceOnFailure != "" {
					seq = "sequences (" + t.SequenceOnFailure + " on failure)"
				}
				fmt.Fprintf(w, "topic %s: %s, %s, set by %s\n", t.Topic, capText, seq, dash(t.LimitUpdatedBy))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&perKey, "per-key", "", "at most this many running per concurrency key, 1-1000000, or none")
	cmd.Flags().StringVar(&sequence, "sequence", "", "the sequence policy: block, continue or none")
	return cmd
}
