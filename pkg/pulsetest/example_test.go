package pulsetest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/pulsetest"
)

// WelcomeArgs are the args of the application's "signup.welcome" jobs.
type WelcomeArgs struct {
	Email string `json:"email"`
}

// SendWelcome is declared once and shared by the producer and the worker.
var SendWelcome = pulse.NewTopic[WelcomeArgs]("signup.welcome")

// sendWelcome is the application's handler.
func sendWelcome(_ context.Context, _ *pulse.Job, args WelcomeArgs) error {
	if args.Email == "" {
		return pulse.Permanent(errors.New("no email address"))
	}
	return nil
}

// Run a handler on one job, as a worker would, and look at what the worker
// reported.
func ExampleWork() {
	t := exampleT() // in a test: the *testing.T
	defer t.finish()
	ctx := context.Background()

	res := pulsetest.Work(ctx, t, SendWelcome.Handler(sendWelcome), WelcomeArgs{Email: "a@example.com"},
		pulsetest.WithTopic(SendWelcome.Name()))
	fmt.Println("completed:", res.Completed())

	res = pulsetest.Work(ctx, t, SendWelcome.Handler(sendWelcome), WelcomeArgs{})
	fmt.Println("dead-lettered:", res.RequirePermanent(t))

	res = pulsetest.Work(ctx, t, SendWelcome.Handler(sendWelcome), []byte(`{"email": 42}`), pulsetest.WithJobID("job-1"))
	fmt.Println("dead-lettered:", res.RequirePermanent(t))
	// Output:
	// completed: true
	// dead-lettered: no email address
	// dead-lettered: pulse: args of job job-1 (topic pulsetest) do not decode into pulsetest_test.WelcomeArgs: json: cannot unmarshal number into Go struct field WelcomeArgs.email of type string
}

// Assert what the application's real pulse.Client enqueued.
func ExampleControl_RequireEnqueued() {
	t := exampleT()
	defer t.finish()
	ctl := pulsetest.NewControl(t)
	client := ctl.Client(t) // or pulse.NewClient(ctl.Addr(), …) in the application's own wiring

	// The code under test:
	if _, err := SendWelcome.Enqueue(context.Background(), client, WelcomeArgs{Email: "a@example.com"}, pulse.Priority(8)); err != nil {
		fmt.Println(err)
	}

	job := ctl.RequireEnqueued(t, "signup.welcome", WelcomeArgs{Email: "a@example.com"})
	fmt.Println(job.Topic, string(job.Args), job.Priority)
	ctl.RequireNotEnqueued(t, "signup.reminder")
	// Output:
	// signup.welcome {"email":"a@example.com"} 8
}

// Run the application's own worker, built by its own wiring, against an
// in-process gateway.
func ExampleGateway_Dispatch() {
	t := exampleT()
	defer t.finish()
	gw := pulsetest.NewGateway(t)

	// The application's wiring, pointed at the gateway:
	w, err := pulse.NewWorker([]string{gw.Addr()}, pulse.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	SendWelcome.Register(w, sendWelcome)
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	defer func() { stop(); <-ran }() //nolint:errcheck // the worker's result after stop is not the example's point

	res := gw.Dispatch(context.Background(), t, "signup.welcome", WelcomeArgs{Email: "a@example.com"})
	fmt.Println("completed:", res.Completed())
	// Output:
	// completed: true
}

// exampleTB is what an example passes where a test passes its
// *testing.T: it prints a failure and runs the cleanups at finish.
type exampleTB struct {
	testing.TB
	cleanups []func()
}

func exampleT() *exampleTB { return &exampleTB{} }

func (e *exampleTB) Helper()                           {}
func (e *exampleTB) Log(...any)                        {}
func (e *exampleTB) Errorf(format string, args ...any) { fmt.Printf("FAIL: "+format+"\n", args...) }
func (e *exampleTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf("FAIL: "+format, args...)) }
func (e *exampleTB) Cleanup(f func())                  { e.cleanups = append(e.cleanups, f) }
func (e *exampleTB) finish() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}
