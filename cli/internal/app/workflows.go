package app

import (
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
)

// workflowStatuses are the statuses `pulse workflow list --status` takes.
var workflowStatuses = []string{"running", "failed", "canceled", "done"}

func newWorkflowCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "workflow",
		Aliases: []string{"workflows"},
		Short:   "Inspect, list, cancel and retry workflows",
		Long: `A workflow is the jobs one batch submit sent with dependencies between them;
its id is the id of its first job. Its status is derived from its jobs:
running while any job is pending, running or retrying; then failed if a job
was dead-lettered, canceled if a job was canceled, done when every job
completed. See docs/workflows.md.`,
		Example: `  pulse workflow list --status failed
  pulse workflow get 0190c8a4-...
  pulse workflow retry 0190c8a4-...
  pulse workflow cancel 0190c8a4-...`,
	}
	cmd.AddCommand(newWorkflowGetCmd(e), newWorkflowListCmd(e),
		newWorkflowActionCmd(e, "cancel", "Cancel every pending, retrying and running job of a workflow, in one statement (operator)"),
		newWorkflowActionCmd(e, "retry", "Retry a workflow from its failed step: its dead-lettered and canceled jobs, each waiting again for its unfinished parents (operator)"))
	return cmd
}

func newWorkflowGetCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show a workflow's status, its jobs by status and the step it failed at",
		Example: `  pulse workflow get 0190c8a4-7a51-7c3e-9d43-1f2a3b4c5d6e
  pulse workflow get 0190c8a4-7a51-7c3e-9d43-1f2a3b4c5d6e -o json | jq .failed_step`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := e.call(cmd, "GET", "/v1/workflows/"+url.PathEscape(args[0]), nil, nil)
			if err != nil {
				return err
			}
			return e.emit(raw, func(w io.Writer) error {
				var wf pulsehttp.Workflow
				if err := decode(raw, &wf); err != nil {
					return err
				}
				printWorkflow(w, wf)
				return nil
			})
		},
	}
}

func printWorkflow(w io.Writer, wf pulsehttp.Workflow) {
	fmt.Fprintf(w, "ID:\t%s\n", wf.ID)
	fmt.Fprintf(w, "Status:\t%s\n", workflowStatusText(wf))
	fmt.Fprintf(w, "First job's topic:\t%s\n", dash(wf.Topic))
	fmt.Fprintf(w, "Submitted:\t%s\n", ts(wf.SubmittedAt))
	fmt.Fprintf(w, "Finished:\t%s\n", ts(wf.FinishedAt))
	if c := wf.Counts; c != nil {
		fmt.Fprintf(w, "Jobs:\t%d: %d pending (%d waiting for parents), %d running, %d retrying, %d completed, %d dead-lettered, %d canceled\n",
			c.Total, c.Pending, c.Blocked, c.Running, c.Retrying, c.Completed, c.DeadLettered, c.Canceled)
	}
	if st := wf.FailedStep; st != nil {
		fmt.Fprintf(w, "Failed step:\t%s (%s) %s at %s\n", st.ID, st.Topic, st.Status, ts(st.FinishedAt))
		if st.Error != "" {
			fmt.Fprintf(w, "Error:\t%s\n", st.Error)
		}
	}
}

// workflowStatusText is the status with the step it failed at.
func workflowStatusText(wf pulsehttp.Workflow) string {
	if st := wf.FailedStep; st != nil && (wf.Status == "failed" || wf.Status == "running") {
		return fmt.Sprintf("%s (failed at %s, %s)", wf.Status, st.Topic, st.ID)
	}
	return wf.Status
}

func newWorkflowListCmd(e *env) *cobra.Command {
	var status, pageToken string
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List workflows, newest first",
		Long: `List workflows, newest first, optionally only those in one status (` + strings.Join(workflowStatuses, ", ") + `).
When more match than --limit, the table ends with the token for the next page
(json: next_page_token). With --status a page looks at 1,000 workflows at most,
so it can list fewer than --limit, even none, and still have a next page.`,
		Example: `  pulse workflow list
  pulse workflow list --status failed --limit 20`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := map[string]string{"page_token": pageToken}
			if status != "" {
				s := strings.ToLower(status)
				if !slices.Contains(workflowStatuses, s) {
					return usageErrorf("--status must be one of %s, not %q", strings.Join(workflowStatuses, ", "), status)
				}
				q["status"] = s
			}
			if limit != 0 {
				q["limit"] = strconv.Itoa(limit)
			}
			raw, err := e.call(cmd, "GET", "/v1/workflows", q, nil)
			if err != nil {
				return err
			}
			return e.emit(raw, func(w io.Writer) error {
				var l pulsehttp.WorkflowList
				if err := decode(raw, &l); err != nil {
					return err
				}
				fmt.Fprintln(w, "ID\tSTATUS\tTOPIC\tSUBMITTED")
				for _, wf := range l.Workflows {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", wf.ID, wf.Status, dash(wf.Topic), ts(wf.SubmittedAt))
				}
				if l.NextPageToken != "" {
					fmt.Fprintf(w, "\nnext page: --page-token %s\n", l.NextPageToken)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&status, "status", "", "only workflows in this status: "+strings.Join(workflowStatuses, ", "))
	f.IntVar(&limit, "limit", 0, "most workflows per page (server default when 0)")
	f.StringVar(&pageToken, "page-token", "", "next_page_token of the previous page")
	return cmd
}

func newWorkflowActionCmd(e *env, action, short string) *cobra.Command {
	return &cobra.Command{
		Use:     action + " ID",
		Short:   short,
		Example: fmt.Sprintf("  pulse workflow %s 0190c8a4-7a51-7c3e-9d43-1f2a3b4c5d6e", action),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := e.call(cmd, "POST", "/v1/workflows/"+url.PathEscape(args[0])+"/"+action, nil, struct{}{})
			if err != nil {
				return err
			}
			return e.emit(raw, func(w io.Writer) error {
				var a pulsehttp.WorkflowAction
				if err := decode(raw, &a); err != nil {
					return err
				}
				verb := map[string]string{"cancel": "canceled", "retry": "retried"}[action]
				fmt.Fprintf(w, "%s: %s %d job(s); now %s\n", a.Workflow.ID, verb, a.Jobs, workflowStatusText(a.Workflow))
				return nil
			})
		},
	}
}
