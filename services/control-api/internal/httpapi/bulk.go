package httpapi

import (
	"bytes"
	"context"
	"net/http"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
	"github.com/pulsequeue/pulse/pkg/server/jobspec"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

// bulkBodyLimit bounds a bulk action's body: the args filter's limit and
// the few fields around it.
const bulkBodyLimit = jobspec.MaxArgsFilterBytes + 16<<10

// BulkService is what the bulk routes call: api.BulkJobs.
type BulkService interface {
	CancelJobs(ctx context.Context, req api.BulkRequest) (api.BulkOutcome, error)
	DeleteJobs(ctx context.Context, req api.BulkRequest) (api.BulkOutcome, error)
}

// RegisterBulk mounts the bulk actions on mux: POST /v1/jobs/cancel
// cancels, and POST /v1/jobs/delete deletes, every job a filter matches,
// in batches; {"dry_run": true} counts them instead (docs/operations.md).
// Both are for operators, and like every POST they are refused when a
// browser sends them from another origin.
func (h *Handler) RegisterBulk(mux Mux, svc BulkService) {
	b := &bulkRoutes{svc: svc}
	h.mount(mux, "POST /v1/jobs/cancel", h.route(b.cancel))
	h.mount(mux, "POST /v1/jobs/delete", h.route(b.delete))
}

type bulkRoutes struct {
	svc BulkService
}

type bulkFilterJSON = pulsehttp.BulkFilter

type bulkResultJSON = pulsehttp.BulkResult

func (b *bulkRoutes) cancel(w http.ResponseWriter, r *http.Request) error {
	return b.act(w, r, b.svc.CancelJobs)
}

func (b *bulkRoutes) delete(w http.ResponseWriter, r *http.Request) error {
	return b.act(w, r, b.svc.DeleteJobs)
}

func (b *bulkRoutes) act(w http.ResponseWriter, r *http.Request, run func(context.Context, api.BulkRequest) (api.BulkOutcome, error)) error {
	body, err := readBody(w, r, bulkBodyLimit, "body", "; an args filter may be at most 64 KiB")
	if err != nil {
		return err
	}
	var in bulkFilterJSON
	if err := decodeStorable(body, "", &in); err != nil {
		return err
	}
	req := api.BulkRequest{Topic: in.Topic, DryRun: in.DryRun}
	if !bytes.Equal(bytes.TrimSpace(in.Args), []byte("null")) {
		req.Args = in.Args
	}
	if in.Status != "" {
		if req.Status, err = parseStatus(in.Status); err != nil {
			return err
		}
	}
	out, err := run(r.Context(), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, bulkResultJSON{
		DryRun: out.DryRun, Matched: out.Matched, Affected: out.Affected,
		Batches: out.Batches, StillMatching: out.StillMatching,
	})
}
