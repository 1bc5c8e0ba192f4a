package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace/noop"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
)

// receivedSpan is one span the in-test OTLP receiver was sent, with the
// service.name of the process that sent it.
type receivedSpan struct {
	service string
	span    *tracepb.Span
}

func (s receivedSpan) String() string {
	return fmt.Sprintf("%s/%s(span=%x parent=%x)", s.service, s.span.GetName(), s.span.GetSpanId(), s.span.GetParentSpanId())
}

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes the protobuf
// ExportTraceServiceRequests posted to /v1/traces and keeps every span.
type otlpReceiver struct {
	url   string
	mu    sync.Mutex
	spans []receivedSpan
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var msg collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &msg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&msg)
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	r.url = "http://" + ln.Addr().String()
	return r
}

func (r *otlpReceiver) add(msg *collectortrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range msg.GetResourceSpans() {
		service := attrString(rs.GetResource().GetAttributes(), "service.name")
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, receivedSpan{service: service, span: s})
			}
		}
	}
}

// trace returns the spans of trace id so far.
func (r *otlpReceiver) trace(id []byte) []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []receivedSpan
	for _, s := range r.spans {
		if string(s.span.GetTraceId()) == string(id) {
			out = append(out, s)
		}
	}
	return out
}

func attrString(attrs []*commonpb.KeyValue, key string) string {
	for _, a := range attrs {
		if a.GetKey() == key {
			return a.GetValue().GetStringValue()
		}
	}
	return ""
}

// find returns the first span from service whose name has prefix and,
// unless attempt is 0, whose pulse.attempt is attempt.
func find(spans []receivedSpan, service, prefix string, attempt int64) (receivedSpan, bool) {
	for _, s := range spans {
		if s.service == service && strings.HasPrefix(s.span.GetName(), prefix) &&
			(attempt == 0 || attrInt(s, "pulse.attempt") == attempt) {
			return s, true
		}
	}
	return receivedSpan{}, false
}

// attrInt returns an int attribute of s, -1 when absent.
func attrInt(s receivedSpan, key string) int64 {
	for _, a := range s.span.GetAttributes() {
		if a.GetKey() == key {
			return a.GetValue().GetIntValue()
		}
	}
	return -1
}

// TestOneTracePerJob runs the real control-api and dispatch-gateways with
// OTLP export to an in-test receiver, submits one job under a root span from
// an SDK producer and processes it with SDK workers (the first attempt
// fails, so the job is retried), all exporting to the same receiver, and
// requires every hop of both attempts in one trace, each span the parent of
// the next: root → publish → control-api SubmitJob → gateway receive →
// worker process → settle. Then one job submitted over HTTP (POST /v1/jobs
// with the producer's traceparent): root → control-api's HTTP server span
// → gateway receive → worker process.
func TestOneTracePerJob(t *testing.T) {
	// Not parallel: it installs the global tracer provider and propagator
	// the in-process SDK uses.
	recv := startOTLPReceiver(t)
	f := upFleet(t, localfleet.Options{
		Binaries: binaries(t),
		Gateways: 2, // the retry runs on the second gateway
		Env: map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": recv.url,
			"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
			"OTEL_BSP_SCHEDULE_DELAY":     "100",
			// Long enough to stop the first worker before the retry is due.
			"PULSE_RETRY_BACKOFF_UNIT": "2s",
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(recv.url+"/v1/traces"))
	require.NoError(t, err)
	res, err := sdkresource.New(ctx, sdkresource.WithAttributes(semconv.ServiceName("e2e-sdk")))
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
		_ = tp.Shutdown(context.Background())
	})

	const topic = "e2e.traced"
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	done := make(chan string, 1)
	wctx, wcancel := context.WithCancel(ctx)
	var running sync.WaitGroup
	defer func() {
		wcancel()
		running.Wait()
	}()
	// The first attempt runs and fails on worker traced-0 (gateway 1),
	// which then stops; the retry runs on worker traced-1 (gateway 2), so
	// the trace shows a retry on a second worker.
	failed := make(chan struct{}, 1)
	start := func(i int) (stop func()) {
		w, err := pulse.NewWorker([]string{f.GatewayAddrs[i]}, pulse.WithLogger(logger), pulse.WithConcurrency(1),
			pulse.WithWorkerID(fmt.Sprintf("traced-%d", i)))
		require.NoError(t, err)
		w.Register(topic, func(ctx context.Context, j *pulse.Job) error {
			if j.Attempt == 1 {
				select {
				case failed <- struct{}{}:
				default:
				}
				return errors.New("first attempt fails")
			}
			select {
			case done <- j.ID:
			default:
			}
			return nil
		})
		c, cancel := context.WithCancel(wctx)
		stopped := make(chan struct{})
		running.Go(func() { _ = w.Run(c); close(stopped) })
		return func() { cancel(); <-stopped }
	}
	stopFirst := start(0)

	client, err := pulse.NewClient(f.ControlGRPC)
	require.NoError(t, err)
	defer client.Close()

	rootCtx, root := tp.Tracer("e2e").Start(ctx, "e2e root")
	sub, err := client.Enqueue(rootCtx, topic, map[string]int{"n": 1})
	root.End()
	require.NoError(t, err)
	select {
	case <-failed:
	case <-ctx.Done():
		t.Fatal("the first attempt never ran")
	}
	stopFirst() // reports the failure on the way out
	start(1)
	select {
	case id := <-done:
		require.Equal(t, sub.ID, id)
	case <-ctx.Done():
		t.Fatal("job was not processed")
	}
	traceID := root.SpanContext().TraceID()

	type hop struct {
		service, prefix string
		attempt         int64 // 0: not per attempt
	}
	var chains [][]receivedSpan
	require.Eventually(t, func() bool {
		spans := recv.trace(traceID[:])
		chains = chains[:0]
		for _, attempt := range []int64{1, 2} {
			var chain []receivedSpan
			for _, want := range []hop{
				{"e2e-sdk", "e2e root", 0},
				{"e2e-sdk", "publish " + topic, 0},
				{"control-api", "pulse.v1.ControlService/SubmitJob", 0},
				{"dispatch-gateway", "receive " + topic, attempt},
				{"e2e-sdk", "process " + topic, attempt},
				{"e2e-sdk", "settle", attempt},
			} {
				s, ok := find(spans, want.service, want.prefix, want.attempt)
				if !ok {
					t.Logf("trace %s: no %s span %q (attempt %d) yet; have %v", traceID, want.service, want.prefix, want.attempt, spans)
					return false
				}
				chain = append(chain, s)
			}
			chains = append(chains, chain)
		}
		return true
	}, 30*time.Second, 500*time.Millisecond, "every hop's span of both attempts in one trace")

	for _, chain := range chains {
		for i := 1; i < len(chain); i++ {
			require.Equal(t, chain[i-1].span.GetSpanId(), chain[i].span.GetParentSpanId(),
				"%v must be the parent of %v", chain[i-1], chain[i])
		}
		require.Equal(t, sub.ID, attrString(chain[3].span.GetAttributes(), "messaging.message.id"))
		require.Equal(t, "pulse", attrString(chain[4].span.GetAttributes(), "messaging.system"))
		require.Equal(t, topic, attrString(chain[4].span.GetAttributes(), "messaging.destination.name"))
	}
	// The batched work in the job's trace: the coalesced INSERT under the
	// submit, and each attempt's claim statement under the stored submit
	// context, like its receive.
	spans := recv.trace(traceID[:])
	submit := chains[0][2]
	insert, ok := find(spans, "control-api", "insert "+topic, 0)
	require.True(t, ok, "the insert's span is in the job's trace: %v", spans)
	require.Equal(t, submit.span.GetSpanId(), insert.span.GetParentSpanId(), "%v must be the parent of %v", submit, insert)
	require.Equal(t, sub.ID, attrString(insert.span.GetAttributes(), "messaging.message.id"))
	for _, attempt := range []int64{1, 2} {
		claim, ok := find(spans, "dispatch-gateway", "claim "+topic, attempt)
		require.True(t, ok, "attempt %d's claim span is in the job's trace: %v", attempt, spans)
		require.Equal(t, submit.span.GetSpanId(), claim.span.GetParentSpanId(), "%v must be the parent of %v", submit, claim)
		require.Equal(t, sub.ID, attrString(claim.span.GetAttributes(), "messaging.message.id"))
	}
	require.Equal(t, tracepb.Span_SPAN_KIND_PRODUCER, chains[0][1].span.GetKind())
	require.Equal(t, tracepb.Span_SPAN_KIND_SERVER, chains[0][2].span.GetKind())
	require.Equal(t, tracepb.Span_SPAN_KIND_CONSUMER, chains[0][4].span.GetKind())

	job, err := client.Get(ctx, sub.ID)
	require.NoError(t, err)
	require.Len(t, job.Errors, 1)
	require.Equal(t, "traced-0", job.Errors[0].Worker, "attempt 1 ran on the first worker")
	require.Equal(t, "traced-1", job.LockedBy, "the retry ran on the second worker")

	// The same over HTTP: a job submitted with POST /v1/jobs under the
	// producer's traceparent is one trace too, through control-api's HTTP
	// server span (otelhttp, named after the route pattern).
	httpCtx, httpRoot := tp.Tracer("e2e").Start(ctx, "e2e http root")
	req, err := http.NewRequestWithContext(httpCtx, http.MethodPost, f.ControlHTTP+"/v1/jobs",
		strings.NewReader(`{"topic":"`+topic+`","args":{"n":2}}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	otel.GetTextMapPropagator().Inject(httpCtx, propagation.HeaderCarrier(req.Header))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	httpRoot.End()
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
	var httpJob struct{ ID string }
	require.NoError(t, json.Unmarshal(body, &httpJob))
	// Its first attempt fails on the running worker; the retry completes.
	for id := ""; id != httpJob.ID; {
		select {
		case id = <-done:
		case <-ctx.Done():
			t.Fatal("the HTTP-submitted job was not processed")
		}
	}
	httpTrace := httpRoot.SpanContext().TraceID()
	var httpChain []receivedSpan
	require.Eventually(t, func() bool {
		spans := recv.trace(httpTrace[:])
		httpChain = httpChain[:0]
		for _, want := range []struct {
			service, prefix string
			attempt         int64
		}{
			{"e2e-sdk", "e2e http root", 0},
			{"control-api", "POST /v1/jobs", 0},
			{"dispatch-gateway", "receive " + topic, 1},
			{"e2e-sdk", "process " + topic, 1},
		} {
			s, ok := find(spans, want.service, want.prefix, want.attempt)
			if !ok {
				t.Logf("trace %s: no %s span %q yet; have %v", httpTrace, want.service, want.prefix, spans)
				return false
			}
			httpChain = append(httpChain, s)
		}
		return true
	}, 30*time.Second, 500*time.Millisecond, "the HTTP-submitted job's hops in one trace")
	for i := 1; i < len(httpChain); i++ {
		require.Equal(t, httpChain[i-1].span.GetSpanId(), httpChain[i].span.GetParentSpanId(),
			"%v must be the parent of %v", httpChain[i-1], httpChain[i])
	}
	require.Equal(t, tracepb.Span_SPAN_KIND_SERVER, httpChain[1].span.GetKind())
	require.Equal(t, "/v1/jobs", attrString(httpChain[1].span.GetAttributes(), "http.route"))
	require.Equal(t, httpJob.ID, attrString(httpChain[2].span.GetAttributes(), "messaging.message.id"))

	if path := os.Getenv(EnvTracePicture); path != "" {
		drawTrace(t, path, recv.trace(traceID[:]))
	}
}
