package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/pulsequeue/pulse/pkg/buildinfo"
)

// mcpPath is where control-api serves MCP.
const mcpPath = "/mcp"

func newMCPCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve control-api's MCP tools over stdio, for a local agent client",
		Long: `Serve control-api's Model Context Protocol tools and resources on stdin and
stdout, for an agent client that starts its MCP servers as processes (the
"command" form of an mcpServers configuration). Every call is forwarded to
control-api's /mcp with this command's connection: --server, the
credentials and the TLS flags, resolved as for every other command. The
tools, their schemas and who may call them are control-api's; see
docs/mcp.md.

It runs until stdin closes. Nothing but MCP messages is written to stdout;
errors go to stderr.`,
		Example: `  PULSE_SERVER=http://localhost:8080 PULSE_USER=operator PULSE_PASSWORD=dev-operator pulse mcp

  # an mcpServers entry:
  {"mcpServers": {"pulse": {"command": "pulse", "args": ["mcp"],
    "env": {"PULSE_SERVER": "https://pulse.example.com", "PULSE_TOKEN": "…"}}}}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.serveMCP(cmd.Context())
		},
	}
}

// serveMCP connects to control-api's /mcp and serves what it lists over
// stdio, forwarding each call.
func (e *env) serveMCP(ctx context.Context) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	if c.base == "" {
		return usageErrorf("no server: pass --server, set PULSE_SERVER or run `pulse login`")
	}
	hc := *c.http
	hc.Timeout = 0 // a call lasts as long as the tool takes; the agent's client bounds it
	next := hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	hc.Transport = &credentials{c: c, next: next}
	endpoint := strings.TrimRight(c.base, "/") + mcpPath
	client := mcp.NewClient(&mcp.Implementation{Name: "pulse-cli", Version: buildinfo.Version()}, nil)
	remote, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		return fmt.Errorf("cannot connect to %s: %w", endpoint, err)
	}
	defer remote.Close()

	init := remote.InitializeResult()
	local := mcp.NewServer(&mcp.Implementation{Name: "pulse", Title: init.ServerInfo.Title, Version: init.ServerInfo.Version},
		&mcp.ServerOptions{Instructions: init.Instructions})
	if err := mirror(ctx, remote, local); err != nil {
		return err
	}
	err = local.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(e.stdin), Writer: nopWriteCloser{e.stdout}})
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// mirror adds to local every tool, resource and resource template remote
// lists, each forwarding to remote.
func mirror(ctx context.Context, remote *mcp.ClientSession, local *mcp.Server) error {
	for t, err := range remote.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("list the tools: %w", err)
		}
		local.AddTool(t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return remote.CallTool(ctx, &mcp.CallToolParams{Name: req.Params.Name, Arguments: req.Params.Arguments})
		})
	}
	read := func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return remote.ReadResource(ctx, &mcp.ReadResourceParams{URI: req.Params.URI})
	}
	for r, err := range remote.Resources(ctx, nil) {
		if err != nil {
			return fmt.Errorf("list the resources: %w", err)
		}
		local.AddResource(r, read)
	}
	for r, err := range remote.ResourceTemplates(ctx, nil) {
		if err != nil {
			return fmt.Errorf("list the resource templates: %w", err)
		}
		local.AddResourceTemplate(r, read)
	}
	return nil
}

// credentials adds the CLI's credentials to every request to control-api.
type credentials struct {
	c    *client
	next http.RoundTripper
}

func (t *credentials) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("User-Agent", "pulse-cli")
	switch {
	case t.c.token != "":
		r.Header.Set("Authorization", "Bearer "+t.c.token)
	case t.c.user != "":
		r.SetBasicAuth(t.c.user, t.c.password)
	}
	return t.next.RoundTrip(r)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
