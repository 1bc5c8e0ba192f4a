// Package app is the pulse CLI's command tree. Run executes it in-process,
// which is what main and the tests call.
package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/pulsequeue/pulse/pkg/buildinfo"
)

// Exit codes.
const (
	ExitOK           = 0 // success
	ExitError        = 1 // the API refused or could not be reached
	ExitUsage        = 2 // bad command line or input, caught before any request
	ExitDrainTimeout = 3 // dispatch drain --wait: jobs still running at --timeout
)

const exitCodesHelp = `Exit codes:
  0  success
  1  error answered by control-api (invalid argument, not found, permission
     denied, ...) or control-api unreachable
  2  bad command line or input (unknown command or flag, a command group
     run without its subcommand, invalid JSON in --args, ...)
  3  dispatch drain --wait: jobs were still running when --timeout expired`

type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErrorf(format string, a ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, a...)}
}

// env is what one invocation runs with.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer

	// global flags
	server, user, password, token string
	caFile, clientCert, clientKey string
	allowPlaintext                bool
	output                        string
}

// Run executes the pulse command line args and returns the process exit
// code. Errors are printed as one line on stderr.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr}
	root := newRoot(e)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	msg := strings.Join(strings.Fields(err.Error()), " ")
	fmt.Fprintf(stderr, "pulse: %s\n", msg)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var ae *APIError
	if errors.As(err, &ae) {
		return ExitError
	}
	if isUsage(err) {
		return ExitUsage
	}
	return ExitError
}

func isUsage(err error) bool {
	s := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "required flag", "accepts ", "requires ", "invalid argument", "flag needs an argument", "bad flag"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:     "pulse",
		Version: buildinfo.Version(),
		Short:   "Operate a pulse job queue through control-api",
		Long: `pulse is the command-line client of control-api's HTTP/JSON API: submit and
inspect jobs, manage schedules, pause, resume and drain dispatch, list topics
and limit how many of a topic's jobs run at once.

Connection: --server, --user/--password (Basic) or --token (Bearer). Each is
taken from the flag, else the environment (PULSE_SERVER, PULSE_USER,
PULSE_PASSWORD, PULSE_TOKEN), else the file saved by ` + "`pulse login`" + `
(<user config dir>/pulse/config.json). The credential is taken as a whole
from the first of those that has one.

TLS: an https:// server is verified against the system's roots, or
--ca-file's; --client-cert/--client-key present a client certificate
(env PULSE_CA_FILE, PULSE_CLIENT_CERT, PULSE_CLIENT_KEY). Credentials are
not sent over plain http to a host that is not loopback unless
--allow-plaintext-credentials (env PULSE_ALLOW_PLAINTEXT_CREDENTIALS=true).

` + exitCodesHelp,
		Example: `  pulse login --server http://localhost:8080 --user ops --password secret
  pulse submit email.send --args '{"to":"a@example.com"}'
  pulse jobs list --status DEAD_LETTERED -o json
  pulse dispatch pause --reason "upgrade workers" --for 2h
  pulse dispatch drain --wait --timeout 10m && ./upgrade.sh && pulse dispatch resume
  pulse topics limit email.send 20`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			switch e.output {
			case "table", "json":
				return nil
			}
			return usageErrorf("-o/--output must be table or json, not %q", e.output)
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&e.server, "server", "", "control-api HTTP base URL (env PULSE_SERVER)")
	pf.StringVar(&e.user, "user", "", "user name for Basic auth (env PULSE_USER)")
	pf.StringVar(&e.password, "password", "", "password for Basic auth (env PULSE_PASSWORD)")
	pf.StringVar(&e.token, "token", "", "bearer token (env PULSE_TOKEN)")
	pf.StringVar(&e.caFile, "ca-file", "", "PEM CA bundle to trust for an https:// server instead of the system's (env PULSE_CA_FILE)")
	pf.StringVar(&e.clientCert, "client-cert", "", "PEM client certificate, for a server that requires one (env PULSE_CLIENT_CERT)")
	pf.StringVar(&e.clientKey, "client-key", "", "PEM key of --client-cert (env PULSE_CLIENT_KEY)")
	pf.BoolVar(&e.allowPlaintext, "allow-plaintext-credentials", false,
		"send credentials over plain http to a host that is not loopback (trusted networks only; env PULSE_ALLOW_PLAINTEXT_CREDENTIALS=true)")
	pf.StringVarP(&e.output, "output", "o", "table", "output format: table or json (json prints the API's JSON)")
	root.SetVersionTemplate("pulse {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: ExitUsage, err: err}
	})

	root.AddCommand(newJobsCmd(e), newSubmitCmd(e), newSchedulesCmd(e), newDispatchCmd(e), newTopicsCmd(e), newWorkflowCmd(e),
		newLoginCmd(e), newPasswdCmd(e), newConfigCmd(e), newMCPCmd(e))
	for _, c := range root.Commands() {
		subcommandGroups(c)
	}
	return root
}

// subcommandGroups makes every command under c that only groups
// subcommands (pulse jobs, pulse dispatch, ...) a usage error when it is
// run bare or with a subcommand it does not have: exit 2 with the commands
// it does have, rather than cobra's default of printing help and exiting 0
// (a typo in a script must not pass). -h still prints the help.
func subcommandGroups(c *cobra.Command) {
	if !c.HasSubCommands() {
		return
	}
	for _, sub := range c.Commands() {
		subcommandGroups(sub)
	}
	if c.Run != nil || c.RunE != nil {
		return
	}
	hint := func(c *cobra.Command) string {
		var names []string
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				names = append(names, sub.Name())
			}
		}
		return fmt.Sprintf("use one of: %s (%s -h for help)", strings.Join(names, ", "), c.CommandPath())
	}
	c.Args = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unknown command %q for %q; %s", args[0], c.CommandPath(), hint(c))
		}
		return nil
	}
	c.RunE = func(c *cobra.Command, _ []string) error {
		return usageErrorf("%q needs a command; %s", c.CommandPath(), hint(c))
	}
	// Its help shows "<path> [command]" only, as before it could run.
	if tmpl := c.UsageTemplate(); strings.Contains(tmpl, runnableUsageLine) {
		c.SetUsageTemplate(strings.Replace(tmpl, runnableUsageLine, "", 1))
	}
}

// runnableUsageLine is the part of cobra's usage template that prints a
// runnable command's own usage line.
const runnableUsageLine = `{{if .Runnable}}
  {{.UseLine}}{{end}}`

// isSubcommandGroup reports whether c only groups subcommands: its usage
// line is "<path> [command]" alone (the reference, like the help).
func isSubcommandGroup(c *cobra.Command) bool {
	return c.HasParent() && c.HasAvailableSubCommands()
}

// conn resolves the connection with precedence flag > env > config file.
func (e *env) conn() (conn, error) {
	fc, _, err := loadConfig()
	if err != nil {
		return conn{}, err
	}
	return resolve([]layer{
		{name: "flag", server: e.server, user: e.user, password: e.password, token: e.token},
		{name: "env", server: os.Getenv("PULSE_SERVER"), user: os.Getenv("PULSE_USER"), password: os.Getenv("PULSE_PASSWORD"), token: os.Getenv("PULSE_TOKEN")},
		{name: "config", server: fc.Server, user: fc.User, password: fc.Password, token: fc.Token},
	}), nil
}

func (e *env) client() (*client, error) {
	c, err := e.conn()
	if err != nil {
		return nil, err
	}
	hc, err := e.tlsSettings().httpClient(c.Server, c.User != "" || c.token != "")
	if err != nil {
		return nil, err
	}
	return &client{base: c.Server, user: c.User, password: c.password, token: c.token, http: hc}, nil
}

// call sends one request with the resolved connection.
func (e *env) call(cmd *cobra.Command, method, path string, query map[string]string, body any) ([]byte, error) {
	c, err := e.client()
	if err != nil {
		return nil, err
	}
	q := map[string][]string{}
	for k, v := range query {
		if v != "" {
			q[k] = []string{v}
		}
	}
	return c.do(cmd.Context(), method, path, q, body)
}

// printJSON writes the API's JSON indented.
func (e *env) printJSON(raw []byte) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		_, err = e.stdout.Write(raw)
		return err
	}
	buf.WriteByte('\n')
	_, err := e.stdout.Write(buf.Bytes())
	return err
}

// emit prints raw as JSON with -o json, else runs table.
func (e *env) emit(raw []byte, table func(w io.Writer) error) error {
	if e.output == "json" {
		return e.printJSON(raw)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if err := table(tw); err != nil {
		return err
	}
	return tw.Flush()
}

func decode(raw []byte, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("unexpected answer from control-api: %w", err)
	}
	return nil
}

// parseArgsFlag checks that --args is a JSON object.
func parseArgsFlag(name, s string) (json.RawMessage, error) {
	if s == "" {
		return json.RawMessage(`{}`), nil
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil || m == nil {
		var v any
		if json.Unmarshal([]byte(s), &v) == nil {
			return nil, usageErrorf("--%s must be a JSON object like '{\"k\":1}', got %s", name, jsonKind(v))
		}
		return nil, usageErrorf("--%s is not valid JSON (want an object like '{\"k\":1}'): %v", name, err)
	}
	return json.RawMessage(s), nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "a non-object"
}
