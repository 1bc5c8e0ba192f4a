package pulse

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/durationpb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// Worker defaults, named so the documentation and the code cannot drift.
const (
	// DefaultConcurrency is how many handlers a worker runs at once unless
	// [WithConcurrency] says otherwise.
	DefaultConcurrency = 10
	// DefaultShutdownTimeout is how long [Worker.Run] waits for running
	// handlers after its context is done before canceling them.
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultMaxReportBatch caps how many results one ReportResult RPC carries.
	DefaultMaxReportBatch = 1000
)

// ClientOption configures a [Client].
type ClientOption interface {
	applyClient(*clientConfig)
}

// WorkerOption configures a [Worker].
type WorkerOption interface {
	applyWorker(*workerConfig)
}

// ConnOption configures the gRPC connection and is accepted by both
// [NewClient] and [NewWorker], so producer and worker code configure
// transport and credentials the same way.
type ConnOption interface {
	ClientOption
	WorkerOption
}

// connConfig is the connection configuration shared by clients and workers.
type connConfig struct {
	dialOptions []grpc.DialOption
	// tls is WithTLS's or WithTLSFiles's configuration; nil is plaintext.
	tls *tls.Config
	// credentials is set by WithPerRPCCredentials (and WithUserPass), for
	// the plaintext check (tls.go); allowPlaintextCredentials lifts it.
	credentials               bool
	allowPlaintextCredentials bool
	errs                      []error
}

// grpcDialOptions returns the options for grpc.NewClient: TLS when WithTLS
// or WithTLSFiles set it, else insecure transport, then the caller's
// options, which win because gRPC applies dial options in order.
func (c *connConfig) grpcDialOptions(extra ...grpc.DialOption) []grpc.DialOption {
	transport := insecureCredentials()
	if c.tls != nil {
		transport = credentials.NewTLS(c.tls)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(transport)}
	opts = append(opts, extra...)
	return append(opts, c.dialOptions...)
}

type connOption func(*connConfig)

func (o connOption) applyClient(c *clientConfig) { o(&c.conn) }
func (o connOption) applyWorker(c *workerConfig) { o(&c.conn) }

// WithDialOptions passes options to grpc.NewClient, for tracing
// (grpc.WithStatsHandler with otelgrpc) or anything else the SDK does not
// wrap. They are applied after the SDK's defaults, so they override them.
// For TLS use [WithTLS] or [WithTLSFiles]: transport credentials set here
// are invisible to the check that keeps credentials off plaintext
// connections.
func WithDialOptions(opts ...grpc.DialOption) ConnOption {
	return connOption(func(c *connConfig) {
		c.dialOptions = append(c.dialOptions, opts...)
	})
}

// WithPerRPCCredentials attaches credentials to every RPC, so any
// authentication scheme the services accept can be plugged in. Over a
// plaintext connection to an address that is not loopback, [NewClient] and
// [NewWorker] refuse them ([ErrPlaintextCredentials]) unless
// [AllowPlaintextCredentials] is given.
func WithPerRPCCredentials(creds credentials.PerRPCCredentials) ConnOption {
	return connOption(func(c *connConfig) {
		c.dialOptions = append(c.dialOptions, grpc.WithPerRPCCredentials(creds))
		c.credentials = true
	})
}

// WithUserPass authenticates every RPC with HTTP Basic credentials, the
// scheme the pulse services accept for producers, workers and operators.
// Outside loopback it needs TLS ([WithTLS], [WithTLSFiles]) or, on a
// trusted network, [AllowPlaintextCredentials].
func WithUserPass(user, pass string) ConnOption {
	return WithPerRPCCredentials(basicAuth{user: user, pass: pass})
}

// clientConfig is everything a ClientOption can set.
type clientConfig struct {
	conn         connConfig
	interceptors []EnqueueInterceptor
}

type clientOption func(*clientConfig)

func (o clientOption) applyClient(c *clientConfig) { o(c) }

// EnqueueFunc submits one job; [EnqueueInterceptor]s call the next one.
type EnqueueFunc func(ctx context.Context, req *JobRequest) (Submitted, error)

// EnqueueInterceptor wraps every job a [Client] enqueues, for logging,
// metrics, per-tenant defaults or refusing a job before it leaves the
// process. It may change req (its Options are applied in order, so an
// option appended last wins) and ctx, must call next at most once, and
// returns what next returned or its own answer. A job of
// [Client.EnqueueMany] passes through the interceptors on its own; the
// batch is sent once every job has reached the end of its chain, and if
// any interceptor returns an error instead, nothing is sent and every job
// of the batch fails.
type EnqueueInterceptor func(ctx context.Context, req *JobRequest, next EnqueueFunc) (Submitted, error)

// WithEnqueueInterceptor adds interceptors around every enqueue, the first
// outermost. Several WithEnqueueInterceptor options add up in order.
func WithEnqueueInterceptor(interceptors ...EnqueueInterceptor) ClientOption {
	return clientOption(func(c *clientConfig) {
		for _, i := range interceptors {
			if i != nil {
				c.interceptors = append(c.interceptors, i)
			}
		}
	})
}

// workerConfig is everything a WorkerOption can set.
type workerConfig struct {
	conn            connConfig
	concurrency     int
	workerID        string
	logger          *slog.Logger
	shutdownTimeout time.Duration
	maxReportBatch  int
	// settleBehind is how many finished attempts may wait for their
	// results to settle after their slots went back; -1 until set, then
	// the concurrency (Worker.Run).
	settleBehind int
	errs         []error
}

func defaultWorkerConfig() workerConfig {
	return workerConfig{
		concurrency:     DefaultConcurrency,
		logger:          slog.Default(),
		shutdownTimeout: DefaultShutdownTimeout,
		maxReportBatch:  DefaultMaxReportBatch,
		settleBehind:    -1,
	}
}

// settleBehindOrDefault is the WithSettleBehind value, or the concurrency.
func (c *workerConfig) settleBehindOrDefault() int {
	if c.settleBehind < 0 {
		return c.concurrency
	}
	return c.settleBehind
}

func (c *workerConfig) validate() error {
	return errors.Join(c.errs...)
}

type workerOption func(*workerConfig)

func (o workerOption) applyWorker(c *workerConfig) { o(c) }

// WithConcurrency sets how many handlers run at once; the worker declares it
// to the gateway, which never sends more jobs than there are free slots.
// It must be positive.
func WithConcurrency(n int) WorkerOption {
	return workerOption(func(c *workerConfig) {
		if n <= 0 {
			c.errs = append(c.errs, fmt.Errorf("pulse: concurrency must be positive, got %d", n))
			return
		}
		c.concurrency = n
	})
}

// WithWorkerID sets the identity stored as the job's locked_by, so operators
// can tell which process holds a lease. The default, hostname-pid-<random>,
// is unique per process; set one only if it stays unique too.
func WithWorkerID(id string) WorkerOption {
	return workerOption(func(c *workerConfig) {
		if id == "" {
			c.errs = append(c.errs, errors.New("pulse: worker id must not be empty"))
			return
		}
		if len(id) > MaxWorkerIDBytes {
			c.errs = append(c.errs, fmt.Errorf("pulse: worker id is %d bytes; the limit is %d", len(id), MaxWorkerIDBytes))
			return
		}
		c.workerID = id
	})
}

// WithLogger sets where the worker logs connection changes, rejected results
// and handler panics; the default is slog.Default(). Job arguments are never
// logged. Its lines about a job carry the job's trace_id and span_id
// (pkg/tracelog wraps the logger's handler); wrap the logger handlers log
// with the same way and log with their ctx for theirs to carry them too.
func WithLogger(l *slog.Logger) WorkerOption {
	return workerOption(func(c *workerConfig) {
		if l == nil {
			c.errs = append(c.errs, errors.New("pulse: logger must not be nil"))
			return
		}
		c.logger = l
	})
}

// WithShutdownTimeout bounds how long [Worker.Run] waits for running
// handlers after its context is done; handlers still running then have
// their context canceled with [ErrWorkerShutdown]. Keep it below the
// platform's kill grace period (Kubernetes: terminationGracePeriodSeconds).
func WithShutdownTimeout(d time.Duration) WorkerOption {
	return workerOption(func(c *workerConfig) {
		if d < 0 {
			c.errs = append(c.errs, fmt.Errorf("pulse: shutdown timeout must not be negative, got %s", d))
			return
		}
		c.shutdownTimeout = d
	})
}

// WithMaxReportBatch caps how many results one ReportResult RPC carries, to
// keep a single request bounded when many handlers finish together.
func WithMaxReportBatch(n int) WorkerOption {
	return workerOption(func(c *workerConfig) {
		if n <= 0 {
			c.errs = append(c.errs, fmt.Errorf("pulse: max report batch must be positive, got %d", n))
			return
		}
		c.maxReportBatch = n
	})
}

// WithSettleBehind sets how many finished attempts may still wait for their
// results to be settled (acknowledged by a gateway, written by it to
// Postgres) after their slots went back. A handler's slot is handed back
// when it returns, so the next job starts while the result travels; only
// when n results are already waiting does a slot wait for its own
// result to settle. The default is the worker's concurrency; 0 makes
// every slot wait for its result, so the worker never holds more leased
// (RUNNING) jobs than its concurrency.
//
// Either way at most concurrency handlers run and the gateway never sends
// more jobs than there are free slots; a worker holds at most concurrency
// + n leases, and results that cannot be delivered stop the slots from
// coming back once n are waiting (ADR-0023). It must not be negative.
func WithSettleBehind(n int) WorkerOption {
	return workerOption(func(c *workerConfig) {
		if n < 0 {
			c.errs = append(c.errs, fmt.Errorf("pulse: settle-behind must not be negative, got %d", n))
			return
		}
		c.settleBehind = n
	})
}

// EnqueueOption sets one property of a job being enqueued.
type EnqueueOption func(*enqueueConfig)

// enqueueConfig collects what EnqueueOptions set; errs holds values out of
// range so Enqueue can fail before any RPC.
type enqueueConfig struct {
	priority       int32
	hasPriority    bool
	maxAttempts    int32
	runAt          time.Time
	idempotencyKey string
	timeout        time.Duration
	uniqueFor      time.Duration
	retry          *pulsev1.RetryPolicy
	tags           []string
	replaceKey     string
	rateKey        string
	concurrencyKey string
	sequenceKey    string
	replaceMode    pulsev1.ReplaceMode
	dependsOn      []*pulsev1.Dependency
	errs           []error
}

// Job property ranges, checked before sending so a mistake is reported
// without a round trip; the server checks them again. They are
// pulsetype's limits, which the schema holds too.
const (
	MinPriority    = pulsetype.MinPriority
	MaxPriority    = pulsetype.MaxPriority
	MinMaxAttempts = pulsetype.MinMaxAttempts
	MaxMaxAttempts = pulsetype.MaxMaxAttempts
	// MinTimeout and MaxTimeout bound [Timeout] and [WithTimeout].
	MinTimeout = pulsetype.MinTimeout
	MaxTimeout = pulsetype.MaxTimeout
	// MinUniqueFor and MaxUniqueFor bound [UniqueFor].
	MinUniqueFor = pulsetype.MinUniqueFor
	MaxUniqueFor = pulsetype.MaxUniqueFor
	// MinRetryDelay and MaxRetryDelay bound every duration of
	// [ExponentialBackoff] and [FixedBackoff], and the wait [RetryAfter]
	// asks for.
	MinRetryDelay = pulsetype.MinRetryDelay
	MaxRetryDelay = pulsetype.MaxRetryDelay
	// MaxIdempotencyKeyBytes bounds [IdempotencyKey].
	MaxIdempotencyKeyBytes = pulsetype.MaxIdempotencyKeyBytes
	// MaxReplaceKeyBytes bounds [ReplacePending]'s key.
	MaxReplaceKeyBytes = pulsetype.MaxReplaceKeyBytes
	// MaxRateKeyBytes bounds [RateKey]'s key.
	MaxRateKeyBytes = pulsetype.MaxRateKeyBytes
	// MaxFlowKeyBytes bounds [ConcurrencyKey]'s and [SequenceKey]'s key.
	MaxFlowKeyBytes = pulsetype.MaxFlowKeyBytes
	// MaxTopicLength bounds a topic name; see [pulsetype.TopicPattern]
	// for its characters.
	MaxTopicLength = pulsetype.MaxTopicLength
	// MaxWorkerIDBytes bounds [WithWorkerID].
	MaxWorkerIDBytes = pulsetype.MaxWorkerIDBytes
)

// Priority sets the job's priority, MinPriority..MaxPriority; higher runs
// first. Without it the server's default applies.
func Priority(p int) EnqueueOption {
	return func(c *enqueueConfig) {
		if p < MinPriority || p > MaxPriority {
			c.errs = append(c.errs, fmt.Errorf("pulse: priority %d out of range %d..%d", p, MinPriority, MaxPriority))
			return
		}
		c.priority, c.hasPriority = int32(p), true
	}
}

// MaxAttempts sets how many attempts the job gets before it is
// dead-lettered, MinMaxAttempts..MaxMaxAttempts. Without it the server's
// default applies.
func MaxAttempts(n int) EnqueueOption {
	return func(c *enqueueConfig) {
		if n < MinMaxAttempts || n > MaxMaxAttempts {
			c.errs = append(c.errs, fmt.Errorf("pulse: max attempts %d out of range %d..%d", n, MinMaxAttempts, MaxMaxAttempts))
			return
		}
		c.maxAttempts = int32(n)
	}
}

// RunAt sets the earliest time the job may start, for work that must not
// happen before a given moment. The last of RunAt and Delay wins.
func RunAt(t time.Time) EnqueueOption {
	return func(c *enqueueConfig) { c.runAt = t }
}

// Delay makes the job start no earlier than d after the Enqueue call, by the
// producer's clock. The last of RunAt and Delay wins.
func Delay(d time.Duration) EnqueueOption {
	return func(c *enqueueConfig) { c.runAt = time.Now().Add(d) }
}

// Tags labels the job for listings to filter by ([ListOptions.Tag], GET
// /v1/jobs?tag=, the dashboard): at most pulsetype.MaxTags in all, each
// 1..pulsetype.MaxTagLength letters, digits, '.', '_', ':', '=', '/' or
// '-' starting with a letter or digit ("tenant=acme", "batch-7").
// Repeated calls add; duplicates are dropped. Tags never change.
func Tags(tags ...string) EnqueueOption {
	return func(c *enqueueConfig) {
		for _, tag := range tags {
			if !pulsetype.ValidTag(tag) {
				c.errs = append(c.errs, fmt.Errorf("pulse: %q is not a tag: 1 to %d letters, digits, '.', '_', ':', '=', '/' or '-', starting with a letter or digit",
					tag, pulsetype.MaxTagLength))
				return
			}
		}
		c.tags = append(c.tags, tags...)
	}
}

// IdempotencyKey makes a retried Enqueue safe: while a job with the same key
// is live (pending, running or retrying), enqueuing again returns that job
// with Submitted.Duplicate set instead of creating another. The key is at
// most MaxIdempotencyKeyBytes of valid UTF-8 without NUL; empty means none.
func IdempotencyKey(key string) EnqueueOption {
	return func(c *enqueueConfig) {
		if err := checkIdempotencyKey(key); err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.idempotencyKey = key
	}
}

// ReplaceMode is what [ReplacePending] does to the key's pending job.
type ReplaceMode int32

// The replace modes.
const (
	// Replace: the pending job takes this job's args and run time.
	Replace ReplaceMode = ReplaceMode(pulsev1.ReplaceMode_REPLACE_MODE_REPLACE)
	// KeepEarlierRunAt: the pending job takes this job's args, and the
	// earlier of the two run times (a debounce that never postpones).
	KeepEarlierRunAt ReplaceMode = ReplaceMode(pulsev1.ReplaceMode_REPLACE_MODE_KEEP_EARLIER_RUN_AT)
	// KeepFirst: the pending job stays as it is; Enqueue returns it with
	// Submitted.Duplicate set.
	KeepFirst ReplaceMode = ReplaceMode(pulsev1.ReplaceMode_REPLACE_MODE_KEEP_FIRST)
)

// ReplacePending debounces: while a job of the topic enqueued with the
// same key is still pending and has never started, Enqueue changes that
// job as mode says instead of adding one, and returns it with
// Submitted.Replaced (and Duplicate) set; once that job has started, the
// next Enqueue with the key adds a new job. Only args and the run time
// are replaced; the rest stays the first job's. Each replacement is kept
// in the job's history. The key is 1..MaxReplaceKeyBytes of valid UTF-8
// without NUL; not with [IdempotencyKey] or [UniqueFor].
func ReplacePending(key string, mode ReplaceMode) EnqueueOption {
	return func(c *enqueueConfig) {
		if err := checkReplaceKey(key); err != nil {
			c.errs = append(c.errs, err)
			return
		}
		switch mode {
		case Replace, KeepEarlierRunAt, KeepFirst:
		default:
			c.errs = append(c.errs, fmt.Errorf("pulse: replace mode %d is not Replace, KeepEarlierRunAt or KeepFirst", mode))
			return
		}
		c.replaceKey, c.replaceMode = key, pulsev1.ReplaceMode(mode)
	}
}

// RateKey is the key the job's topic counts its start under when the
// topic's rate limit is per job key (docs/flow-control.md): at most the
// limit's starts per interval for each key, fleet-wide, and one key at
// its limit never holds back another. 1..MaxRateKeyBytes of valid UTF-8
// without NUL. A topic limited as a whole ignores it.
func RateKey(key string) EnqueueOption {
	return func(c *enqueueConfig) {
		if err := checkRateKey(key); err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.rateKey = key
	}
}

// ConcurrencyKey is the key the job's topic counts it under while it runs
// when the topic has a per-key cap (max_running_per_key,
// docs/flow-control.md): at most the cap RUNNING per key, fleet-wide, and
// the claims serve the keys round-robin, so one key's backlog never
// starves another key. 1..MaxFlowKeyBytes of valid UTF-8 without NUL.
func ConcurrencyKey(key string) EnqueueOption {
	return func(c *enqueueConfig) {
		if err := checkKey("concurrency key", key, MaxFlowKeyBytes); err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.concurrencyKey = key
	}
}

// SequenceKey makes the job start only after every job of its topic
// submitted earlier with the same key has finished, one at a time, in
// submit order (docs/flow-control.md). The topic needs a sequence policy
// (what a dead-lettered job does to the jobs after it), or the submit is
// refused. 1..MaxFlowKeyBytes of valid UTF-8 without NUL.
func SequenceKey(key string) EnqueueOption {
	return func(c *enqueueConfig) {
		if err := checkKey("sequence key", key, MaxFlowKeyBytes); err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.sequenceKey = key
	}
}

// Timeout bounds each attempt of the job to d, MinTimeout..MaxTimeout: the
// handler's context carries the deadline, and an attempt still running
// when it passes fails with "timed out after d" and is retried like any
// failure (the handler should return once its context is done). It wins
// over the worker's per-topic [WithTimeout].
func Timeout(d time.Duration) EnqueueOption {
	return func(c *enqueueConfig) {
		if err := checkDuration("timeout", d, MinTimeout, MaxTimeout); err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.timeout = d
	}
}

// UniqueFor makes the job unique by topic and args for d,
// MinUniqueFor..MaxUniqueFor: while a job with the same topic and the
// same args (compared as JSON values: key order and spacing do not matter)
// enqueued less than d ago exists, whatever its status, enqueuing again
// returns that job with Submitted.Duplicate set instead of creating
// another. Postgres enforces it, so racing producers create one job.
func UniqueFor(d time.Duration) EnqueueOption {
	return func(c *enqueueConfig) {
		if err := checkDuration("unique for", d, MinUniqueFor, MaxUniqueFor); err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.uniqueFor = d
	}
}

// ExponentialBackoff gives the job its own backoff between attempts:
// failed attempt n waits about base × 2^(n-1), never more than maxDelay
// (zero: the server's retry policy's cap), jittered down by up to a fifth
// so jobs that failed together do not all come back together. Both are
// MinRetryDelay..MaxRetryDelay, maxDelay at least base. Without it or
// [FixedBackoff] the server's retry policy applies; the last of the two
// wins. A lapsed lease (the worker died) waits the same.
func ExponentialBackoff(base, maxDelay time.Duration) EnqueueOption {
	return func(c *enqueueConfig) {
		err := checkDuration("backoff base", base, MinRetryDelay, MaxRetryDelay)
		if err == nil && maxDelay != 0 {
			err = checkDuration("backoff max", maxDelay, MinRetryDelay, MaxRetryDelay)
			if err == nil && maxDelay < base {
				err = fmt.Errorf("pulse: backoff max %s is below its base %s", maxDelay, base)
			}
		}
		if err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.retry = &pulsev1.RetryPolicy{Base: durationpb.New(base)}
		if maxDelay != 0 {
			c.retry.Max = durationpb.New(maxDelay)
		}
	}
}

// FixedBackoff gives the job its own backoff between attempts: every
// failed attempt waits exactly d, MinRetryDelay..MaxRetryDelay. The last of
// it and [ExponentialBackoff] wins.
func FixedBackoff(d time.Duration) EnqueueOption {
	return func(c *enqueueConfig) {
		if err := checkDuration("fixed backoff", d, MinRetryDelay, MaxRetryDelay); err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.retry = &pulsev1.RetryPolicy{Fixed: durationpb.New(d)}
	}
}

func checkDuration(what string, d, lo, hi time.Duration) error {
	if d < lo || d > hi {
		return fmt.Errorf("pulse: %s %s out of range %s..%s", what, d, lo, hi)
	}
	if d%pulsetype.DurationResolution != 0 {
		return fmt.Errorf("pulse: %s %s is finer than a microsecond", what, d)
	}
	return nil
}

// RegisterOption configures one topic's handler in [Worker.Register].
type RegisterOption func(*registration)

// registration is what Register knows of one topic.
type registration struct {
	handler Handler
	timeout time.Duration
	errs    []error
}

// WithTimeout is the topic's default timeout, MinTimeout..MaxTimeout, for
// jobs enqueued without their own [Timeout]: the handler's context carries
// the deadline and an attempt that overruns it fails with "timed out after
// d".
func WithTimeout(d time.Duration) RegisterOption {
	return func(r *registration) {
		if err := checkDuration("timeout", d, MinTimeout, MaxTimeout); err != nil {
			r.errs = append(r.errs, err)
			return
		}
		r.timeout = d
	}
}

// DependsOn makes the job wait for the jobs named (docs/workflows.md):
// it is not claimable until each is finished, and when one ends
// DEAD_LETTERED or CANCELED the job is canceled, and so on down the graph
// ([DependsOnAnyway] runs it instead). Each is an existing job's id
// ([Submitted.ID]) or, in [Client.EnqueueMany], [JobRef](n): the n-th job
// of the same call, so a whole graph goes in one call, refused whole if
// it has a cycle. The job's handler reads its parents' results with
// [Job.ParentResults]. Repeated calls add.
func DependsOn(jobs ...string) EnqueueOption {
	return dependsOn(pulsev1.ParentFailurePolicy_PARENT_FAILURE_POLICY_CANCEL, jobs)
}

// DependsOnAnyway is [DependsOn] for parents whose failure must not stop
// the job: it runs once each of them is finished, whatever the outcome
// (a cleanup, a report of what failed). [Job.ParentResults] tells it how
// each ended.
func DependsOnAnyway(jobs ...string) EnqueueOption {
	return dependsOn(pulsev1.ParentFailurePolicy_PARENT_FAILURE_POLICY_RUN, jobs)
}

func dependsOn(policy pulsev1.ParentFailurePolicy, jobs []string) EnqueueOption {
	return func(c *enqueueConfig) {
		for _, j := range jobs {
			c.dependsOn = append(c.dependsOn, &pulsev1.Dependency{Job: j, OnParentFailure: policy})
		}
	}
}

// JobRef names the n-th job (from 0) of the same [Client.EnqueueMany]
// call, for [DependsOn]: "$n".
func JobRef(n int) string { return "$" + strconv.Itoa(n) }
