package composetest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

// tracedTopic is a demo topic: demo-worker runs it, and a job whose args
// ask for fail_attempts fails exactly those attempts, then completes.
const tracedTopic = "email.send"

func (f *fleet) jaegerURL() string { return fmt.Sprintf("http://127.0.0.1:%d", f.jaegerPort) }

// newTraceID is a random W3C trace id, as a producer's tracer would start.
func newTraceID(t *testing.T) (trace.TraceID, trace.SpanID) {
	t.Helper()
	var tid trace.TraceID
	var sid trace.SpanID
	_, err := rand.Read(tid[:])
	require.NoError(t, err)
	_, err = rand.Read(sid[:])
	require.NoError(t, err)
	return tid, sid
}

// jaegerSpan is one span of Jaeger's query API (/api/traces/{id}), with
// its service name resolved.
type jaegerSpan struct {
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	ProcessID string `json:"processID"`
	Tags      []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
	service string
}

func (s jaegerSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

func (s jaegerSpan) tag(key string) string {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

func (s jaegerSpan) String() string { return s.service + "/" + s.OperationName }

// jaegerTrace reads one trace through Jaeger's query API; an unknown trace
// is an error.
func (f *fleet) jaegerTrace(id string) ([]jaegerSpan, error) {
	var resp struct {
		Data []struct {
			Spans     []jaegerSpan `json:"spans"`
			Processes map[string]struct {
				ServiceName string `json:"serviceName"`
			} `json:"processes"`
		} `json:"data"`
	}
	if err := call(http.MethodGet, f.jaegerURL()+"/api/traces/"+id, nil, http.StatusOK, &resp); err != nil {
		return nil, err
	}
	if len(resp.Data) != 1 {
		return nil, fmt.Errorf("trace %s: %d traces in the answer", id, len(resp.Data))
	}
	spans := resp.Data[0].Spans
	for i := range spans {
		spans[i].service = resp.Data[0].Processes[spans[i].ProcessID].ServiceName
	}
	return spans, nil
}

// hop is a span a job's trace must hold: from service, named name, for
// attempt (0: not per attempt), a child of the span of hop parent (-1:
// any parent).
type hop struct {
	service, name string
	attempt       int
	parent        int
}

// requireHops waits until the trace holds every hop (spans arrive in
// batches from each process) and checks each hop's parent, then returns
// the trace's spans.
func (f *fleet) requireHops(t *testing.T, traceID string, hops []hop) []jaegerSpan {
	t.Helper()
	var spans []jaegerSpan
	found := make([]jaegerSpan, len(hops))
	eventually(t, time.Minute, 2*time.Second, "trace "+traceID+" holds every hop", func() error {
		var err error
		if spans, err = f.jaegerTrace(traceID); err != nil {
			return err
		}
		var missing []string
		for i, h := range hops {
			j := slices.IndexFunc(spans, func(s jaegerSpan) bool {
				return s.service == h.service && s.OperationName == h.name &&
					(h.attempt == 0 || s.tag("pulse.attempt") == strconv.Itoa(h.attempt))
			})
			if j < 0 {
				missing = append(missing, fmt.Sprintf("%s/%s (attempt %d)", h.service, h.name, h.attempt))
				continue
			}
			found[i] = spans[j]
		}
		if len(missing) > 0 {
			return fmt.Errorf("missing %v; have %v", missing, spans)
		}
		return nil
	})
	matches := func(h hop) []jaegerSpan {
		var out []jaegerSpan
		for _, s := range spans {
			if s.service == h.service && s.OperationName == h.name && (h.attempt == 0 || s.tag("pulse.attempt") == strconv.Itoa(h.attempt)) {
				out = append(out, s)
			}
		}
		return out
	}
	for i, h := range hops {
		if h.parent < 0 {
			continue
		}
		// One of the spans that match the hop is the child of one of
		// the spans that match the parent hop.
		parents := map[string]bool{}
		for _, p := range matches(hops[h.parent]) {
			parents[p.SpanID] = true
		}
		var candidates []string
		ok := false
		for _, s := range matches(h) {
			ok = ok || parents[s.parent()]
			candidates = append(candidates, fmt.Sprintf("%s refs=%+v tags=%+v", s.SpanID, s.References, s.Tags))
		}
		if !ok {
			f.saveTrace(t, traceID)
		}
		require.True(t, ok, "trace %s: %v (%v) must be the parent of %v (attempt %d); candidates:\n%s",
			traceID, found[h.parent], parents, found[i], h.attempt, strings.Join(candidates, "\n"))
	}
	return spans
}

// saveTrace writes a trace's JSON from Jaeger's query API next to the
// containers' logs, for a failure's reader.
func (f *fleet) saveTrace(t *testing.T, traceID string) {
	t.Helper()
	resp, err := httpClient.Get(f.jaegerURL() + "/api/traces/" + traceID)
	if err != nil {
		t.Logf("save trace %s: %v", traceID, err)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Logf("save trace %s: %v", traceID, err)
		return
	}
	dir := filepath.Join(f.root, ".artifacts", "compose-test")
	path := filepath.Join(dir, "trace-"+traceID+".json")
	if err := os.MkdirAll(dir, 0o755); err == nil {
		if err := os.WriteFile(path, b, 0o644); err == nil {
			t.Logf("trace %s saved in %s", traceID, path)
		}
	}
}

// describeTrace lists a trace's services and span names, sorted.
func describeTrace(spans []jaegerSpan) string {
	byService := map[string][]string{}
	for _, s := range spans {
		name := s.OperationName
		if a := s.tag("pulse.attempt"); a != "" {
			name += " (attempt " + a + ")"
		}
		byService[s.service] = append(byService[s.service], name)
	}
	services := make([]string, 0, len(byService))
	for s := range byService {
		services = append(services, s)
	}
	sort.Strings(services)
	var b strings.Builder
	for _, s := range services {
		sort.Strings(byService[s])
		fmt.Fprintf(&b, "    %-18s %s\n", s, strings.Join(byService[s], ", "))
	}
	return b.String()
}

// jobDetail is what the tracing step reads of GET /v1/jobs/{id}.
type jobDetail struct {
	Status   string `json:"status"`
	Attempts int    `json:"attempts"`
	Errors   []struct {
		Attempt int    `json:"attempt"`
		Error   string `json:"error"`
	} `json:"errors"`
}

// oneTracePerJob submits one job over HTTP and one over gRPC, each under a
// trace of the test's, each failing its first attempt on demo-worker, and
// requires in Jaeger every hop of both attempts in the job's one trace,
// each span from the service that produced it, each the child of the hop
// before; and demo-worker's log line about the failed attempt carrying
// the trace id.
func (f *fleet) oneTracePerJob(t *testing.T) {
	// The SDK client propagates the caller's trace with the global
	// propagator, as an application with OpenTelemetry set up does.
	otel.SetTextMapPropagator(propagation.TraceContext{})
	args := map[string]int{"fail_attempts": 1}

	httpTrace, httpParent := newTraceID(t)
	body, err := json.Marshal(map[string]any{"topic": tracedTopic, "args": args})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, f.httpURL()+"/v1/jobs", strings.NewReader(string(body)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", fmt.Sprintf("00-%s-%s-01", httpTrace, httpParent))
	req.SetBasicAuth(devProducer, devProducerPassword)
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	var httpJob struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&httpJob))
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	grpcTrace, grpcParent := newTraceID(t)
	client, err := pulse.NewClient(fmt.Sprintf("127.0.0.1:%d", f.grpcPort), pulse.WithUserPass(devProducer, devProducerPassword))
	require.NoError(t, err)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: grpcTrace, SpanID: grpcParent, TraceFlags: trace.FlagsSampled, Remote: true,
	}))
	grpcJob, err := client.Enqueue(ctx, tracedTopic, args)
	require.NoError(t, err)

	for _, id := range []string{httpJob.ID, grpcJob.ID} {
		eventually(t, 2*time.Minute, time.Second, "job "+id+" failed once, then completed", func() error {
			var j jobDetail
			if err := call(http.MethodGet, f.httpURL()+"/v1/jobs/"+url.PathEscape(id), nil, http.StatusOK, &j); err != nil {
				return err
			}
			if j.Status != "COMPLETED" {
				return fmt.Errorf("%s after %d attempts", j.Status, j.Attempts)
			}
			require.Equal(t, 2, j.Attempts, "job %s: the first attempt failed on purpose, the retry completed", id)
			require.Len(t, j.Errors, 1)
			require.Contains(t, j.Errors[0].Error, "asked to fail attempt 1")
			return nil
		})
	}

	// Every hop of both attempts, in the job's one trace. Indexes name
	// the parent hop.
	hopsAfter := func(submit string) []hop {
		hs := []hop{
			{"control-api", submit, 0, -1}, // a child of the test's own span
			{"control-api", "insert " + tracedTopic, 0, 0},
		}
		for attempt := 1; attempt <= 2; attempt++ {
			claim := len(hs)
			hs = append(hs,
				hop{"dispatch-gateway", "claim " + tracedTopic, attempt, 0},
				hop{"dispatch-gateway", "receive " + tracedTopic, attempt, 0},
				hop{"demo-worker", "process " + tracedTopic, attempt, claim + 1},
				hop{"demo-worker", "settle", attempt, claim + 2},
			)
		}
		return hs
	}
	httpHops := hopsAfter("POST /v1/jobs")
	grpcHops := hopsAfter("pulse.v1.ControlService/SubmitJob")

	for _, c := range []struct {
		how, job, trace string
		hops            []hop
	}{
		{"HTTP (POST /v1/jobs)", httpJob.ID, httpTrace.String(), httpHops},
		{"gRPC (SDK Client.Enqueue)", grpcJob.ID, grpcTrace.String(), grpcHops},
	} {
		spans := f.requireHops(t, c.trace, c.hops)
		// A settle that carried its result alone is the parent of the
		// gateway's ReportResult server span, in the same trace. The
		// gateway exports its spans on its own schedule, so the child
		// may reach Jaeger after the hops above did.
		eventually(t, time.Minute, 2*time.Second, "trace "+c.trace+": every lone settle has a ReportResult child on the gateway", func() error {
			var err error
			if spans, err = f.jaegerTrace(c.trace); err != nil {
				return err
			}
			for _, s := range spans {
				if s.OperationName == "settle" && s.tag("messaging.batch.message_count") == "1" &&
					!slices.ContainsFunc(spans, func(r jaegerSpan) bool {
						return r.service == "dispatch-gateway" && r.OperationName == "pulse.v1.DispatchService/ReportResult" && r.parent() == s.SpanID
					}) {
					return fmt.Errorf("the lone settle %s has no ReportResult child on the gateway: %v", s.SpanID, spans)
				}
			}
			return nil
		})
		t.Logf("job %s submitted over %s: trace %s in Jaeger, %d spans:\n%s", c.job, c.how, c.trace, len(spans), describeTrace(spans))
	}

	// The log line about the failed attempt carries the job's trace id.
	eventually(t, 30*time.Second, time.Second, "demo-worker logged the failed attempts with their trace ids", func() error {
		var logs strings.Builder
		for _, c := range of(f.containers(t), "demo-worker") {
			logs.WriteString(f.logs(c.Name, 0))
		}
		for _, id := range []string{httpTrace.String(), grpcTrace.String()} {
			if countLines(logs.String(), `"trace_id":"`+id+`"`) == 0 {
				return fmt.Errorf("no demo-worker line carries trace_id %s", id)
			}
		}
		return nil
	})
}

// followAnExemplar reads the exemplars Prometheus stored for the queue-wait
// histogram, and follows the latest to its trace in Jaeger: the trace of
// the job whose wait it sampled, with that job's claim and receive.
func (f *fleet) followAnExemplar(t *testing.T, since time.Time) {
	type exemplar struct {
		Labels    map[string]string `json:"labels"`
		Value     string            `json:"value"`
		Timestamp float64           `json:"timestamp"`
	}
	var latest exemplar
	var series map[string]string
	eventually(t, time.Minute, 2*time.Second, "Prometheus stored queue-wait exemplars", func() error {
		q := url.Values{
			"query": {`pulse_queue_wait_seconds_bucket{job="dispatch-gateway"}`},
			"start": {strconv.FormatInt(since.Unix(), 10)},
			"end":   {strconv.FormatInt(time.Now().Unix(), 10)},
		}
		var resp struct {
			Data []struct {
				SeriesLabels map[string]string `json:"seriesLabels"`
				Exemplars    []exemplar        `json:"exemplars"`
			} `json:"data"`
		}
		if err := call(http.MethodGet, f.promURL()+"/api/v1/query_exemplars?"+q.Encode(), nil, http.StatusOK, &resp); err != nil {
			return err
		}
		n := 0
		for _, s := range resp.Data {
			for _, e := range s.Exemplars {
				n++
				if e.Labels["trace_id"] != "" && e.Timestamp > latest.Timestamp {
					latest, series = e, s.SeriesLabels
				}
			}
		}
		if latest.Labels["trace_id"] == "" {
			return fmt.Errorf("%d exemplars, none with a trace_id", n)
		}
		t.Logf("%d queue-wait exemplars stored", n)
		return nil
	})
	traceID := latest.Labels["trace_id"]
	topic := series["topic"]
	require.NotEmpty(t, topic, "the exemplar's series has a topic: %v", series)
	var spans []jaegerSpan
	eventually(t, time.Minute, 2*time.Second, "the exemplar's trace is in Jaeger", func() error {
		var err error
		if spans, err = f.jaegerTrace(traceID); err != nil {
			return err
		}
		for _, name := range []string{"claim " + topic, "receive " + topic} {
			if !slices.ContainsFunc(spans, func(s jaegerSpan) bool { return s.service == "dispatch-gateway" && s.OperationName == name }) {
				return fmt.Errorf("no dispatch-gateway %q span yet: %v", name, spans)
			}
		}
		return nil
	})
	t.Logf("exemplar: %s wait %ss at %s (bucket le=%s) → trace %s:\n%s", topic, latest.Value,
		time.UnixMilli(int64(latest.Timestamp*1000)).Format(time.RFC3339), series["le"], traceID, describeTrace(spans))
}

// dashboardVars stands in for Grafana's variables: the rate interval,
// and each query variable at its default, All (".*").
var dashboardVars = strings.NewReplacer(
	"$__rate_interval", "1m",
	"${__rate_interval}", "1m",
	"$__interval", "15s",
	"${topic}", ".*",
	"$topic", ".*",
)

// labelValues matches a Grafana query variable's label_values(metric, label).
var labelValues = regexp.MustCompile(`^label_values\(\s*([^,]+?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

// everyPanelHasData reads every dashboard as Grafana would and requires,
// against the compose Prometheus after the demo has run: each variable
// resolves to values, each panel sets a unit, and each panel query and
// annotation returns data (a series with a number, not only NaN) over the
// test's run.
func (f *fleet) everyPanelHasData(t *testing.T, since time.Time) {
	files, err := filepath.Glob(filepath.Join(f.root, "deploy", "grafana", "dashboards", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	type panel struct {
		Title       string `json:"title"`
		FieldConfig struct {
			Defaults struct {
				Unit string `json:"unit"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	}
	var d struct {
		Title      string  `json:"title"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query struct {
					Query string `json:"query"`
				} `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Annotations struct {
			List []struct {
				Name string `json:"name"`
				Expr string `json:"expr"`
			} `json:"list"`
		} `json:"annotations"`
	}
	queries, vars := 0, 0
	for _, file := range files {
		raw, err := os.ReadFile(file)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, &d), file)
		name := filepath.Base(file)
		for _, v := range d.Templating.List {
			m := labelValues.FindStringSubmatch(v.Query.Query)
			require.NotNil(t, m, "%s: variable %s: %q is not label_values(metric, label)", name, v.Name, v.Query.Query)
			var resp struct {
				Data []string `json:"data"`
			}
			q := url.Values{"match[]": {m[1]}, "start": {strconv.FormatInt(since.Unix(), 10)}}
			require.NoError(t, call(http.MethodGet, f.promURL()+"/api/v1/label/"+m[2]+"/values?"+q.Encode(), nil, http.StatusOK, &resp))
			require.NotEmpty(t, resp.Data, "%s: variable %s resolves to no value", name, v.Name)
			t.Logf("%s: variable %s = %v", name, v.Name, resp.Data)
			vars++
		}
		type query struct{ where, expr string }
		var all []query
		for _, p := range d.Panels {
			require.NotEmpty(t, p.FieldConfig.Defaults.Unit, "%s: panel %q sets no unit", name, p.Title)
			for _, tg := range p.Targets {
				all = append(all, query{fmt.Sprintf("%s: %q %s", name, p.Title, tg.RefID), tg.Expr})
			}
		}
		for _, a := range d.Annotations.List {
			all = append(all, query{fmt.Sprintf("%s: annotation %q", name, a.Name), a.Expr})
		}
		for _, q := range all {
			expr := dashboardVars.Replace(q.expr)
			n, err := f.promRangeNumbers(expr, since, time.Now())
			require.NoError(t, err, "%s: %s", q.where, expr)
			require.Positive(t, n, "%s: no data over the run: %s", q.where, expr)
			queries++
		}
	}
	t.Logf("%d dashboard queries and annotations returned data over the run, %d variables resolved", queries, vars)
}

// promRangeNumbers runs a range query over [start, end] and counts the
// samples that are numbers (NaN, which a quantile of no observations
// gives, draws nothing in a panel).
func (f *fleet) promRangeNumbers(expr string, start, end time.Time) (int, error) {
	q := url.Values{
		"query": {expr},
		"start": {strconv.FormatInt(start.Unix(), 10)},
		"end":   {strconv.FormatInt(end.Unix(), 10)},
		"step":  {"15"},
	}
	var resp struct {
		Data struct {
			Result []struct {
				Values [][2]any `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := call(http.MethodGet, f.promURL()+"/api/v1/query_range?"+q.Encode(), nil, http.StatusOK, &resp); err != nil {
		return 0, err
	}
	n := 0
	for _, r := range resp.Data.Result {
		for _, v := range r.Values {
			s, _ := v[1].(string)
			if x, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(x) && !math.IsInf(x, 0) {
				n++
			}
		}
	}
	return n, nil
}
