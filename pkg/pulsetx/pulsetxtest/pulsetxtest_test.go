package pulsetxtest_test

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/pulsetx"
	"github.com/pulsequeue/pulse/pkg/pulsetx/pulsetxtest"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

func TestMain(m *testing.M) {
	os.Exit(pgtest.MainLeakChecked(m))
}

type order struct {
	ID    int    `json:"id"`
	Email string `json:"email"`
}

// failure runs f with a TB that records what failed it.
func failure(f func(t testing.TB)) string {
	r := &recordingT{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.fatal
}

type recordingT struct {
	testing.TB
	fatal string
}

func (r *recordingT) Helper() {}
func (r *recordingT) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestRequireEnqueuedSeesTheTransactionsOwnJobs(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Pool(t)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // rolled back by the test's end
	sub, err := pulsetx.Enqueue(ctx, tx, "order.confirm", order{ID: 42, Email: "a@example.com"},
		pulse.Priority(8), pulse.Timeout(time.Minute), pulse.IdempotencyKey("order-42"))
	require.NoError(t, err)

	job := pulsetxtest.RequireEnqueued(ctx, t, tx, "order.confirm", order{ID: 42, Email: "a@example.com"})
	require.Equal(t, sub.ID, job.ID)
	require.Equal(t, pulsetype.StatusPending, job.Status)
	require.Equal(t, 8, job.Priority)
	require.Equal(t, pulsetype.DefaultMaxAttempts, job.MaxAttempts)
	require.Equal(t, time.Minute, job.Timeout)
	require.Equal(t, "order-42", job.IdempotencyKey)
	require.JSONEq(t, `{"id":42,"email":"a@example.com"}`, string(job.Args))

	// Args compare as jsonb values: key order, spacing and number spelling.
	pulsetxtest.RequireEnqueued(ctx, t, tx, "order.confirm", json.RawMessage(`{ "email":"a@example.com", "id": 42.0 }`))
	pulsetxtest.RequireEnqueued(ctx, t, tx, "order.confirm", nil)
	require.Len(t, pulsetxtest.Enqueued(ctx, t, tx, "order.confirm"), 1)
	pulsetxtest.RequireNotEnqueued(ctx, t, tx, "order.cancel")

	// Outside the transaction, before it commits, there is nothing.
	require.Contains(t, failure(func(ft testing.TB) { pulsetxtest.RequireEnqueued(ctx, ft, pool, "order.confirm", nil) }),
		`no job of topic "order.confirm" with args (any); jobs of the topic: none`)
	msg := failure(func(ft testing.TB) { pulsetxtest.RequireEnqueued(ctx, ft, tx, "order.confirm", order{ID: 43}) })
	require.Contains(t, msg, `no job of topic "order.confirm" with args {"id":43,"email":""}`)
	require.Contains(t, msg, sub.ID+" PENDING")
	require.Contains(t, failure(func(ft testing.TB) { pulsetxtest.RequireNotEnqueued(ctx, ft, tx, "order.confirm") }),
		`want no job of topic "order.confirm"`)
	require.Contains(t, failure(func(ft testing.TB) { pulsetxtest.RequireEnqueued(ctx, ft, tx, "order.confirm", func() {}) }),
		"encode args")

	require.NoError(t, tx.Commit(ctx))
	pulsetxtest.RequireEnqueued(ctx, t, pool, "order.confirm", order{ID: 42, Email: "a@example.com"})
}

func TestRequireEnqueuedSQL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := stdlib.OpenDBFromPool(pgtest.Pool(t))
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck // rolled back by the test's end
	_, err = pulsetx.EnqueueSQL(ctx, tx, "order.confirm", order{ID: 7})
	require.NoError(t, err)
	job := pulsetxtest.RequireEnqueuedSQL(ctx, t, tx, "order.confirm", order{ID: 7})
	require.Equal(t, pulsetype.DefaultPriority, job.Priority)
	require.Contains(t, failure(func(ft testing.TB) { pulsetxtest.RequireEnqueuedSQL(ctx, ft, tx, "order.confirm", order{ID: 8}) }),
		`no job of topic "order.confirm"`)
}
