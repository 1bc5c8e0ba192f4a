package composetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// httpClient talks to the fleet's published ports, all on 127.0.0.1.
var httpClient = &http.Client{Timeout: 15 * time.Second}

// call sends one JSON request and decodes a JSON answer into out (when not
// nil); a status other than want is an error with the body.
func call(method, u string, body any, want int, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// docker-compose.yml's development operator (control-api's API needs
	// credentials; Prometheus ignores them).
	req.SetBasicAuth(devOperator, devOperatorPassword)
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode %q: %w", method, u, b, err)
		}
	}
	return nil
}

// jobs records every job the test submitted, by topic, so the test can
// require at the end that each one completed.
type jobs struct {
	mu      sync.Mutex
	byTopic map[string][]string
}

func (j *jobs) add(topic string, ids ...string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.byTopic == nil {
		j.byTopic = map[string][]string{}
	}
	j.byTopic[topic] = append(j.byTopic[topic], ids...)
}

func (j *jobs) count() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := 0
	for _, ids := range j.byTopic {
		n += len(ids)
	}
	return n
}

func (j *jobs) snapshot() map[string][]string {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := map[string][]string{}
	for t, ids := range j.byTopic {
		out[t] = append([]string(nil), ids...)
	}
	return out
}

// submit sends n jobs of topic in one POST /v1/jobs:batch from the host
// and records them.
func (f *fleet) submit(j *jobs, topic string, n int) ([]string, error) {
	type spec struct {
		Topic string         `json:"topic"`
		Args  map[string]any `json:"args"`
	}
	req := struct {
		Jobs []spec `json:"jobs"`
	}{}
	for i := range n {
		req.Jobs = append(req.Jobs, spec{Topic: topic, Args: map[string]any{"n": i}})
	}
	var resp struct {
		Results []struct {
			ID string `json:"id"`
		} `json:"results"`
	}
	if err := call(http.MethodPost, f.httpURL()+"/v1/jobs:batch", req, http.StatusCreated, &resp); err != nil {
		return nil, err
	}
	if len(resp.Results) != n {
		return nil, fmt.Errorf("submitted %d jobs, got %d ids", n, len(resp.Results))
	}
	ids := make([]string, n)
	for i, r := range resp.Results {
		ids[i] = r.ID
	}
	j.add(topic, ids...)
	return ids, nil
}

// jobState is what the test reads of GET /v1/jobs/{id}.
type jobState struct {
	ID      string `json:"id"`
	Topic   string `json:"topic"`
	Status  string `json:"status"`
	Waiting *struct {
		Reason string `json:"reason"`
	} `json:"waiting"`
}

func (f *fleet) job(id string) (jobState, error) {
	var js jobState
	err := call(http.MethodGet, f.httpURL()+"/v1/jobs/"+url.PathEscape(id), nil, http.StatusOK, &js)
	return js, err
}

// completed is the set of ids of topic's COMPLETED jobs, read page by page
// (500 a page, at most 200 pages).
func (f *fleet) completed(topic string) (map[string]bool, error) {
	done := map[string]bool{}
	token := ""
	for range 200 {
		q := url.Values{"topic": {topic}, "status": {"COMPLETED"}, "limit": {"500"}}
		if token != "" {
			q.Set("page_token", token)
		}
		var page struct {
			Jobs          []jobState `json:"jobs"`
			NextPageToken string     `json:"next_page_token"`
		}
		if err := call(http.MethodGet, f.httpURL()+"/v1/jobs?"+q.Encode(), nil, http.StatusOK, &page); err != nil {
			return nil, err
		}
		for _, js := range page.Jobs {
			done[js.ID] = true
		}
		if page.NextPageToken == "" {
			return done, nil
		}
		token = page.NextPageToken
	}
	return nil, fmt.Errorf("topic %s: more than 200 pages of completed jobs", topic)
}

// requireAllCompleted waits until every job in want is COMPLETED; on
// timeout it fails naming the stragglers and their states.
func (f *fleet) requireAllCompleted(t *testing.T, want map[string][]string, timeout time.Duration) {
	t.Helper()
	total := 0
	for _, ids := range want {
		total += len(ids)
	}
	started := time.Now()
	var missing []string
	eventually(t, timeout, 2*time.Second, fmt.Sprintf("all %d jobs COMPLETED", total), func() error {
		missing = missing[:0]
		for topic, ids := range want {
			done, err := f.completed(topic)
			if err != nil {
				return err
			}
			for _, id := range ids {
				if !done[id] {
					missing = append(missing, id)
				}
			}
		}
		if len(missing) == 0 {
			return nil
		}
		// A job that can no longer complete fails the test now.
		var states []string
		for _, id := range missing[:min(len(missing), 10)] {
			js, err := f.job(id)
			if err != nil {
				return err
			}
			switch js.Status {
			case "DEAD_LETTERED", "CANCELED":
				t.Fatalf("job %s (%s) ended %s: a job was lost", id, js.Topic, js.Status)
			}
			states = append(states, id+"="+js.Status)
		}
		return fmt.Errorf("%d of %d not COMPLETED yet, e.g. %s", len(missing), total, strings.Join(states, " "))
	})
	t.Logf("all %d jobs COMPLETED (%.1fs)", total, time.Since(started).Seconds())
}

// load submits batches of jobs of each topic from the host until stopped,
// at most maxJobs jobs and for at most maxTime; it records every job.
type load struct {
	stop   context.CancelFunc
	done   chan struct{}
	sent   int
	errors []error
}

func (f *fleet) startLoad(j *jobs, topics []string, batch int, every time.Duration, maxJobs int, maxTime time.Duration) *load {
	ctx, cancel := context.WithTimeout(context.Background(), maxTime)
	l := &load{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for l.sent < maxJobs {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, topic := range topics {
				if _, err := f.submit(j, topic, batch); err != nil {
					// control-api stays up throughout; a failed submit
					// is a finding, kept for the test to report.
					l.errors = append(l.errors, err)
					continue
				}
				l.sent += batch
			}
		}
	}()
	return l
}

// finish stops the load and returns how many jobs it submitted.
func (l *load) finish(t *testing.T) int {
	t.Helper()
	l.stop()
	<-l.done
	require.Empty(t, l.errors, "submits failed during the load")
	return l.sent
}

// --- Prometheus ----------------------------------------------------------

// promVector runs an instant query (at time at, or now when zero) and
// returns the value of each series by its instance label.
func (f *fleet) promVector(query string, at time.Time) (map[string]float64, error) {
	q := url.Values{"query": {query}}
	if !at.IsZero() {
		q.Set("time", strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64))
	}
	var resp struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := call(http.MethodGet, f.promURL()+"/api/v1/query?"+q.Encode(), nil, http.StatusOK, &resp); err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, r := range resp.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: value %v", query, r.Value)
		}
		out[r.Metric["instance"]] = v
	}
	return out, nil
}

// target is one active Prometheus scrape target.
type target struct {
	Job, Instance, Health, LastError string
}

func (f *fleet) targets() ([]target, error) {
	var resp struct {
		Data struct {
			ActiveTargets []struct {
				Labels    map[string]string `json:"labels"`
				Health    string            `json:"health"`
				LastError string            `json:"lastError"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if err := call(http.MethodGet, f.promURL()+"/api/v1/targets?state=active", nil, http.StatusOK, &resp); err != nil {
		return nil, err
	}
	var out []target
	for _, a := range resp.Data.ActiveTargets {
		out = append(out, target{Job: a.Labels["job"], Instance: a.Labels["instance"], Health: a.Health, LastError: a.LastError})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Job+out[i].Instance < out[j].Job+out[j].Instance })
	return out, nil
}

// gatewayTargets waits until Prometheus scrapes exactly the running
// gateway containers, each up, and returns their instances.
func (f *fleet) gatewayTargets(t *testing.T, timeout time.Duration) []string {
	t.Helper()
	var instances []string
	eventually(t, timeout, time.Second, "Prometheus scrapes every gateway replica", func() error {
		want := map[string]bool{}
		for _, c := range of(f.containers(t), "dispatch-gateway") {
			if c.State == "running" {
				want[c.IP+":9101"] = true
			}
		}
		ts, err := f.targets()
		if err != nil {
			return err
		}
		instances = instances[:0]
		for _, tg := range ts {
			if tg.Job != "dispatch-gateway" {
				continue
			}
			if !want[tg.Instance] {
				return fmt.Errorf("target %s is no running gateway (running: %v)", tg.Instance, want)
			}
			if tg.Health != "up" {
				return fmt.Errorf("target %s is %s: %s", tg.Instance, tg.Health, tg.LastError)
			}
			instances = append(instances, tg.Instance)
		}
		if len(instances) != len(want) {
			return fmt.Errorf("targets %v, running gateways %v", instances, want)
		}
		return nil
	})
	return instances
}
