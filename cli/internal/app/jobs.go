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

var jobStatuses = []string{"PENDING", "RUNNING", "RETRYING", "COMPLETED", "DEAD_LETTERED", "CANCELED"}

// The JSON shapes are control-api's own (pkg/pulsehttp): a job as GET
// /v1/jobs/{id} shows it, with why it waits, and a page of jobs.
type (
	job     = pulsehttp.JobWithWait
	jobList = pulsehttp.JobList
)

func ts(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newJobsCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List, inspect, cancel and retry jobs",
		Example: `  pulse jobs list --topic email.send --status PENDING
  pulse jobs get 0190c8a4-...
  pulse jobs cancel 0190c8a4-...
  pulse jobs retry 0190c8a4-...`,
	}
	cmd.AddCommand(newJobsListCmd(e), newJobsGetCmd(e), newJobActionCmd(e, "cancel",
		"Cancel a PENDING, RETRYING or RUNNING job (operator)"), newJobActionCmd(e, "retry",
		"Send a DEAD_LETTERED or CANCELED job back to PENDING with a fresh attempt budget (operator)"))
	return cmd
}

func newJobsListCmd(e *env) *cobra.Command {
	var topic, status, pageToken, tag string
	var limit int
	var includeArgs bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List jobs, newest first",
		Long: "List jobs, newest first, filtered by topic, status (" + strings.Join(jobStatuses, ", ") + `) and tag.
When more jobs match than --limit, the table ends with the token for the next
page (json: next_page_token); pass it back with --page-token. Jobs are listed
without their args unless --include-args (json: args); a page also ends early,
with a next page token, once its jobs' error histories and args reach 4 MiB.`,
		Example: `  pulse jobs list
  pulse jobs list --topic email.send --status dead_lettered --limit 20
  pulse jobs list --tag tenant=acme
  pulse jobs list --page-token "$(pulse jobs list -o json | jq -r .next_page_token)"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := map[string]string{"topic": topic, "page_token": pageToken, "tag": tag}
			if status != "" {
				q["status"] = strings.ToUpper(status)
			}
			if limit != 0 {
				q["limit"] = strconv.Itoa(limit)
			}
			if includeArgs {
				q["include"] = "args"
			}
			raw, err := e.call(cmd, "GET", "/v1/jobs", q, nil)
			if err != nil {
				return err
			}
			return e.emit(raw, func(w io.Writer) error {
				var l jobList
				if err := decode(raw, &l); err != nil {
					return err
				}
				printJobTable(w, l)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&topic, "topic", "", "only jobs of this topic")
	f.StringVar(&status, "status", "", "only jobs in this status: "+strings.Join(jobStatuses, ", "))
	f.IntVar(&limit, "limit", 0, "most jobs per page (server default when 0)")
	f.StringVar(&pageToken, "page-token", "", "next_page_token of the previous page")
	f.BoolVar(&includeArgs, "include-args", false, "list the jobs with their args (-o json)")
	f.StringVar(&tag, "tag", "", "only jobs carrying this tag")
	return cmd
}

func printJobTable(w io.Writer, l jobList) {
	fmt.Fprintln(w, "ID\tTOPIC\tSTATUS\tPRIORITY\tATTEMPTS\tSUBMITTED")
	for _, j := range l.Jobs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d/%d\t%s\n", j.ID, j.Topic, j.Status, j.Priority, j.Attempts-j.Snoozes, j.MaxAttempts, ts(j.SubmittedAt))
	}
	if l.NextPageToken != "" {
		fmt.Fprintf(w, "\nnext page: --page-token %s\n", l.NextPageToken)
	}
}

func printJob(w io.Writer, j job) {
	fmt.Fprintf(w, "ID:\t%s\n", j.ID)
	fmt.Fprintf(w, "Topic:\t%s\n", j.Topic)
	fmt.Fprintf(w, "Status:\t%s\n", j.Status)
	fmt.Fprintf(w, "Priority:\t%d\n", j.Priority)
	fmt.Fprintf(w, "Attempts:\t%d of %d\n", j.Attempts-j.Snoozes, j.MaxAttempts)
	if j.Snoozes > 0 {
		fmt.Fprintf(w, "Snoozed:\t%d times (claims that spent no attempt)\n", j.Snoozes)
	}
	fmt.Fprintf(w, "Args:\t%s\n", string(j.Args))
	fmt.Fprintf(w, "Submitted:\t%s\n", ts(j.SubmittedAt))
	fmt.Fprintf(w, "Next run:\t%s\n", ts(j.NextRunAt))
	fmt.Fprintf(w, "Started:\t%s\n", ts(j.StartedAt))
	fmt.Fprintf(w, "Finished:\t%s\n", ts(j.FinishedAt))
	if j.LockedBy != "" {
		fmt.Fprintf(w, "Locked by:\t%s (lease until %s)\n", j.LockedBy, ts(j.LeaseUntil))
	}
	if j.IdempotencyKey != "" {
		fmt.Fprintf(w, "Idempotency key:\t%s\n", j.IdempotencyKey)
	}
	if j.Timeout != nil {
		fmt.Fprintf(w, "Timeout:\t%s per attempt\n", *j.Timeout)
	}
	if r := j.Retry; r != nil {
		fmt.Fprintf(w, "Retry backoff:\t%s\n", retryText(r))
	}
	if j.ScheduleID != "" {
		fmt.Fprintf(w, "Schedule:\t%s\n", j.ScheduleID)
	}
	if j.Traceparent != "" {
		fmt.Fprintf(w, "Traceparent:\t%s\n", j.Traceparent)
	}
	if wt := j.Waiting; wt != nil {
		why := wt.Reason
		switch wt.Reason {
		case "paused":
			if p := wt.PausedBy; p != nil {
				why = fmt.Sprintf("paused (scope %s, %s) by %s since %s: %s", p.Scope, p.Mode, p.Actor, ts(p.PausedAt), p.Reason)
			}
		case "scheduled", "retry_backoff", "snoozed", "breaker_open", "rate_limited":
			why = fmt.Sprintf("%s until %s", wt.Reason, ts(wt.NotBefore))
		case "queued":
			more := ""
			if wt.AheadAtLeast {
				more = " at least"
			}
			why = fmt.Sprintf("queued behind%s %d job(s) of its topic", more, wt.Ahead)
		case "no_worker":
			if wt.WorkerLastSeen == nil || wt.WorkerLastSeen.At == nil {
				why = "no worker serves its topic, and none ever has"
			} else {
				why = "no worker serves its topic; one was last connected at " + ts(wt.WorkerLastSeen.At)
			}
		}
		fmt.Fprintf(w, "Waiting:\t%s\n", why)
	}
	if len(j.Errors) > 0 {
		fmt.Fprintln(w, "Errors:")
		for _, er := range j.Errors {
			fmt.Fprintf(w, "  attempt %d\t%s\t%s\t%s\n", er.Attempt, ts(er.At), dash(er.Worker), er.Error)
		}
	}
}

func newJobsGetCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show one job with its error history and why it is not running",
		Example: `  pulse jobs get 0190c8a4-7a51-7c3e-9d43-1f2a3b4c5d6e
  pulse jobs get 0190c8a4-7a51-7c3e-9d43-1f2a3b4c5d6e -o json | jq .waiting`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := e.call(cmd, "GET", "/v1/jobs/"+url.PathEscape(args[0]), nil, nil)
			if err != nil {
				return err
			}
			return e.emit(raw, func(w io.Writer) error {
				var j job
				if err := decode(raw, &j); err != nil {
					return err
				}
				printJob(w, j)
				return nil
			})
		},
	}
}

func newJobActionCmd(e *env, action, short string) *cobra.Command {
	return &cobra.Command{
		Use:     action + " ID",
		Short:   short,
		Example: fmt.Sprintf("  pulse jobs %s 0190c8a4-7a51-7c3e-9d43-1f2a3b4c5d6e", action),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := e.call(cmd, "POST", "/v1/jobs/"+url.PathEscape(args[0])+"/"+action, nil, struct{}{})
			if err != nil {
				return err
			}
			return e.emit(raw, func(w io.Writer) error {
				var j job
				if decode(raw, &j) != nil || j.ID == "" {
					fmt.Fprintf(w, "%s: %s done\n", args[0], action)
					return nil //nolint:nilerr // an answer that is not a job still means the action succeeded
				}
				fmt.Fprintf(w, "%s\t%s\n", j.ID, j.Status)
				return nil
			})
		},
	}
}

func newSubmitCmd(e *env) *cobra.Command {
	var argsJSON, at, key, replaceKey, replaceMode, onParentFailure, rateKey, concurrencyKey, sequenceKey string
	var priority, maxAttempts int
	var timeout, uniqueFor, retryBase, retryMax, retryFixed time.Duration
	var tags, dependsOn []string
	cmd := &cobra.Command{
		Use:   "submit TOPIC",
		Short: "Submit one job",
		Long: `Submit one job to TOPIC. --args is a JSON object; priority is 0-10 (higher
first, server default 5); max attempts 1-100 (server default 25); --at delays
the first run to an RFC 3339 time. --timeout (1s-24h) bounds each attempt: one
that runs longer fails "timed out after ..." and is retried. With
--idempotency-key a second submit while the first job is live returns that
job (marked duplicate); with --unique-for (1s-366d) a second submit of the
same topic and args within that period returns the first job, whatever its
status (marked duplicate). The job's own backoff between attempts (1ms-366d,
default the server's retry policy): --retry-base with an optional
--retry-max, exponential with jitter, or --retry-fixed, the same wait every
time. --tag (repeatable) labels the job for listings (pulse jobs list --tag).
--replace-key debounces: while a job of TOPIC submitted with the same key is
pending and has never started, the submit changes that job instead of adding
one, as --replace-mode says (replace: its args and run time; keep_earlier_run_at:
its args, and the earlier run time; keep_first: nothing) and prints its id
(marked replaced, or duplicate for keep_first).
--depends-on (job ids, comma-separated or repeated) makes the job wait until
each of those jobs is finished; when one is dead-lettered or canceled the job
is canceled, or, with --on-parent-failure run, runs anyway.
Prints the new job's id (json: {"id","duplicate","replaced"}).`,
		Example: `  pulse submit email.send --args '{"to":"a@example.com"}'
  pulse submit report.build --args '{}' --priority 9 --max-attempts 3 --timeout 5m
  pulse submit invoice.send --args '{"n":42}' --at 2026-12-01T09:00:00Z --idempotency-key invoice-42
  pulse submit stats.refresh --args '{"shop":7}' --unique-for 1h
  pulse submit webhook.deliver --args '{"id":9}' --retry-base 2s --retry-max 10m
  pulse submit sync.pull --args '{}' --retry-fixed 30s
  pulse submit import.csv --args '{"file":"a.csv"}' --tag tenant=acme --tag batch-7
  pulse submit search.reindex --args '{"doc":7}' --at 2026-12-01T09:00:30Z --replace-key doc-7
  pulse submit report.send --depends-on 01a219e2-71b5-71b3-83f5-25ae32f812f3 --on-parent-failure run`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := parseArgsFlag("args", argsJSON)
			if err != nil {
				return err
			}
			body := pulsehttp.JobSpec{Topic: args[0], Args: a, MaxAttempts: int32(maxAttempts), IdempotencyKey: key}
			if cmd.Flags().Changed("priority") {
				p := int32(priority)
				body.Priority = &p
			}
			if at != "" {
				if _, err := time.Parse(time.RFC3339, at); err != nil {
					return usageErrorf("--at must be an RFC 3339 time like 2026-12-01T09:00:00Z, got %q", at)
				}
				body.RunAt = &at
			}
			if cmd.Flags().Changed("timeout") {
				body.Timeout = timeout.String()
			}
			if cmd.Flags().Changed("unique-for") {
				body.UniqueFor = uniqueFor.String()
			}
			body.Retry = retryFlags(cmd, retryBase, retryMax, retryFixed)
			body.Tags = tags
			body.ReplaceKey, body.ReplaceMode = replaceKey, replaceMode
			if onParentFailure != "" && len(dependsOn) == 0 {
				return usageErrorf("--on-parent-failure needs --depends-on")
			}
			for _, id := range dependsOn {
				body.DependsOn = append(body.DependsOn, pulsehttp.Dependency{Job: id, OnParentFailure: onParentFailure})
			}
			body.RateKey = rateKey
			body.ConcurrencyKey = concurrencyKey
			body.SequenceKey = sequenceKey
			raw, err := e.call(cmd, "POST", "/v1/jobs", nil, body)
			if err != nil {
				return err
			}
			return e.emit(raw, func(w io.Writer) error {
				var r pulsehttp.SubmitResult
				if err := decode(raw, &r); err != nil {
					return err
				}
				switch {
				case r.Replaced:
					fmt.Fprintf(w, "%s\t(replaced: the pending job of this --replace-key took these args and run time)\n", r.ID)
				case r.Duplicate && replaceKey != "":
					fmt.Fprintf(w, "%s\t(duplicate: the pending job of this --replace-key was kept)\n", r.ID)
				case r.Duplicate:
					fmt.Fprintf(w, "%s\t(duplicate: an existing job has this idempotency key, or this topic and args within --unique-for)\n", r.ID)
				default:
					fmt.Fprintln(w, r.ID)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&argsJSON, "args", "{}", "job arguments, a JSON object")
	f.IntVar(&priority, "priority", 5, "0-10, higher runs first")
	f.IntVar(&maxAttempts, "max-attempts", 0, "1-100 attempts before dead-lettering (server default 25)")
	f.StringVar(&at, "at", "", "first run time, RFC 3339")
	f.StringVar(&key, "idempotency-key", "", "deduplicates submits among live jobs (≤ 255 bytes)")
	f.DurationVar(&timeout, "timeout", 0, "how long one attempt may run, 1s-24h (default none)")
	f.DurationVar(&uniqueFor, "unique-for", 0, "one job per topic and args for this long, 1s-366d (default not unique)")
	f.DurationVar(&retryBase, "retry-base", 0, "exponential backoff: the first retry's wait, doubling per attempt, 1ms-366d")
	f.DurationVar(&retryMax, "retry-max", 0, "exponential backoff: the longest wait (default the server policy's cap)")
	f.DurationVar(&retryFixed, "retry-fixed", 0, "fixed backoff: every retry waits this long, 1ms-366d")
	f.StringArrayVar(&tags, "tag", nil, "a tag for listings to filter by (repeatable; letters, digits, . _ : = / -)")
	f.StringVar(&replaceKey, "replace-key", "", "replace the key's pending, never-started job of TOPIC instead of adding one (≤ 255 bytes)")
	f.StringVar(&replaceMode, "replace-mode", "", "with --replace-key: replace (default), keep_earlier_run_at or keep_first")
	f.StringSliceVar(&dependsOn, "depends-on", nil, "job ids this job waits for (comma-separated or repeated)")
	f.StringVar(&onParentFailure, "on-parent-failure", "", "with --depends-on: cancel (default) or run, when a parent is dead-lettered or canceled")
	f.StringVar(&rateKey, "rate-key", "", "the key TOPIC's rate limit counts this job under, when it is per job key (≤ 255 bytes)")
	f.StringVar(&concurrencyKey, "concurrency-key", "", "the key TOPIC's per-key limit counts this job under while it runs (≤ 255 bytes)")
	f.StringVar(&sequenceKey, "sequence-key", "", "start this job only after TOPIC's earlier jobs with this key finish, in submit order (≤ 255 bytes)")
	return cmd
}

// retryFlags is the job's retry policy from the --retry-* flags given;
// nil when none is. The server checks the form and ranges, naming
// retry.base, retry.max or retry.fixed.
func retryFlags(cmd *cobra.Command, base, maxDelay, fixed time.Duration) *pulsehttp.RetryPolicy {
	var p pulsehttp.RetryPolicy
	set := false
	for _, f := range []struct {
		name string
		d    time.Duration
		dst  *string
	}{{"retry-base", base, &p.Base}, {"retry-max", maxDelay, &p.Max}, {"retry-fixed", fixed, &p.Fixed}} {
		if cmd.Flags().Changed(f.name) {
			*f.dst, set = f.d.String(), true
		}
	}
	if !set {
		return nil
	}
	return &p
}

// retryText says a job's own backoff in words.
func retryText(r *pulsehttp.RetryPolicy) string {
	if r.Fixed != "" {
		return r.Fixed + " between attempts"
	}
	limit := "the server policy's cap"
	if r.Max != "" {
		limit = r.Max
	}
	return r.Base + " doubling per attempt, at most " + limit + ", jittered"
}
