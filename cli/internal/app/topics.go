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
	return cmd
}

func printTopics(w io.Writer, topics []pulsehttp.Topic) {
	fmt.Fprintln(w, "TOPIC\tPENDING\tRUNNING\tLIMIT\tRATE\tRETRYING\tDEAD\tOLDEST\tPAUSED\tWORKERS\tDONE/1H\tFAILED/1H")
	for _, t := range topics {
		limit, rate, oldest, paused := "-", "-", "-", "-"
		if t.MaxRunning != nil {
			limit = strconv.Itoa(int(*t.MaxRunning))
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
