package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/logging"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

// Path is where control-api serves MCP.
const Path = "/mcp"

// MaxBodyBytes bounds one MCP request body. The largest argument a tool
// takes is a failure's error text (8 KiB) or an args filter; 1 MiB is
// generous for a JSON-RPC message, and it is read only after the caller
// authenticated (auth.Middleware reads no body).
const MaxBodyBytes = 1 << 20

// Lease bounds for the queue tools. An agent worker thinks between calls,
// so its default lease is far longer than an SDK worker's 30 s; the upper
// bound keeps a crashed agent's job from waiting more than an hour for the
// reaper.
const (
	LeaseMin     = 10 * time.Second
	LeaseDefault = 5 * time.Minute
	LeaseMax     = time.Hour
)

// PresenceGateway is what the queue tools record as the gateway of an
// agent worker's presence row: the worker is served by control-api's MCP
// server, not by a dispatch-gateway stream.
const PresenceGateway = "control-api/mcp"

// Jobs is what the job tools call: api.ControlService.
type Jobs interface {
	GetJob(ctx context.Context, req *pulsev1.GetJobRequest) (*pulsev1.GetJobResponse, error)
	SearchJobs(ctx context.Context, q api.JobQuery) (*pulsev1.ListJobsResponse, error)
	CancelJob(ctx context.Context, req *pulsev1.CancelJobRequest) (*pulsev1.CancelJobResponse, error)
	RetryJob(ctx context.Context, req *pulsev1.RetryJobRequest) (*pulsev1.RetryJobResponse, error)
}

// Dispatch is what the pause tools call: api.DispatchControl.
type Dispatch interface {
	GetDispatchState(ctx context.Context, req *pulsev1.GetDispatchStateRequest) (*pulsev1.GetDispatchStateResponse, error)
	Pause(ctx context.Context, req *pulsev1.PauseDispatchRequest, forField string) (*pulsev1.PauseDispatchResponse, error)
	ResumeDispatch(ctx context.Context, req *pulsev1.ResumeDispatchRequest) (*pulsev1.ResumeDispatchResponse, error)
	ListDispatchEvents(ctx context.Context, req *pulsev1.ListDispatchEventsRequest) (*pulsev1.ListDispatchEventsResponse, error)
}

// Topics is what the topic tools call: api.TopicService.
type Topics interface {
	ListTopics(ctx context.Context, req *pulsev1.ListTopicsRequest) (*pulsev1.ListTopicsResponse, error)
	GetTopic(ctx context.Context, topic string) (*pulsev1.TopicInfo, error)
	SetLimit(ctx context.Context, topic string, maxRunning *int64) (*pulsev1.TopicInfo, error)
	SetRateLimit(ctx context.Context, topic string, rl *pulsetype.RateLimit) (*pulsev1.TopicInfo, error)
	SetKeyLimits(ctx context.Context, topic string, perKey *int64, sequenceOnFailure string) (*pulsev1.TopicInfo, error)
	ListTopicBreakers(ctx context.Context, req *pulsev1.ListTopicBreakersRequest) (*pulsev1.ListTopicBreakersResponse, error)
	SetTopicBreaker(ctx context.Context, req *pulsev1.SetTopicBreakerRequest) (*pulsev1.SetTopicBreakerResponse, error)
	ClearTopicBreaker(ctx context.Context, req *pulsev1.ClearTopicBreakerRequest) (*pulsev1.ClearTopicBreakerResponse, error)
}

// Queue is what the queue tools call: the jobstore statements
// dispatch-gateway runs for a stream's claim, heartbeat and report, and
// the presence it records.
type Queue interface {
	Claim(ctx context.Context, topics []string, slots []string, leaseTTL time.Duration) ([]pulsetype.Claimed, error)
	Heartbeat(ctx context.Context, worker string, refs []pulsetype.AttemptRef, leaseTTL time.Duration) ([]pulsetype.Beat, error)
	Report(ctx context.Context, worker string, results []pulsetype.Result) ([]pulsetype.Ack, error)
	OpenPresence(ctx context.Context, gateway string, p jobstore.Presence, ttl time.Duration) (time.Time, error)
	DispatchState(ctx context.Context) (jobstore.DispatchState, error)
}

// Deps are the services the tools call.
type Deps struct {
	Jobs     Jobs
	Dispatch Dispatch
	Topics   Topics
	Queue    Queue
}

// Options configure a Server.
type Options struct {
	// Open is authentication off (PULSE_AUTH=none): every caller is
	// admitted, and an agent worker's leases are held as its worker id
	// alone, as dispatch-gateway holds them in open mode.
	Open bool
	// Version is the server version MCP clients are told.
	Version string
	Logger  *slog.Logger
	// OnCall is told the outcome of every call that reached a tool: ok,
	// refused, or the error's code (apierr.HTTPCode); may be nil.
	OnCall func(tool, outcome string)
}

// Server is control-api's MCP server.
type Server struct {
	deps   Deps
	opts   Options
	logger *slog.Logger
	mcp    *mcp.Server
}

// New builds the server with every tool and resource.
func New(deps Deps, opts Options) *Server {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.OnCall == nil {
		opts.OnCall = func(string, string) {}
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := &Server{deps: deps, opts: opts, logger: logger}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "pulse", Title: "pulse job queue", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       logger,
	})
	s.addOperatorTools()
	s.addLimitTool()
	s.addFlowTools()
	s.addQueueTools()
	s.addResources()
	return s
}

const instructions = `pulse is a Postgres-backed job queue. Operators: dispatch.status shows what is paused and how much is queued and running; dispatch.pause stops jobs from starting (drain: running jobs finish; quiesce: they also hold at their next safe point), dispatch.resume lifts it; jobs.get and jobs.why_not_running explain a job. Agent workers: queue.claim leases one job, queue.heartbeat keeps the lease, queue.complete or queue.fail settles it; every answer carries "system", the pause state: while system.paused is true claim nothing, and while a job's heartbeat says quiesced, hold at your next step boundary.`

// MCP is the underlying SDK server (for an in-process transport in tests).
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Handler serves MCP's streamable HTTP transport, stateless: each request
// stands alone, so any control-api replica answers any request, and the
// caller's identity is the request's (auth.Middleware, in front of it).
func (s *Server) Handler() http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		Stateless:           true,
		JSONResponse:        true,
		MaxRequestBodyBytes: MaxBodyBytes,
		Logger:              s.logger,
	})
}

// tool adds a typed tool whose caller is admitted by ToolRoles first and
// whose errors become tool errors naming the argument (or, for a failure
// of the server's own, a correlation id, the details in the log).
func tool[In, Out any](s *Server, t *mcp.Tool, h func(ctx context.Context, in In) (Out, string, error), bounds ...bound) {
	roles, ok := ToolRoles()[t.Name]
	if !ok {
		panic("mcpserver: no roles for tool " + t.Name)
	}
	if t.InputSchema == nil {
		schema, err := jsonschema.For[In](schemaOptions)
		if err != nil {
			panic(fmt.Sprintf("mcpserver: input schema of %s: %v", t.Name, err))
		}
		for _, b := range bounds {
			p := schema.Properties[b.prop]
			if p == nil {
				panic("mcpserver: tool " + t.Name + " has no argument " + b.prop)
			}
			p.Minimum, p.Maximum = ptr(b.min), ptr(b.max)
		}
		t.InputSchema = schema
	}
	if t.OutputSchema == nil {
		schema, err := jsonschema.For[Out](schemaOptions)
		if err != nil {
			panic(fmt.Sprintf("mcpserver: output schema of %s: %v", t.Name, err))
		}
		t.OutputSchema = schema
	}
	mcp.AddTool(s.mcp, t, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		var zero Out
		if err := s.admit(ctx, "tool "+t.Name, roles); err != nil {
			s.opts.OnCall(t.Name, apierr.HTTPCode(err))
			return nil, zero, s.toolError(ctx, t.Name, err)
		}
		out, summary, err := h(ctx, in)
		if err != nil {
			var refused *refusal
			if errors.As(err, &refused) {
				// A refusal still answers with its structured content (the
				// queue tools' system envelope).
				s.opts.OnCall(t.Name, "refused")
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: refused.Error()}}}, out, nil
			}
			s.opts.OnCall(t.Name, apierr.HTTPCode(err))
			return nil, zero, s.toolError(ctx, t.Name, err)
		}
		s.opts.OnCall(t.Name, "ok")
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: summary}}}, out, nil
	})
}

// schemaOptions describe the JSON shapes Go's types do not: args (a raw
// JSON object, not a byte array) and the time a topic's worker was last
// seen (a time, or null for never).
var schemaOptions = &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
	reflect.TypeFor[json.RawMessage]():    {Type: "object", Description: "a JSON object"},
	reflect.TypeFor[pulsehttp.LastSeen](): {Types: []string{"string", "null"}, Description: "an RFC 3339 time, or null for never"},
}}

// bound is the range of a numeric argument, declared in the input schema
// (the handler checks it too, naming the argument).
type bound struct {
	prop     string
	min, max float64
}

// refusal is a queue tool's answer that changed nothing — a lease not
// held, a result the fence refused — sent as a tool error that still
// carries the structured answer.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

// toolError is the text of a tool error: the HTTP error code, then the
// message, which names the argument ("invalid_argument: topic: …"). A
// failure of the server's own is logged and answered with a correlation
// id, as the HTTP API does.
func (s *Server) toolError(ctx context.Context, name string, err error) error {
	code := apierr.HTTPCode(err)
	msg := err.Error()
	if apierr.HTTPStatus(err) >= 500 && !errors.Is(err, jobstore.ErrStatementTimeout) {
		id := apierr.CorrelationID()
		msg = apierr.PublicMessage(err, id)
		s.logger.Log(ctx, slog.LevelError, "mcp tool failed", "tool", name, "correlation_id", id, logging.Error, err)
	}
	return fmt.Errorf("%s: %s", code, msg)
}

func ptr[T any](v T) *T { return &v }
