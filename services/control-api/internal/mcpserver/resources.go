package mcpserver

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"

	"github.com/pulsequeue/pulse/services/control-api/internal/httpapi"
)

// The resources: state an agent reads rather than asks for. Each is the
// HTTP API's JSON for the same thing.
const (
	ResourceDispatch = "pulse://dispatch"
	ResourceEvents   = "pulse://dispatch/events"
	ResourceJob      = "pulse://jobs/{id}"
	ResourceTopic    = "pulse://topics/{topic}"
)

func (s *Server) addResources() {
	s.mcp.AddResource(&mcp.Resource{URI: ResourceDispatch, Name: "dispatch", Title: "Dispatch state", MIMEType: "application/json",
		Description: "The pause state of every scope with its queued and running jobs (as dispatch.status)."},
		s.resource(func(ctx context.Context, _ string) (any, error) {
			resp, err := s.deps.Dispatch.GetDispatchState(ctx, &pulsev1.GetDispatchStateRequest{})
			if err != nil {
				return nil, err
			}
			return httpapi.DispatchStateToJSON(resp), nil
		}))
	s.mcp.AddResource(&mcp.Resource{URI: ResourceEvents, Name: "dispatch-events", Title: "Pause audit log", MIMEType: "application/json",
		Description: "The newest 50 pauses and resumes (dispatch.events pages further)."},
		s.resource(func(ctx context.Context, _ string) (any, error) {
			resp, err := s.deps.Dispatch.ListDispatchEvents(ctx, &pulsev1.ListDispatchEventsRequest{})
			if err != nil {
				return nil, err
			}
			return httpapi.EventsToJSON(resp), nil
		}))
	s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: ResourceJob, Name: "job", Title: "A job", MIMEType: "application/json",
		Description: "One job, with why it is not running when it is not (as jobs.get)."},
		s.resource(func(ctx context.Context, uri string) (any, error) {
			resp, err := s.deps.Jobs.GetJob(ctx, &pulsev1.GetJobRequest{Id: strings.TrimPrefix(uri, "pulse://jobs/")})
			if err != nil {
				return nil, err
			}
			return pulsehttp.JobWithWait{Job: httpapi.JobToJSON(resp.GetJob()), Waiting: httpapi.WaitToJSON(resp.GetWait())}, nil
		}))
	s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: ResourceTopic, Name: "topic", Title: "A topic", MIMEType: "application/json",
		Description: "One topic with its counts, pause, workers and limit (as topics.get)."},
		s.resource(func(ctx context.Context, uri string) (any, error) {
			ti, err := s.deps.Topics.GetTopic(ctx, strings.TrimPrefix(uri, "pulse://topics/"))
			if err != nil {
				return nil, err
			}
			return httpapi.TopicToJSON(ti), nil
		}))
}

// resource adapts a read to a resource handler: the caller admitted as
// for a read, the answer as JSON, a missing job or topic as the
// protocol's resource-not-found.
func (s *Server) resource(read func(ctx context.Context, uri string) (any, error)) mcp.ResourceHandler {
	return func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		uri := req.Params.URI
		if err := s.admit(ctx, "resource "+uri, ResourceRoles); err != nil {
			return nil, s.toolError(ctx, uri, err)
		}
		v, err := read(ctx, uri)
		if apierr.KindOf(err) == apierr.KindNotFound {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		if err != nil {
			return nil, s.toolError(ctx, uri, err)
		}
		body, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(body)}}}, nil
	}
}
