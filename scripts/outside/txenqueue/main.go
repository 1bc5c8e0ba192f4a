// Command txenqueue is what an application outside the repository writes
// to enqueue a job in its own database transaction (pkg/pulsetx):
// scripts/check-outside.sh builds it against the released modules; it is
// not run.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/pulsetx"
)

func main() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)

	tx, err := conn.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES (42)`); err != nil {
		log.Fatal(err)
	}
	sub, err := pulsetx.Enqueue(ctx, tx, "order.confirm", map[string]int{"order": 42}, pulse.UniqueFor(time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("enqueued", sub.ID, "with the order")
}
