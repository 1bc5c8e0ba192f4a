package pulse_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

type Email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

// A topic declared once with its args type; the producer's Enqueue and
// the worker's handler are both checked against Email by the compiler.
func ExampleNewTopic() {
	sendEmail := pulse.NewTopic[Email]("email.send")

	// Producer: sendEmail.Enqueue(ctx, client, Email{...}); for a batch:
	req := sendEmail.Request(Email{To: "a@example.com", Subject: "hi"}, pulse.Priority(7))
	fmt.Println(req.Topic)

	// Worker: sendEmail.Register(w, handle). The handler as the worker
	// runs it, on args that decode and on args that do not:
	h := sendEmail.Handler(func(_ context.Context, _ *pulse.Job, e Email) error {
		fmt.Println("sending to", e.To)
		return nil
	})
	_ = h(context.Background(), &pulse.Job{ID: "j1", Topic: "email.send", Args: json.RawMessage(`{"to":"a@example.com"}`)})
	err := h(context.Background(), &pulse.Job{ID: "j2", Topic: "email.send", Args: json.RawMessage(`{"to":["a","b"]}`)})
	var argsErr *pulse.ArgsError
	fmt.Println(pulse.IsPermanent(err), errors.As(err, &argsErr), argsErr.Type)
	// Output:
	// email.send
	// sending to a@example.com
	// true true pulse_test.Email
}
