package ui

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// TopicService is the part of the TopicService (pulsev1.TopicServiceServer)
// the overview's per-topic table calls: the numbers of every topic, and
// setting or clearing a topic's fleet-wide max_running limit.
type TopicService interface {
	ListTopics(ctx context.Context, req *pulsev1.ListTopicsRequest) (*pulsev1.ListTopicsResponse, error)
	SetTopicLimit(ctx context.Context, req *pulsev1.SetTopicLimitRequest) (*pulsev1.SetTopicLimitResponse, error)
}

// topicRow is one topic in the overview's table.
type topicRow struct {
	Topic        string
	Pending      int64
	Running      int64
	Retrying     int64
	DeadLettered int64
	Completed    int64 // in the last hour
	Failed       int64 // in the last hour
	// OldestDue is the oldest due job's wait ("3m"); empty when none is
	// due.
	OldestDue string
	// Limit is max_running ("" when the topic has none).
	Limit   string
	Paused  bool
	Workers int32
	// LimitBy says who set the limit and when, for its tooltip.
	LimitBy string
	// Rate is the topic's rate limit, "10 / 1s" and "per job key" or
	// "per args.tenant" when it counts per key; empty when it has none.
	Rate string
	// PerKey is the topic's per-key limits, "2 running per key" and
	// "sequences, block on failure"; empty when it has none.
	PerKey string
}

type topicsView struct {
	Topics []topicRow
	Error  string
}

// topicsOf reads the table; a failure shows in the panel, not as the
// page's error.
func (d *Dashboard) topicsOf(r *http.Request) *topicsView {
	if d.opts.Topics == nil {
		return nil
	}
	resp, err := d.opts.Topics.ListTopics(r.Context(), &pulsev1.ListTopicsRequest{})
	if err != nil {
		d.logger.Warn("dashboard: list topics", "error", err)
		return &topicsView{Error: "The topics cannot be read right now: " + err.Error()}
	}
	v := &topicsView{}
	for _, t := range resp.GetTopics() {
		row := topicRow{
			Topic: t.GetTopic(), Pending: t.GetPending(), Running: t.GetRunning(), Retrying: t.GetRetrying(),
			DeadLettered: t.GetDeadLettered(), Completed: t.GetCompletedLastHour(), Failed: t.GetFailedLastHour(),
			Paused: t.GetPaused(), Workers: t.GetConnectedWorkers(),
		}
		if a := t.GetOldestPendingAge(); a != nil {
			row.OldestDue = ageWords(a.AsDuration())
		}
		if t.MaxRunning != nil {
			row.Limit = strconv.Itoa(int(t.GetMaxRunning()))
			row.LimitBy = "set by " + t.GetLimitUpdatedBy()
			if at := t.GetLimitUpdatedAt(); at != nil {
				row.LimitBy += " at " + at.AsTime().UTC().Format("2006-01-02 15:04:05 UTC")
			}
		}
		var perKey []string
		if t.MaxRunningPerKey != nil {
			perKey = append(perKey, fmt.Sprintf("%d running per key", t.GetMaxRunningPerKey()))
		}
		if p := t.GetSequenceOnFailure(); p != "" {
			perKey = append(perKey, "sequences, "+p+" on failure")
		}
		row.PerKey = strings.Join(perKey, "; ")
		if rl := t.GetRateLimit(); rl != nil {
			row.Rate = fmt.Sprintf("%d / %s", rl.GetLimit(), rl.GetInterval().AsDuration())
			switch key := rl.GetKey(); {
			case key == "job":
				row.Rate += " per job key"
			case strings.HasPrefix(key, "args:"):
				row.Rate += " per args." + strings.TrimPrefix(key, "args:")
			}
		}
		v.Topics = append(v.Topics, row)
	}
	return v
}

// ageWords is a wait in its two largest units: "45s", "3m 20s", "2h 5m".
func ageWords(d time.Duration) string {
	switch {
	case d < time.Second:
		return "<1s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd %dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// setTopicLimit posts a row's limit form: "set" with max_running, or
// "clear". The outcome, or the refusal naming the field, comes back as the
// overview's flash.
func (d *Dashboard) setTopicLimit(w http.ResponseWriter, r *http.Request) error {
	back := backTo(r, "/ui/")
	topic := strings.TrimSpace(r.PostFormValue("topic"))
	req := &pulsev1.SetTopicLimitRequest{Topic: topic}
	clearLimit := r.PostFormValue("op") == "clear"
	if !clearLimit {
		raw := strings.TrimSpace(r.PostFormValue("max_running"))
		if raw == "" {
			redirectWithFlash(w, r, back, "error", "Limit: max_running: is required; use Clear to remove the limit of "+topic)
			return nil
		}
		n, err := strconv.ParseInt(raw, 10, 32)
		if err != nil {
			redirectWithFlash(w, r, back, "error", fmt.Sprintf("Limit: max_running: %q is not a whole number", raw))
			return nil //nolint:nilerr // the refusal is the flash message on the redirect
		}
		limit := int32(n)
		req.MaxRunning = &limit
	}
	if d.opts.Topics == nil {
		return apierr.NotFound("route", r.Method+" "+r.URL.Path)
	}
	if _, err := d.opts.Topics.SetTopicLimit(r.Context(), req); err != nil {
		// Whatever the service refused, including a build without limits,
		// is the operator's to read on the page; only a fault is a page.
		if apierr.Concealed(err) {
			return err
		}
		redirectWithFlash(w, r, back, "error", "Limit: "+err.Error())
		return nil
	}
	msg := fmt.Sprintf("Topic %s: at most %d running", topic, req.GetMaxRunning())
	if clearLimit {
		msg = "Topic " + topic + ": no limit"
	}
	redirectWithFlash(w, r, back, "ok", msg)
	return nil
}
