package api

import (
	"context"
	"log/slog"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/jobspec"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/logging"
)

// BulkStore is the part of jobstore.Store bulk actions use.
type BulkStore interface {
	CountMatching(ctx context.Context, action jobstore.BulkAction, f jobstore.BulkFilter) (int64, error)
	CancelMatching(ctx context.Context, f jobstore.BulkFilter, batch int) (jobstore.BulkResult, error)
	DeleteMatching(ctx context.Context, f jobstore.BulkFilter, batch int) (jobstore.BulkResult, error)
}

// BulkRequest selects the jobs of a bulk action. At least one of Topic,
// Status and Args must be set: an action on every job is refused, so a
// form submitted empty by mistake does nothing.
type BulkRequest struct {
	Topic  string
	Status pulsev1.JobStatus
	// Args is a JSON object the jobs' args contain.
	Args []byte
	// DryRun counts the jobs the action would act on and acts on none.
	DryRun bool
}

// BulkOutcome is what a bulk action did, or with DryRun would do.
type BulkOutcome struct {
	DryRun bool
	// Matched is, for a dry run, how many jobs the action would act on now.
	Matched int64
	// Affected is how many jobs it canceled or deleted; Batches how many
	// statements that took.
	Affected int64
	Batches  int
	// StillMatching is how many jobs match after the action: jobs locked
	// by a claim or report at the instant their batch ran, or submitted
	// since it began. Run the action again for them.
	StillMatching int64
}

// BulkOptions configure BulkJobs.
type BulkOptions struct {
	// Batch is how many jobs one statement acts on; 0 is
	// jobstore.BulkBatchDefault.
	Batch  int
	Logger *slog.Logger // nil: discard
}

// BulkJobs cancels and deletes every job a filter matches, in batches
// (ADR-0019). The HTTP API (POST /v1/jobs/cancel, /v1/jobs/delete) and the
// dashboard's jobs browser call it; both are for operators.
type BulkJobs struct {
	store  BulkStore
	opts   BulkOptions
	logger *slog.Logger
}

// NewBulkJobs returns the bulk actions over store.
func NewBulkJobs(store BulkStore, opts BulkOptions) *BulkJobs {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &BulkJobs{store: store, opts: opts, logger: logger}
}

// CancelJobs cancels every PENDING, RETRYING or RUNNING job req matches.
func (b *BulkJobs) CancelJobs(ctx context.Context, req BulkRequest) (BulkOutcome, error) {
	return b.run(ctx, jobstore.BulkCancel, req)
}

// DeleteJobs deletes every COMPLETED, DEAD_LETTERED or CANCELED job req
// matches. A live status in the filter is refused, naming status.
func (b *BulkJobs) DeleteJobs(ctx context.Context, req BulkRequest) (BulkOutcome, error) {
	return b.run(ctx, jobstore.BulkDelete, req)
}

func (b *BulkJobs) run(ctx context.Context, action jobstore.BulkAction, req BulkRequest) (BulkOutcome, error) {
	f, err := BulkFilterOf(req)
	if err != nil {
		return BulkOutcome{}, err
	}
	if req.DryRun {
		n, err := b.store.CountMatching(ctx, action, f)
		if err != nil {
			return BulkOutcome{}, err
		}
		return BulkOutcome{DryRun: true, Matched: n}, nil
	}
	var res jobstore.BulkResult
	if action == jobstore.BulkCancel {
		res, err = b.store.CancelMatching(ctx, f, b.opts.Batch)
	} else {
		res, err = b.store.DeleteMatching(ctx, f, b.opts.Batch)
	}
	// Batches that committed stay done even when a later one failed: say
	// what was done, and who did it, either way. Args are never logged.
	attrs := []any{"action", string(action), "actor", auth.IdentityFrom(ctx).Name,
		logging.Topic, f.Topic, "status", string(f.Status), "args_filter", f.Args != nil,
		"affected", res.Affected, "batches", res.Batches}
	if err != nil {
		b.logger.WarnContext(ctx, "bulk action stopped", append(attrs, logging.Error, err)...)
		return BulkOutcome{}, err
	}
	b.logger.InfoContext(ctx, "bulk action", attrs...)
	still, err := b.store.CountMatching(ctx, action, f)
	if err != nil {
		return BulkOutcome{}, err
	}
	return BulkOutcome{Affected: res.Affected, Batches: res.Batches, StillMatching: still}, nil
}

// BulkFilterOf validates req's filter: a topic as a job's, a known status,
// args as a JSON object Postgres can store; errors name topic, status or
// args.
func BulkFilterOf(req BulkRequest) (jobstore.BulkFilter, error) {
	var f jobstore.BulkFilter
	if req.Topic != "" {
		if err := jobspec.ValidateTopic("topic", req.Topic); err != nil {
			return f, err
		}
		f.Topic = req.Topic
	}
	st, err := StatusFromWire("status", req.Status)
	if err != nil {
		return f, err
	}
	f.Status = st
	if f.Args, err = jobspec.ValidateArgsFilter("args", req.Args); err != nil {
		return f, err
	}
	if f.Topic == "" && f.Status == "" && f.Args == nil {
		return f, apierr.Invalid("filter", "is empty; name a topic, a status or args (a bulk action on every job is refused)")
	}
	return f, nil
}
