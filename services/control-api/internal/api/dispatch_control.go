package api

import (
	"context"
	"encoding/base64"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/jobspec"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pausewire"
	"github.com/pulsequeue/pulse/pkg/server/storable"
)

// Paging bounds for ListDispatchEvents.
const (
	EventsLimitDefault = 50
	EventsLimitMax     = 500
)

// DispatchStore is the part of jobstore.Store that pause control uses.
type DispatchStore interface {
	DispatchState(ctx context.Context) (jobstore.DispatchState, error)
	QueueCounts(ctx context.Context) (jobstore.QueueCounts, error)
	Pause(ctx context.Context, req jobstore.PauseRequest) (jobstore.PauseResult, error)
	Resume(ctx context.Context, scope, actor string) (jobstore.PauseResult, error)
	ListControlEvents(ctx context.Context, before int64, limit int) ([]jobstore.ControlEvent, error)
}

// DispatchOptions configure a DispatchControl.
type DispatchOptions struct {
	Metrics *Metrics     // nil: none
	Logger  *slog.Logger // nil: discard
	// Now is the clock that "for" and "until" are measured against; nil
	// means time.Now.
	Now func() time.Time
}

// DispatchControl implements pulsev1.DispatchControlServiceServer: pause,
// resume, status and the audit log (docs/pause.md). Its errors are apierr
// errors, mapped by each transport.
type DispatchControl struct {
	pulsev1.UnimplementedDispatchControlServiceServer

	store  DispatchStore
	opts   DispatchOptions
	logger *slog.Logger
}

// NewDispatchControl returns the service on store.
func NewDispatchControl(store DispatchStore, opts DispatchOptions) *DispatchControl {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &DispatchControl{store: store, opts: opts, logger: logger}
}

// GetDispatchState returns every scope with its queued and running counts.
// The counts walk the two partial indexes of live jobs, never the whole
// table (jobstore.QueueCounts).
func (s *DispatchControl) GetDispatchState(ctx context.Context, _ *pulsev1.GetDispatchStateRequest) (*pulsev1.GetDispatchStateResponse, error) {
	st, err := s.store.DispatchState(ctx)
	if err != nil {
		return nil, err
	}
	counts, err := s.store.QueueCounts(ctx)
	if err != nil {
		return nil, err
	}
	out := &pulsev1.GetDispatchStateResponse{Version: st.Version, Scopes: make([]*pulsev1.ScopeStatus, len(st.Scopes))}
	for i, sc := range st.Scopes {
		queued, running := counts.Queued[sc.Scope], counts.Running[sc.Scope]
		if sc.Scope == jobstore.GlobalScope {
			queued, running = counts.Totals()
		}
		out.Scopes[i] = &pulsev1.ScopeStatus{State: pausewire.ScopeToWire(sc), Queued: queued, Running: running, Drained: running == 0}
		s.opts.Metrics.dispatchPaused(sc.Scope, sc.Paused)
	}
	return out, nil
}

// PauseDispatch pauses the global scope or one topic.
func (s *DispatchControl) PauseDispatch(ctx context.Context, req *pulsev1.PauseDispatchRequest) (*pulsev1.PauseDispatchResponse, error) {
	return s.Pause(ctx, req, "pause_for")
}

// Pause is PauseDispatch for a transport that names the duration field
// differently (HTTP's "for").
func (s *DispatchControl) Pause(ctx context.Context, req *pulsev1.PauseDispatchRequest, forField string) (*pulsev1.PauseDispatchResponse, error) {
	preq, err := s.validatePause(req, forField)
	if err != nil {
		return nil, err
	}
	preq.Actor = actorOf(ctx)
	if err := storable.Text("actor", preq.Actor); err != nil {
		return nil, err
	}
	res, err := s.store.Pause(ctx, preq)
	if err != nil {
		return nil, err
	}
	if res.Changed {
		s.opts.Metrics.dispatchAction("pause")
		s.opts.Metrics.dispatchPaused(preq.Scope, true)
		s.logger.Info("dispatch paused", "scope", preq.Scope, "mode", preq.Mode, "reason", preq.Reason,
			"actor", preq.Actor, "until", preq.Until, "version", res.State.Version)
	}
	return &pulsev1.PauseDispatchResponse{State: pausewire.ScopeToWire(res.State), Changed: res.Changed}, nil
}

// ResumeDispatch resumes the global scope or one topic.
func (s *DispatchControl) ResumeDispatch(ctx context.Context, req *pulsev1.ResumeDispatchRequest) (*pulsev1.ResumeDispatchResponse, error) {
	scope, err := scopeOf(req.GetTopic())
	if err != nil {
		return nil, err
	}
	actor := actorOf(ctx)
	if err := storable.Text("actor", actor); err != nil {
		return nil, err
	}
	res, err := s.store.Resume(ctx, scope, actor)
	if err != nil {
		return nil, err
	}
	if res.Changed {
		s.opts.Metrics.dispatchAction("resume")
		s.opts.Metrics.dispatchPaused(scope, false)
		s.logger.Info("dispatch resumed", "scope", scope, "actor", actor, "version", res.State.Version)
	}
	return &pulsev1.ResumeDispatchResponse{State: pausewire.ScopeToWire(res.State), Changed: res.Changed}, nil
}

// ListDispatchEvents pages the audit log newest first. It reads one event
// more than the page holds, so the last page has no next token.
func (s *DispatchControl) ListDispatchEvents(ctx context.Context, req *pulsev1.ListDispatchEventsRequest) (*pulsev1.ListDispatchEventsResponse, error) {
	limit := int(req.GetLimit())
	switch {
	case limit == 0:
		limit = EventsLimitDefault
	case limit < 1 || limit > EventsLimitMax:
		return nil, apierr.Invalid("limit", "is %d; it must be between 1 and %d", limit, EventsLimitMax)
	}
	var before int64
	if tok := req.GetPageToken(); tok != "" {
		var err error
		if before, err = decodeEventToken(tok); err != nil {
			return nil, err
		}
	}
	evs, err := s.store.ListControlEvents(ctx, before, limit+1)
	if err != nil {
		return nil, err
	}
	out := &pulsev1.ListDispatchEventsResponse{}
	if len(evs) > limit {
		evs = evs[:limit]
		out.NextPageToken = encodeEventToken(evs[limit-1].ID)
	}
	out.Events = make([]*pulsev1.DispatchEvent, len(evs))
	for i, e := range evs {
		out.Events[i] = pausewire.EventToWire(e)
	}
	return out, nil
}

// validatePause checks every field, naming the first bad one.
func (s *DispatchControl) validatePause(req *pulsev1.PauseDispatchRequest, forField string) (jobstore.PauseRequest, error) {
	reason := req.GetReason()
	unstorable := storable.Text("reason", reason) // NUL or invalid UTF-8
	switch {
	case strings.TrimSpace(reason) == "":
		return jobstore.PauseRequest{}, apierr.Invalid("reason", "is required: say why dispatch is paused")
	case unstorable != nil:
		return jobstore.PauseRequest{}, unstorable
	case utf8.RuneCountInString(reason) > pulsetype.MaxPauseReasonChars:
		return jobstore.PauseRequest{}, apierr.Invalid("reason", "is %d characters; the limit is %d",
			utf8.RuneCountInString(reason), pulsetype.MaxPauseReasonChars)
	}
	mode, ok := pausewire.ModeFromWire(req.GetMode())
	if !ok {
		return jobstore.PauseRequest{}, apierr.Invalid("mode", "%d is not a pause mode; use drain or quiesce", int32(req.GetMode()))
	}
	scope, err := scopeOf(req.GetTopic())
	if err != nil {
		return jobstore.PauseRequest{}, err
	}
	out := jobstore.PauseRequest{Scope: scope, Mode: mode, Reason: reason}
	now := s.opts.Now()
	switch {
	case req.GetPauseFor() != nil && req.GetUntil() != nil:
		return jobstore.PauseRequest{}, apierr.Invalid(forField, "and until are both set; give one expiry or none")
	case req.GetPauseFor() != nil:
		d := req.GetPauseFor()
		if err := d.CheckValid(); err != nil || d.AsDuration() <= 0 {
			return jobstore.PauseRequest{}, apierr.Invalid(forField, "is %s; it must be a positive duration", d.AsDuration())
		}
		until := now.Add(d.AsDuration())
		if storable.Time(forField, until) != nil {
			return jobstore.PauseRequest{}, apierr.Invalid(forField, "is %s, which ends the pause after %s; give a shorter pause or none",
				d.AsDuration(), storable.MaxTime.Format(time.RFC3339))
		}
		out.Until = &until
	case req.GetUntil() != nil:
		u := req.GetUntil()
		if err := u.CheckValid(); err != nil {
			return jobstore.PauseRequest{}, apierr.Invalid("until", "is not a valid time: %v", err)
		}
		until := u.AsTime()
		if !until.After(now) {
			return jobstore.PauseRequest{}, apierr.Invalid("until", "is %s, which is not in the future", until.Format(time.RFC3339))
		}
		if err := storable.Time("until", until); err != nil {
			return jobstore.PauseRequest{}, err
		}
		out.Until = &until
	}
	return out, nil
}

// scopeOf maps a request's topic to its scope: empty is global.
func scopeOf(topic string) (string, error) {
	if topic == "" {
		return jobstore.GlobalScope, nil
	}
	if err := jobspec.ValidateTopic("topic", topic); err != nil {
		return "", err
	}
	return topic, nil
}

// actorOf is the authenticated identity the audit log records.
func actorOf(ctx context.Context) string {
	if name := auth.IdentityFrom(ctx).Name; name != "" {
		return name
	}
	return auth.Anonymous.Name
}

// An events page token is the unpadded base64url of the last listed
// event's id in decimal; the next page starts below it.
func encodeEventToken(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(id, 10)))
}

func decodeEventToken(tok string) (int64, error) {
	if b, ok := decodeToken(tok); ok {
		// Only the canonical decimal an earlier answer carried: no sign, no
		// leading zeros.
		if id, perr := strconv.ParseInt(string(b), 10, 64); perr == nil && id > 0 && strconv.FormatInt(id, 10) == string(b) {
			return id, nil
		}
	}
	return 0, apierr.Invalid("page_token", "%q is not a page token from an earlier ListDispatchEvents answer", tok)
}
