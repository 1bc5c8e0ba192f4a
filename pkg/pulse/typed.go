package pulse

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
)

// HandlerFor adapts fn, which takes the job's args already decoded into T,
// to a [Handler], so a handler states its args type once and the compiler
// holds every caller to it:
//
//	w.Register("email.send", pulse.HandlerFor(func(ctx context.Context, job *pulse.Job, args EmailArgs) error {
//		return send(ctx, args.To, args.Subject)
//	}))
//
// The args are decoded with encoding/json, as [Job.UnmarshalArgs] does:
// fields the type does not have are ignored, so producers may add fields
// before every worker knows them. Args that do not decode into T fail the
// attempt permanently (see [Permanent]), since retrying the same bytes
// cannot help; the error names the job, its topic and T. fn is called
// only with args that decoded. HandlerFor panics if fn is nil.
func HandlerFor[T any](fn func(ctx context.Context, job *Job, args T) error) Handler {
	if fn == nil {
		panic(fmt.Sprintf("pulse: HandlerFor[%s] with a nil function", typeName[T]()))
	}
	return func(ctx context.Context, job *Job) error {
		args, err := decodeArgs[T](job)
		if err != nil {
			return Permanent(err)
		}
		return fn(ctx, job, args)
	}
}

// ArgsError is the error of an attempt whose args do not decode into the
// type its handler takes ([HandlerFor], [Topic.Register]). It is always
// wrapped in [Permanent].
type ArgsError struct {
	JobID string
	Topic string
	// Type is the Go type the args were decoded into: "main.EmailArgs".
	Type string
	Err  error
}

func (e *ArgsError) Error() string {
	return fmt.Sprintf("pulse: args of job %s (topic %s) do not decode into %s: %v", e.JobID, e.Topic, e.Type, e.Err)
}

func (e *ArgsError) Unwrap() error { return e.Err }

// Topic binds a topic name to the type of its args, so the producer and
// the worker share one declaration and the compiler checks both sides:
//
//	var SendEmail = pulse.NewTopic[EmailArgs]("email.send")
//
//	SendEmail.Enqueue(ctx, client, EmailArgs{To: "a@example.com"})   // producer
//	SendEmail.Register(w, func(ctx context.Context, job *pulse.Job, args EmailArgs) error { … }) // worker
//
// Args are sent as encoding/json encodes a T; T should encode to a JSON
// object (a struct or a map), which is what the server accepts.
type Topic[T any] struct {
	name string
}

// NewTopic declares topic name with args of type T. It panics if name is
// not a valid topic (1..[MaxTopicLength] of A-Z a-z 0-9 . _ : -, starting
// with a letter or digit), since a topic is declared once, at start-up.
func NewTopic[T any](name string) Topic[T] {
	if err := checkTopic(name); err != nil {
		panic(fmt.Sprintf("pulse: NewTopic[%s](%q): %v", typeName[T](), name, err))
	}
	return Topic[T]{name: name}
}

// Name is the topic's name.
func (t Topic[T]) Name() string { return t.name }

// Enqueue submits one job of the topic with args, as [Client.Enqueue].
func (t Topic[T]) Enqueue(ctx context.Context, c *Client, args T, opts ...EnqueueOption) (Submitted, error) {
	return c.Enqueue(ctx, t.name, args, opts...)
}

// Request is one job of the topic for [Client.EnqueueMany], or for
// another route to the queue such as package pulsetx.
func (t Topic[T]) Request(args T, opts ...EnqueueOption) JobRequest {
	return JobRequest{Topic: t.name, Args: args, Options: opts}
}

// Handler adapts fn to a [Handler] as [HandlerFor] does.
func (t Topic[T]) Handler(fn func(ctx context.Context, job *Job, args T) error) Handler {
	return HandlerFor(fn)
}

// Register makes w run fn for the topic's jobs, with their args decoded
// into T ([HandlerFor]); it panics as [Worker.Register] does.
func (t Topic[T]) Register(w *Worker, fn func(ctx context.Context, job *Job, args T) error, opts ...RegisterOption) {
	w.Register(t.name, HandlerFor(fn), opts...)
}

// Args decodes the job's args into a T, as the topic's handler would get
// them.
func (t Topic[T]) Args(job *Job) (T, error) { return decodeArgs[T](job) }

func decodeArgs[T any](job *Job) (T, error) {
	var args T
	if err := json.Unmarshal(job.Args, &args); err != nil {
		return args, &ArgsError{JobID: job.ID, Topic: job.Topic, Type: typeName[T](), Err: err}
	}
	return args, nil
}

func typeName[T any]() string { return reflect.TypeFor[T]().String() }
