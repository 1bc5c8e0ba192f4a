package metrics_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/metrics"
)

// seriesByTopic scrapes reg and returns, for metric name, how many
// series each topic label value has (a histogram's series is one per
// label set, its buckets not counted).
func seriesByTopic(t *testing.T, reg *prometheus.Registry, name string) map[string]int {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]int{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "topic" {
					out[l.GetValue()]++
				}
			}
		}
	}
	return out
}

func TestTopicsBoundEveryMetricAndForgetVanishedTopics(t *testing.T) {
	t.Parallel()
	const limit = 50
	reg := prometheus.NewRegistry()
	counter := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "c"}, []string{"topic", "outcome"})
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h_seconds", Help: "h"}, []string{"topic"})
	reg.MustRegister(counter, hist)

	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }

	topics := metrics.NewTopics(limit, time.Hour)
	topics.SetClock(clock)
	topics.Bound(counter, hist)

	// A hostile producer: 1,000 distinct topics, from many goroutines.
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < 1000; i += 8 {
				topic := fmt.Sprintf("t%04d", i)
				l := topics.Label(topic)
				counter.WithLabelValues(l, "completed").Inc()
				counter.WithLabelValues(l, "retried").Inc()
				hist.WithLabelValues(l).Observe(1)
			}
		})
	}
	wg.Wait()

	for _, name := range []string{"c_total", "h_seconds"} {
		got := seriesByTopic(t, reg, name)
		require.LessOrEqual(t, len(got), limit, "%s: at most the cap of topic label values", name)
		require.Contains(t, got, metrics.OtherTopic, "%s: the overflow is counted, not dropped", name)
	}
	require.Equal(t, limit-1, topics.Len())
	// Every increment is still counted, in a topic or in _other.
	var total float64
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "c_total" {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	require.EqualValues(t, 2000, total)

	// A topic that keeps working keeps its own series; the others vanish.
	var kept string
	for topic := range seriesByTopic(t, reg, "c_total") {
		if topic != metrics.OtherTopic {
			kept = topic
			break
		}
	}
	advance(59 * time.Minute)
	require.Equal(t, kept, topics.Label(kept))
	advance(2 * time.Minute)
	require.Equal(t, limit-2, topics.Sweep(), "every topic idle for an hour is forgotten")
	got := seriesByTopic(t, reg, "c_total")
	require.Equal(t, map[string]int{kept: 2, metrics.OtherTopic: 2}, got, "a vanished topic's series are deleted")
	require.Equal(t, map[string]int{kept: 1, metrics.OtherTopic: 1}, seriesByTopic(t, reg, "h_seconds"))

	// Forgotten places are free again: a new topic gets its own label.
	require.Equal(t, "fresh", topics.Label("fresh"))

	// Its series are lazily forgotten too, by the next label lookup, once idle.
	advance(2 * time.Hour)
	require.Equal(t, "another", topics.Label("another"))
	require.Equal(t, 1, topics.Len(), "the lookup forgot every idle topic")
}

func TestTopicsOfOneKeepEverythingUnderOther(t *testing.T) {
	t.Parallel()
	topics := metrics.NewTopics(0, 0)
	require.Equal(t, metrics.OtherTopic, topics.Label("a"))
	require.Equal(t, 0, topics.Sweep(), "idle 0 never forgets")
	var nilTopics *metrics.Topics
	require.Equal(t, "a", nilTopics.Label("a"), "a nil Topics bounds nothing")
}

func TestTopicGaugeKeepsTheLargestAndDeletesWhatIsGone(t *testing.T) {
	t.Parallel()
	const limit = 20
	reg := prometheus.NewRegistry()
	vec := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "depth", Help: "d"}, []string{"topic", "status"})
	reg.MustRegister(vec)
	g := metrics.NewTopicGauge(vec, limit)

	var samples []metrics.TopicSample
	for i := range 1000 {
		topic := fmt.Sprintf("t%04d", i)
		samples = append(samples,
			metrics.TopicSample{Topic: topic, Labels: []string{"PENDING"}, Value: float64(i)},
			metrics.TopicSample{Topic: topic, Labels: []string{"RUNNING"}, Value: 1})
	}
	g.Replace(samples)
	got := seriesByTopic(t, reg, "depth")
	require.Len(t, got, limit)
	require.Contains(t, got, "t0999", "the largest keep their own series")
	require.NotContains(t, got, "t0000")
	// Nothing is lost: the rest is summed under _other.
	var pendingOther float64
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, m := range mfs[0].GetMetric() {
		ls := map[string]string{}
		for _, l := range m.GetLabel() {
			ls[l.GetName()] = l.GetValue()
		}
		if ls["topic"] == metrics.OtherTopic && ls["status"] == "PENDING" {
			pendingOther = m.GetGauge().GetValue()
		}
	}
	require.EqualValues(t, 980*981/2, pendingOther, "the 19 largest keep their own; t0000..t0980 are summed")

	// A count without a topic deletes its series: nothing live, no series.
	g.Replace([]metrics.TopicSample{{Topic: "t0999", Labels: []string{"PENDING"}, Value: 3}})
	require.Equal(t, map[string]int{"t0999": 1}, seriesByTopic(t, reg, "depth"))
	g.Replace(nil)
	require.Empty(t, seriesByTopic(t, reg, "depth"))
}
