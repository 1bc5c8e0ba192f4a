package app

import (
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
)

// maxTopicLimit is the largest limit control-api takes; a larger one is a
// usage error caught before any request.
const maxTopicLimit = 1_000_000

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
	return cmd
}

func printTopics(w io.Writer, topics []pulsehttp.Topic) {
	fmt.Fprintln(w, "TOPIC\tPENDING\tRUNNING\tLIMIT\tRETRYING\tDEAD\tOLDEST\tPAUSED\tWORKERS\tDONE/1H\tFAILED/1H")
	for _, t := range topics {
		limit, oldest, paused := "-", "-", "-"
		if t.MaxRunning != nil {
			limit = strconv.Itoa(int(*t.MaxRunning))
		}
		if t.OldestPendingAge != nil {
			oldest = *t.OldestPendingAge
		}
		if t.Paused {
			paused = "PAUSED"
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%d\t%d\t%s\t%s\t%d\t%d\t%d\n", t.Topic, t.Pending, t.Running, limit,
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
