package app

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/bcrypt"
)

func newLoginCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "login --server URL [--user NAME --password SECRET | --token TOKEN]",
		Short: "Save the server and credential in the user's config directory",
		Long: `Save the control-api URL and a credential (Basic user/password or a bearer
token) to <user config dir>/pulse/config.json (e.g. ~/.config/pulse/config.json
on Linux), mode 0600. Later commands use it when neither a flag nor a PULSE_*
environment variable says otherwise. --user without --password reads the
password from stdin. Nothing is sent to the server.`,
		Example: `  pulse login --server https://pulse.example.com --user ops --password "$OPS_PASSWORD"
  pulse login --server https://pulse.example.com --token "$PULSE_TOKEN"
  echo "$OPS_PASSWORD" | pulse login --server http://localhost:8080 --user ops`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if e.server == "" {
				return usageErrorf("login needs --server URL")
			}
			u, err := url.Parse(e.server)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usageErrorf("--server must be an http:// or https:// URL, got %q", e.server)
			}
			if e.token != "" && e.user != "" {
				return usageErrorf("give either --user/--password or --token, not both")
			}
			if e.password != "" && e.user == "" {
				return usageErrorf("--password needs --user")
			}
			fc := fileConfig{Server: strings.TrimRight(e.server, "/"), User: e.user, Password: e.password, Token: e.token}
			if fc.User != "" && fc.Password == "" {
				p, err := readSecret(e.stdin)
				if err != nil {
					return err
				}
				fc.Password = p
			}
			path, err := saveConfig(fc)
			if err != nil {
				return err
			}
			if e.output == "json" {
				b, _ := json.Marshal(map[string]string{"config": path, "server": fc.Server}) //nolint:errchkjson // a map of strings always marshals
				return e.printJSON(b)
			}
			fmt.Fprintf(e.stdout, "saved %s\n", path)
			return nil
		},
	}
	return cmd
}

func readSecret(r io.Reader) (string, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && err != io.EOF {
		return "", fmt.Errorf("reading password from stdin: %w", err)
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", usageErrorf("empty password on stdin")
	}
	return line, nil
}

func newPasswdCmd(e *env) *cobra.Command {
	var cost int
	var name, role string
	cmd := &cobra.Command{
		Use:   "passwd",
		Short: "Read a password from stdin and print its bcrypt hash for PULSE_AUTH_USERS",
		Long: `Read one line (the password) from stdin and print a bcrypt hash of it. Put the
hash as the secret in the server's PULSE_AUTH_USERS (name:role:hash). With
--name and --role the whole entry is printed.`,
		Example: `  printf '%s\n' "$NEW_PASSWORD" | pulse passwd
  pulse passwd --name ops --role operator < password.txt
  # PULSE_AUTH_USERS='ops:operator:$2a$10$...'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (name == "") != (role == "") {
				return usageErrorf("give --name and --role together")
			}
			switch role {
			case "", "producer", "worker", "operator":
			default:
				return usageErrorf("--role must be producer, worker or operator, not %q", role)
			}
			pw, err := readSecret(e.stdin)
			if err != nil {
				return err
			}
			if len(pw) > 72 {
				return usageErrorf("password is longer than bcrypt's 72 bytes")
			}
			h, err := bcrypt.GenerateFromPassword([]byte(pw), cost)
			if err != nil {
				return usageErrorf("bcrypt: %v", err)
			}
			if name != "" {
				fmt.Fprintf(e.stdout, "%s:%s:%s\n", name, role, h)
				return nil
			}
			fmt.Fprintln(e.stdout, string(h))
			return nil
		},
	}
	cmd.Flags().IntVar(&cost, "cost", bcrypt.DefaultCost, "bcrypt cost (4-31)")
	cmd.Flags().StringVar(&name, "name", "", "print a full name:role:hash entry for this user")
	cmd.Flags().StringVar(&role, "role", "", "role for --name: producer, worker or operator")
	return cmd
}

func newConfigCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show the resolved connection and where each part came from",
		Example: `  pulse config
  PULSE_SERVER=http://other:8080 pulse config -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := e.conn()
			if err != nil {
				return err
			}
			_, path, _ := loadConfig()
			if e.output == "json" {
				b, _ := json.Marshal(struct { //nolint:errchkjson // strings and bools always marshal
					conn
					File string `json:"config_file"`
				}{c, path})
				return e.printJSON(b)
			}
			fmt.Fprintf(e.stdout, "server:\t%s (%s)\n", dash(c.Server), dash(c.ServerSource))
			who := c.Auth
			if c.User != "" {
				who += " as " + c.User
			}
			fmt.Fprintf(e.stdout, "auth:\t%s (%s)\n", who, dash(c.AuthSource))
			fmt.Fprintf(e.stdout, "config file:\t%s\n", dash(path))
			return nil
		},
	}
	return cmd
}
