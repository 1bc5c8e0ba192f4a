package metrics

import (
	"cmp"
	"container/list"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsequeue/pulse/pkg/server/config"
)

// Topic names are chosen by producers, and every name a metric's topic
// label takes is a series until the process restarts. These bound them:
// Topics for the counters and histograms a service adds to as it works,
// TopicGauge for a gauge recounted in full (the queue depth).

const (
	// OtherTopic is the topic label of everything beyond the cap. It
	// cannot be a topic: topics start with a letter or a digit.
	OtherTopic = "_other"
	// MaxTopicsDefault is PULSE_METRICS_MAX_TOPICS's default: the most
	// topic label values (OtherTopic included) one metric carries.
	MaxTopicsDefault = 200
	// TopicIdleDefault is PULSE_METRICS_TOPIC_IDLE's default: a topic
	// whose series nothing has touched for this long loses them, and its
	// place under the cap.
	TopicIdleDefault = time.Hour
	// TopicSweepInterval is how often a service forgets idle topics when
	// no new topic arrives to make it look.
	TopicSweepInterval = time.Minute
)

// MaxTopicsLimit is the largest PULSE_METRICS_MAX_TOPICS: beyond it a
// scrape is no longer small.
const MaxTopicsLimit = 10000

// ValidateTopicBounds checks PULSE_METRICS_MAX_TOPICS and
// PULSE_METRICS_TOPIC_IDLE, naming the variable at fault.
func ValidateTopicBounds(maxTopics int, idle time.Duration) error {
	switch {
	case maxTopics < 1 || maxTopics > MaxTopicsLimit:
		return config.Invalid("PULSE_METRICS_MAX_TOPICS", "is %d; it must be between 1 (every topic under %s) and %d", maxTopics, OtherTopic, MaxTopicsLimit)
	case idle < time.Minute:
		return config.Invalid("PULSE_METRICS_TOPIC_IDLE", "is %s; it must be at least 1m", idle)
	}
	return nil
}

// Deleter is a metric vector with a topic label: *prometheus.CounterVec,
// *prometheus.HistogramVec and *prometheus.GaugeVec are.
type Deleter interface {
	DeletePartialMatch(labels prometheus.Labels) int
}

// Topics decides the topic label of every metric it bounds, for one
// service: a topic is its own label value while fewer than max-1 topics
// hold one (the last place is OtherTopic's), and OtherTopic after that. A
// topic whose series nothing touched for idle is forgotten: its series
// are deleted from every bounded metric and its place is free again. So a
// producer inventing topic names adds at most max series to each metric,
// the topics that keep working keep their own series, and a topic that
// vanished leaves nothing behind. Safe for concurrent use.
type Topics struct {
	mu    sync.Mutex
	max   int
	idle  time.Duration
	now   func() time.Time
	order *list.List // of *topicUse, most recently used first
	index map[string]*list.Element
	vecs  []Deleter
}

type topicUse struct {
	topic string
	used  time.Time
}

// NewTopics bounds topic labels to limit values (at least 1: then every
// topic is OtherTopic) and forgets topics idle for idle (0: never).
func NewTopics(limit int, idle time.Duration) *Topics {
	return &Topics{max: max(limit, 1), idle: idle, now: time.Now, order: list.New(), index: map[string]*list.Element{}}
}

// SetClock replaces time.Now, for tests.
func (t *Topics) SetClock(now func() time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.now = now
}

// Bound adds metric vectors whose "topic" label this decides, so a
// forgotten topic's series are deleted from them.
func (t *Topics) Bound(vecs ...Deleter) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.vecs = append(t.vecs, vecs...)
}

// Label is the topic label value for topic: topic itself, or OtherTopic
// when the cap is reached by topics still in use. A nil Topics bounds
// nothing.
func (t *Topics) Label(topic string) string {
	if t == nil {
		return topic
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if e, ok := t.index[topic]; ok {
		e.Value.(*topicUse).used = now
		t.order.MoveToFront(e)
		return topic
	}
	t.forgetIdle(now)
	if len(t.index) >= t.max-1 {
		return OtherTopic
	}
	t.index[topic] = t.order.PushFront(&topicUse{topic: topic, used: now})
	return topic
}

// Sweep forgets every topic idle for longer than idle and returns how
// many it forgot; services run it every TopicSweepInterval.
func (t *Topics) Sweep() int {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.forgetIdle(t.now())
}

// Len is how many topics hold their own label value.
func (t *Topics) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.index)
}

func (t *Topics) forgetIdle(now time.Time) int {
	if t.idle <= 0 {
		return 0
	}
	n := 0
	for e := t.order.Back(); e != nil; e = t.order.Back() {
		u := e.Value.(*topicUse)
		if now.Sub(u.used) < t.idle {
			break
		}
		t.order.Remove(e)
		delete(t.index, u.topic)
		for _, v := range t.vecs {
			v.DeletePartialMatch(prometheus.Labels{"topic": u.topic})
		}
		n++
	}
	return n
}

// TopicSample is one series of a TopicGauge: its topic, the values of
// the gauge's other labels in order, and its value.
type TopicSample struct {
	Topic  string
	Labels []string
	Value  float64
}

// TopicGauge is a gauge vector whose first label is the topic and whose
// every series is recounted at once (Replace): the max-1 topics with the
// largest totals keep their own series, the rest are summed under
// OtherTopic, and a series missing from a count is deleted, so a topic
// with nothing left to count disappears. Safe for concurrent use.
type TopicGauge struct {
	mu   sync.Mutex
	vec  *prometheus.GaugeVec
	max  int
	prev map[string][]string
}

// NewTopicGauge bounds vec, whose first label is the topic, to limit topic
// label values (OtherTopic included; at least 1).
func NewTopicGauge(vec *prometheus.GaugeVec, limit int) *TopicGauge {
	return &TopicGauge{vec: vec, max: max(limit, 1), prev: map[string][]string{}}
}

// Replace sets the gauge to samples, and only samples.
func (g *TopicGauge) Replace(samples []TopicSample) {
	totals := map[string]float64{}
	for _, s := range samples {
		totals[s.Topic] += s.Value
	}
	keep := make([]string, 0, len(totals))
	for topic := range totals {
		keep = append(keep, topic)
	}
	if len(keep) > g.max {
		// The largest first; equal totals by name, so a count is stable.
		slices.SortFunc(keep, func(a, b string) int {
			if c := cmp.Compare(totals[b], totals[a]); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		keep = keep[:g.max-1]
	}
	own := make(map[string]bool, len(keep))
	for _, topic := range keep {
		own[topic] = true
	}
	next := map[string][]string{}
	values := map[string]float64{}
	for _, s := range samples {
		topic := s.Topic
		if !own[topic] {
			topic = OtherTopic
		}
		lv := append([]string{topic}, s.Labels...)
		key := strings.Join(lv, "\x00")
		next[key] = lv
		values[key] += s.Value
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for key, lv := range next {
		g.vec.WithLabelValues(lv...).Set(values[key])
	}
	for key, lv := range g.prev {
		if _, ok := next[key]; !ok {
			g.vec.DeleteLabelValues(lv...)
		}
	}
	g.prev = next
}
