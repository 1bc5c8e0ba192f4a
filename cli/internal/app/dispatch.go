package app

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
)

// The JSON shapes are control-api's own (pkg/pulsehttp).
type (
	dispatchStatus = pulsehttp.DispatchState
	changeResult   = pulsehttp.ControlResult
)

func scopeName(topic string) string {
	if topic == "" {
		return "*"
	}
	return topic
}

func newDispatchCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dispatch",
		Short: "Pause, resume, drain and inspect job dispatch",
		Long: `Pause stops gateways from starting jobs (all topics, or one with --topic);
producers keep submitting. Mode drain lets running jobs finish; quiesce also
asks them to stop at their next checkpoint. See docs/pause.md.`,
		Example: `  pulse dispatch pause --reason "upgrade workers to v2.3" --for 2h
  pulse dispatch drain --wait --timeout 10m
  pulse dispatch status
  pulse dispatch resume
  pulse dispatch pause --topic email.send --reason "mail vendor down"`,
	}
	cmd.AddCommand(newPauseCmd(e), newResumeCmd(e), newStatusCmd(e), newEventsCmd(e), newDrainCmd(e))
	return cmd
}

// emitChange prints the answer raw to a pause or resume: as JSON, or as
// one line saying what changed (verb is the state asked for).
func (e *env) emitChange(raw []byte, verb string) error {
	return e.emit(raw, func(w io.Writer) error {
		var r changeResult
		if err := decode(raw, &r); err != nil {
			return err
		}
		printChange(w, verb, r)
		return nil
	})
}

func printChange(w io.Writer, verb string, r changeResult) {
	s := r.State
	if !r.Changed {
		fmt.Fprintf(w, "scope %s: already %s (no change)\n", s.Scope, verb)
		return
	}
	if s.Paused {
		until := ""
		if s.Until != nil {
			until = " until " + ts(s.Until)
		}
		fmt.Fprintf(w, "scope %s: paused (%s) by %s%s: %s\n", s.Scope, s.Mode, s.Actor, until, s.Reason)
		return
	}
	fmt.Fprintf(w, "scope %s: resumed by %s\n", s.Scope, dash(s.Actor))
}

func newPauseCmd(e *env) *cobra.Command {
	var reason, mode, topic, until string
	var forDur time.Duration
	cmd := &cobra.Command{
		Use:   "pause --reason REASON",
		Short: "Pause dispatch globally or for one topic (operator)",
		Long: `Pause dispatch. --reason is required (≤ 500 characters). --mode drain (default)
lets running jobs finish; quiesce also signals them to stop at a checkpoint.
--for or --until makes the pause expire on its own. Pausing an already paused
scope with the same settings changes nothing.`,
		Example: `  pulse dispatch pause --reason "upgrade workers to v2.3"
  pulse dispatch pause --reason "db failover" --mode quiesce --for 30m
  pulse dispatch pause --topic email.send --reason "mail vendor down" --until 2026-12-01T09:00:00Z`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.TrimSpace(reason) == "" {
				return usageErrorf("--reason is required: say why dispatch is paused")
			}
			switch mode {
			case "drain", "quiesce":
			default:
				return usageErrorf("--mode must be drain or quiesce, not %q", mode)
			}
			body := pulsehttp.Pause{Reason: reason, Mode: mode, Topic: topic, Until: until}
			if forDur != 0 {
				body.For = forDur.String()
			}
			raw, err := e.call(cmd, "POST", "/v1/dispatch/pause", nil, body)
			if err != nil {
				return err
			}
			return e.emitChange(raw, "paused")
		},
	}
	f := cmd.Flags()
	f.StringVar(&reason, "reason", "", "why (required; shown to everyone and audited)")
	f.StringVar(&mode, "mode", "drain", "drain or quiesce")
	f.StringVar(&topic, "topic", "", "pause only this topic (default: everything)")
	f.DurationVar(&forDur, "for", 0, "expire the pause after this long (e.g. 30m, 2h)")
	f.StringVar(&until, "until", "", "expire the pause at this RFC 3339 time")
	return cmd
}

func newResumeCmd(e *env) *cobra.Command {
	var topic string
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "Resume dispatch globally or for one topic (operator)",
		Example: `  pulse dispatch resume
  pulse dispatch resume --topic email.send`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := e.call(cmd, "POST", "/v1/dispatch/resume", nil, pulsehttp.Resume{Topic: topic})
			if err != nil {
				return err
			}
			return e.emitChange(raw, "running")
		},
	}
	cmd.Flags().StringVar(&topic, "topic", "", "resume only this topic (default: the global scope)")
	return cmd
}

func printStatus(w io.Writer, st dispatchStatus) {
	fmt.Fprintln(w, "SCOPE\tSTATE\tMODE\tREASON\tACTOR\tSINCE\tUNTIL\tQUEUED\tRUNNING\tDRAINED")
	for _, s := range st.Scopes {
		state, mode, reason, actor, since, until := "running", "-", "-", "-", "-", "-"
		if s.Paused {
			state, mode, reason, actor, since, until = "PAUSED", s.Mode, s.Reason, s.Actor, ts(s.PausedAt), ts(s.Until)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%t\n", s.Scope, state, mode, reason, actor, since, until, s.Queued, s.Running, s.Drained)
	}
}

func (e *env) dispatchStatus(cmd *cobra.Command) ([]byte, dispatchStatus, error) {
	var st dispatchStatus
	raw, err := e.call(cmd, "GET", "/v1/dispatch", nil, nil)
	if err != nil {
		return nil, st, err
	}
	return raw, st, decode(raw, &st)
}

func newStatusCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the pause state of every scope with queued and running counts",
		Example: `  pulse dispatch status
  pulse dispatch status -o json | jq '.scopes[] | select(.scope=="*") | .drained'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, st, err := e.dispatchStatus(cmd)
			if err != nil {
				return err
			}
			return e.emit(raw, func(w io.Writer) error {
				printStatus(w, st)
				return nil
			})
		},
	}
}

func newEventsCmd(e *env) *cobra.Command {
	var limit int
	var pageToken string
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Show the pause/resume audit log, newest first",
		Example: `  pulse dispatch events
  pulse dispatch events --limit 200 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := map[string]string{"page_token": pageToken}
			if limit != 0 {
				q["limit"] = strconv.Itoa(limit)
			}
			raw, err := e.call(cmd, "GET", "/v1/dispatch/events", q, nil)
			if err != nil {
				return err
			}
			return e.emit(raw, func(w io.Writer) error {
				var r pulsehttp.EventList
				if err := decode(raw, &r); err != nil {
					return err
				}
				fmt.Fprintln(w, "AT\tSCOPE\tACTION\tMODE\tACTOR\tUNTIL\tREASON")
				for _, ev := range r.Events {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ts(ev.At), ev.Scope, ev.Action, dash(ev.Mode), dash(ev.Actor), ts(ev.Until), dash(ev.Reason))
				}
				if r.NextPageToken != "" {
					fmt.Fprintf(w, "\nnext page: --page-token %s\n", r.NextPageToken)
				}
				return nil
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "most events per page, 1-500 (server default 50)")
	cmd.Flags().StringVar(&pageToken, "page-token", "", "next_page_token of the previous page")
	return cmd
}

func newDrainCmd(e *env) *cobra.Command {
	var wait bool
	var timeout, interval time.Duration
	var reason, mode, topic string
	cmd := &cobra.Command{
		Use:   "drain --wait",
		Short: "Pause (if not already) and wait until no job runs: the deploy gate",
		Long: `Pause dispatch for the scope (global, or --topic) unless it is already paused,
then poll GET /v1/dispatch every --interval, printing the running and queued
counts per scope, until the scope's running count reaches 0.

Exit codes: 0 when nothing runs any more (safe to upgrade); 3 when jobs are
still running at --timeout (the pause stays in place); 1 on an API error
(for example a producer credential, which may not pause); 2 on bad flags.`,
		Example: `  pulse dispatch drain --wait --timeout 10m --reason "deploy v2.3"
  pulse dispatch drain --wait --topic video.transcode --timeout 1h
  # upgrade script:
  pulse dispatch drain --wait --timeout 15m || exit $?
  ./upgrade-workers.sh
  pulse dispatch resume`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !wait {
				return usageErrorf("drain needs --wait (it blocks until the running count reaches 0)")
			}
			if interval <= 0 {
				return usageErrorf("--interval must be positive")
			}
			name := scopeName(topic)
			_, st, err := e.dispatchStatus(cmd)
			if err != nil {
				return err
			}
			if !scopePaused(st, topic) {
				body := pulsehttp.Pause{Reason: reason, Mode: mode, Topic: topic}
				if _, err := e.call(cmd, "POST", "/v1/dispatch/pause", nil, body); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "paused scope %s (%s): %s\n", name, mode, reason)
			} else {
				fmt.Fprintf(e.stdout, "scope %s already paused\n", name)
			}
			deadline := time.Now().Add(timeout)
			for {
				_, st, err := e.dispatchStatus(cmd)
				if err != nil {
					return err
				}
				running, found := int64(0), false
				var parts []string
				for _, s := range st.Scopes {
					parts = append(parts, fmt.Sprintf("%s running=%d queued=%d", s.Scope, s.Running, s.Queued))
					if s.Scope == name {
						running, found = s.Running, true
					}
				}
				fmt.Fprintf(e.stdout, "%s  %s\n", time.Now().UTC().Format(time.RFC3339), strings.Join(parts, "; "))
				if found && running == 0 {
					fmt.Fprintf(e.stdout, "drained: nothing running in scope %s, safe to upgrade\n", name)
					return nil
				}
				if !time.Now().Before(deadline) {
					return &exitError{code: ExitDrainTimeout, err: fmt.Errorf("drain timed out after %s: %d job(s) still running in scope %s (dispatch stays paused)", timeout, running, name)}
				}
				sleep := min(interval, time.Until(deadline))
				select {
				case <-cmd.Context().Done():
					return errors.New("interrupted while draining (dispatch stays paused)")
				case <-time.After(sleep):
				}
			}
		},
	}
	f := cmd.Flags()
	f.BoolVar(&wait, "wait", false, "block until the running count reaches 0 (required)")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "give up (exit 3) after this long")
	f.DurationVar(&interval, "interval", 2*time.Second, "how often to poll")
	f.StringVar(&reason, "reason", "drain for deploy (pulse dispatch drain)", "pause reason when the scope is not paused yet")
	f.StringVar(&mode, "mode", "drain", "pause mode when the scope is not paused yet: drain or quiesce")
	f.StringVar(&topic, "topic", "", "drain only this topic (default: everything)")
	return cmd
}

func scopePaused(st dispatchStatus, topic string) bool {
	name := scopeName(topic)
	for _, s := range st.Scopes {
		if s.Scope == name {
			return s.Paused
		}
	}
	return false
}
