// Package pulsetx enqueues pulse jobs inside the application's own
// database transaction, for producers whose data lives in the same
// Postgres database as pulse's schema: the job exists if and only if the
// transaction commits (the transactional outbox pattern, without the
// outbox), and the gateways are woken when it commits, by the insert
// trigger's NOTIFY, which Postgres delivers at commit.
//
// A job enqueued here goes through the same validation as one submitted
// to control-api (package jobspec: topic, args, priority, max attempts,
// run_at, idempotency key, timeout, unique_for) and the same statements
// (package jobstore: the insert, the unique claim, duplicate resolution),
// so the schema holds it to the same rules. Options are the SDK's:
// pulse.Priority, pulse.Timeout, pulse.UniqueFor, pulse.IdempotencyKey...
//
//	tx, _ := pool.Begin(ctx)
//	defer tx.Rollback(ctx)
//	_, _ = tx.Exec(ctx, `INSERT INTO orders ...`)
//	_, err := pulsetx.Enqueue(ctx, tx, "order.confirm", Order{ID: 42}, pulse.UniqueFor(time.Hour))
//	if err != nil { return err }
//	return tx.Commit(ctx) // the job and the order, or neither
//
// With database/sql, EnqueueSQL takes a *sql.Tx (tested with pgx's
// database/sql driver, github.com/jackc/pgx/v5/stdlib). When to use this
// rather than the API: docs/transactional-enqueue.md.
package pulsetx
