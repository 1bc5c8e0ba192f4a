// Command worker is what an application outside the repository writes with
// the SDK alone: it enqueues a job through control-api and runs a worker
// for its topic. scripts/check-outside.sh builds it against the released
// modules; it is not run.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

type email struct {
	To string `json:"to"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	client, err := pulse.NewClient("localhost:50051")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	sub, err := client.Enqueue(ctx, "email.send", email{To: "a@example.com"}, pulse.Priority(5))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("enqueued", sub.ID)

	w, err := pulse.NewWorker([]string{"localhost:50052"}, pulse.WithConcurrency(8))
	if err != nil {
		log.Fatal(err)
	}
	w.Register("email.send", func(ctx context.Context, job *pulse.Job) error {
		var e email
		if err := job.UnmarshalArgs(&e); err != nil {
			return pulse.Permanent(err)
		}
		fmt.Println("sending to", e.To)
		return nil
	})
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
