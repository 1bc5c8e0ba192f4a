package app

import (
	"fmt"
	"io"
	"net/url"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
)

// schedule is a schedule as control-api shows it (pkg/pulsehttp).
type schedule = pulsehttp.Schedule

func scheduleState(s schedule) string {
	if s.Enabled != nil && !*s.Enabled {
		return "disabled"
	}
	return "enabled"
}

func printSchedules(w io.Writer, list []schedule, next string) {
	fmt.Fprintln(w, "ID\tNAME\tTOPIC\tKIND\tEXPRESSION\tTZ\tSTATE\tNEXT RUN\tLAST FIRED")
	for _, s := range list {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.Name, s.Topic, s.Kind, s.Expression, dash(s.TimeZone), scheduleState(s), ts(s.NextRunAt), ts(s.LastFiredAt))
	}
	if next != "" {
		fmt.Fprintf(w, "\nnext page: --page-token %s\n", next)
	}
}

func newSchedulesCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "schedules",
		Aliases: []string{"schedule"},
		Short:   "Manage schedules that turn time into jobs",
		Long:    "Schedules fire jobs at an instant (at), on a fixed step (every) or on a cron expression. See docs/schedules.md.",
		Example: `  pulse schedules create --name nightly-report --topic report.build --kind cron --expression '0 2 * * *' --time-zone Europe/Paris
  pulse schedules list
  pulse schedules disable 3f0c...
  pulse schedules jobs 3f0c...`,
	}
	oneSchedule := func(raw []byte) error {
		return e.emit(raw, func(w io.Writer) error {
			var s schedule
			if err := decode(raw, &s); err != nil {
				return err
			}
			printSchedules(w, []schedule{s}, "")
			return nil
		})
	}
	byID := func(use, short, method, suffix, example string) *cobra.Command {
		return &cobra.Command{
			Use: use + " ID", Short: short, Example: example, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				var body any
				if method == "POST" {
					body = struct{}{}
				}
				raw, err := e.call(cmd, method, "/v1/schedules/"+url.PathEscape(args[0])+suffix, nil, body)
				if err != nil {
					return err
				}
				if method == "DELETE" {
					if e.output == "json" {
						return e.printJSON(raw)
					}
					fmt.Fprintf(e.stdout, "schedule %s deleted\n", args[0])
					return nil
				}
				return oneSchedule(raw)
			},
		}
	}

	var limit int
	var pageToken string
	list := &cobra.Command{
		Use: "list", Short: "List schedules", Args: cobra.NoArgs,
		Example: "  pulse schedules list\n  pulse schedules list -o json",
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := map[string]string{"page_token": pageToken}
			if limit != 0 {
				q["limit"] = strconv.Itoa(limit)
			}
			raw, err := e.call(cmd, "GET", "/v1/schedules", q, nil)
			if err != nil {
				return err
			}
			return e.emit(raw, func(w io.Writer) error {
				var r pulsehttp.ScheduleList
				if err := decode(raw, &r); err != nil {
					return err
				}
				printSchedules(w, r.Schedules, r.NextPageToken)
				return nil
			})
		},
	}
	list.Flags().IntVar(&limit, "limit", 0, "most schedules per page")
	list.Flags().StringVar(&pageToken, "page-token", "", "next_page_token of the previous page")

	var jLimit int
	var jPage string
	jobs := &cobra.Command{
		Use: "jobs ID", Short: "List the jobs a schedule fired, newest first", Args: cobra.ExactArgs(1),
		Example: "  pulse schedules jobs 3f0c9a2e-...",
		RunE: func(cmd *cobra.Command, args []string) error {
			q := map[string]string{"page_token": jPage}
			if jLimit != 0 {
				q["limit"] = strconv.Itoa(jLimit)
			}
			raw, err := e.call(cmd, "GET", "/v1/schedules/"+url.PathEscape(args[0])+"/jobs", q, nil)
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
	jobs.Flags().IntVar(&jLimit, "limit", 0, "most jobs per page")
	jobs.Flags().StringVar(&jPage, "page-token", "", "next_page_token of the previous page")

	cmd.AddCommand(list,
		byID("get", "Show one schedule with its next run", "GET", "", "  pulse schedules get 3f0c9a2e-..."),
		newScheduleWriteCmd(e, false, oneSchedule),
		newScheduleWriteCmd(e, true, oneSchedule),
		byID("enable", "Enable a schedule; it fires from the next occurrence after now (operator)", "POST", "/enable", "  pulse schedules enable 3f0c9a2e-..."),
		byID("disable", "Disable a schedule (operator)", "POST", "/disable", "  pulse schedules disable 3f0c9a2e-..."),
		byID("delete", "Delete a schedule; jobs it already fired stay (operator)", "DELETE", "", "  pulse schedules delete 3f0c9a2e-..."),
		jobs)
	return cmd
}

// newScheduleWriteCmd builds `schedules create` or, with update, `schedules
// update ID` (a full replace, as PUT /v1/schedules/{id} is).
func newScheduleWriteCmd(e *env, update bool, printOut func([]byte) error) *cobra.Command {
	var name, topic, kind, expr, tz, argsJSON string
	var priority, maxAttempts int
	var disabled bool
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a schedule (operator)",
		Long: `Create a schedule. --kind is at (--expression an RFC 3339 instant), every
(a Go duration ≥ 1s) or cron (5 or 6 fields, or @hourly/@daily/...);
--time-zone (IANA, default UTC) applies to cron.`,
		Example: `  pulse schedules create --name nightly --topic report.build --kind cron --expression '0 2 * * *' --time-zone Europe/Paris
  pulse schedules create --name heartbeat --topic ping --kind every --expression 30s --args '{"deep":true}'
  pulse schedules create --name launch --topic launch.mail --kind at --expression 2026-12-01T09:00:00Z`,
		Args: cobra.NoArgs,
	}
	if update {
		cmd.Use, cmd.Short, cmd.Args = "update ID", "Replace a schedule's definition (operator)", cobra.ExactArgs(1)
		cmd.Long = "Replace a schedule's definition (every field; a new kind, expression or time zone recomputes the next run)."
		cmd.Example = `  pulse schedules update 3f0c9a2e-... --name nightly --topic report.build --kind cron --expression '0 3 * * *'`
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		a, err := parseArgsFlag("args", argsJSON)
		if err != nil {
			return err
		}
		body := pulsehttp.ScheduleDef{Name: name, Topic: topic, Args: a, Kind: kind, Expression: expr,
			TimeZone: tz, MaxAttempts: int32(maxAttempts)}
		if cmd.Flags().Changed("priority") {
			p := int32(priority)
			body.Priority = &p
		}
		method, path := "POST", "/v1/schedules"
		if update {
			method, path = "PUT", "/v1/schedules/"+url.PathEscape(args[0])
		} else if disabled {
			off := false
			body.Enabled = &off
		}
		raw, err := e.call(cmd, method, path, nil, body)
		if err != nil {
			return err
		}
		return printOut(raw)
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "unique name (required)")
	f.StringVar(&topic, "topic", "", "topic of the fired jobs (required)")
	f.StringVar(&kind, "kind", "", "at, every or cron (required)")
	f.StringVar(&expr, "expression", "", "when, in the kind's syntax (required)")
	f.StringVar(&tz, "time-zone", "", "IANA time zone for cron (default UTC)")
	f.StringVar(&argsJSON, "args", "{}", "args of the fired jobs, a JSON object")
	f.IntVar(&priority, "priority", 5, "priority of the fired jobs, 0-10, higher runs first")
	f.IntVar(&maxAttempts, "max-attempts", 0, "max attempts of the fired jobs (server default)")
	if !update {
		f.BoolVar(&disabled, "disabled", false, "create it disabled")
	}
	for _, r := range []string{"name", "topic", "kind", "expression"} {
		_ = cmd.MarkFlagRequired(r)
	}
	return cmd
}
