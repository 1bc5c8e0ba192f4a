package api

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"time"

	"github.com/google/uuid"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobspec"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// JobOrder is how a job listing is sorted.
type JobOrder string

// The listing orders.
const (
	// OrderSubmitted is newest submitted first (the id, a uuid v7).
	OrderSubmitted JobOrder = ""
	// OrderFinished is latest finished first, finished jobs only: dead
	// letters by their time of death.
	OrderFinished JobOrder = "finished"
)

// JobQuery is ListJobs with what the wire request does not carry yet: an
// args filter and the order. The dashboard's jobs browser uses it.
type JobQuery struct {
	Topic  string
	Status pulsev1.JobStatus
	// Args is a JSON object the listed jobs' args contain; empty does not
	// filter.
	Args []byte
	// Tag keeps the jobs carrying it; empty does not filter.
	Tag       string
	Order     JobOrder
	Limit     int32
	PageToken string
	// IncludeArgs lists the jobs with their args; without it they come
	// with none (the column is not read).
	IncludeArgs bool
}

// SearchJobs pages jobs as ListJobs does, filtered by args containment
// and in q's order. Errors name the query's fields: topic, status, args,
// tag, order, limit, page_token.
func (s *ControlService) SearchJobs(ctx context.Context, q JobQuery) (*pulsev1.ListJobsResponse, error) {
	limit := int(q.Limit)
	switch {
	case limit == 0:
		limit = ListLimitDefault
	case limit < 1 || limit > ListLimitMax:
		return nil, apierr.Invalid("limit", "is %d; it must be between 1 and %d", limit, ListLimitMax)
	}
	f := jobstore.ListFilter{Limit: limit + 1}
	if q.Topic != "" {
		if err := jobspec.ValidateTopic("topic", q.Topic); err != nil {
			return nil, err
		}
		f.Topic = q.Topic
	}
	st, err := StatusFromWire("status", q.Status)
	if err != nil {
		return nil, err
	}
	f.Status = st
	if f.Args, err = jobspec.ValidateArgsFilter("args", q.Args); err != nil {
		return nil, err
	}
	if q.Tag != "" {
		if !pulsetype.ValidTag(q.Tag) {
			return nil, apierr.Invalid("tag", "%q is not a tag: 1 to %d letters, digits, '.', '_', ':', '=', '/' or '-', starting with a letter or digit",
				q.Tag, pulsetype.MaxTagLength)
		}
		f.Tag = q.Tag
	}
	switch q.Order {
	case OrderSubmitted:
	case OrderFinished:
		f.ByFinished = true
	default:
		return nil, apierr.Invalid("order", "%q is not an order; use %q (newest submitted first) or %q (latest finished first)",
			string(q.Order), string(OrderSubmitted), string(OrderFinished))
	}
	if tok := q.PageToken; tok != "" {
		before, finished, err := decodeListToken(tok, f.ByFinished)
		if err != nil {
			return nil, err
		}
		f.Before, f.BeforeFinished = &before, finished
	}
	f.WithoutArgs = !q.IncludeArgs
	f.MaxBytes = ListPageBytesMax
	window := 0
	if f.Args != nil {
		// No index serves an args containment: the page walks at most
		// ArgsSearchWindow jobs and says where to go on (ADR-0034).
		window = ArgsSearchWindow
	}
	page, err := s.store.ListPage(ctx, f, window)
	if err != nil {
		return nil, err
	}
	jobs := page.Jobs
	out := &pulsev1.ListJobsResponse{}
	switch {
	case len(jobs) > limit:
		jobs = jobs[:limit]
		out.NextPageToken = encodeListToken(jobs[limit-1], f.ByFinished)
	case page.Cut && len(jobs) > 0:
		// The page reached ListPageBytesMax: the next goes on after its
		// last job.
		out.NextPageToken = encodeListToken(jobs[len(jobs)-1], f.ByFinished)
	case page.Resume != nil:
		out.NextPageToken = encodeCursorToken(*page.Resume, f.ByFinished)
	}
	out.Jobs = make([]*pulsev1.Job, len(jobs))
	for i, j := range jobs {
		out.Jobs[i] = JobToWire(j)
	}
	return out, nil
}

// ListPageBytesMax bounds a page of jobs in bytes: it ends early, with a
// page token, once its jobs' error histories and (when included) args
// reach it, holding at least one job. With the default 1 MiB args bound a
// page of 500 jobs could otherwise hold 500 MiB.
const ListPageBytesMax = 4 << 20

// ArgsSearchWindow is the most jobs one page of an args search walks: a
// page holds the matches among them (up to its limit) and, when the
// window ended first, a page token to go on from there, even with no job.
// So a search's cost per page is bounded whatever it matches.
const ArgsSearchWindow = 10000

// encodeCursorToken is the page token that goes on after c.
func encodeCursorToken(c jobstore.ListCursor, byFinished bool) string {
	return encodeListToken(&jobstore.Job{ID: c.ID, FinishedAt: c.Finished}, byFinished)
}

// encodeListToken is the page token after j: its id (encodePageToken), or
// for a listing by finished_at, the time in microseconds (8 bytes, big
// endian) followed by the id.
func encodeListToken(j *jobstore.Job, byFinished bool) string {
	if !byFinished || j.FinishedAt == nil {
		return encodePageToken(j.ID)
	}
	b := binary.BigEndian.AppendUint64(nil, uint64(j.FinishedAt.UnixMicro()))
	return base64.RawURLEncoding.EncodeToString(append(b, j.ID[:]...))
}

func decodeListToken(tok string, byFinished bool) (uuid.UUID, *time.Time, error) {
	if !byFinished {
		id, err := decodePageToken(tok)
		return id, nil, err
	}
	b, ok := decodeToken(tok)
	if !ok || len(b) != 8+len(uuid.UUID{}) {
		return uuid.Nil, nil, apierr.Invalid("page_token", "%q is not a page token from an earlier answer in this order", tok)
	}
	at := time.UnixMicro(int64(binary.BigEndian.Uint64(b))).UTC()
	return uuid.UUID(b[8:]), &at, nil
}
