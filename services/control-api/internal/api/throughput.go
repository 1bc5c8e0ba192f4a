package api

import (
	"context"
	"time"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobspec"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// ThroughputStore is the part of jobstore.Store the throughput read uses.
type ThroughputStore interface {
	Throughput(ctx context.Context, q jobstore.ThroughputQuery) ([]jobstore.ThroughputPoint, error)
}

// ThroughputRange is a span of the chart and the width of its buckets.
type ThroughputRange struct {
	Name string // "1h"
	Span time.Duration
	Step time.Duration
}

// Buckets is how many points the range has.
func (r ThroughputRange) Buckets() int { return int(r.Span / r.Step) }

// ThroughputRanges are the spans the chart offers, the first the default:
// at most 96 points each, so the picture stays readable.
var ThroughputRanges = []ThroughputRange{
	{Name: "1h", Span: time.Hour, Step: time.Minute},
	{Name: "6h", Span: 6 * time.Hour, Step: 5 * time.Minute},
	{Name: "24h", Span: 24 * time.Hour, Step: 15 * time.Minute},
}

// ThroughputPoint is one bucket of attempts settled.
type ThroughputPoint struct {
	Start        time.Time
	Completed    int64
	Failed       int64
	DeadLettered int64
}

// ThroughputSeries is the chart's data: one point per bucket, oldest
// first, zero where nothing settled.
type ThroughputSeries struct {
	Range  ThroughputRange
	Topic  string
	Points []ThroughputPoint
}

// Throughput reads the attempts settled per bucket from the rollup
// (job_throughput, ADR-0019).
type Throughput struct {
	store ThroughputStore
}

// NewThroughput returns the throughput read over store.
func NewThroughput(store ThroughputStore) *Throughput { return &Throughput{store: store} }

// Series reads the range named rangeName ("" is the first) for topic (""
// is every topic). Errors name range or topic.
func (t *Throughput) Series(ctx context.Context, rangeName, topic string) (ThroughputSeries, error) {
	r, err := ThroughputRangeNamed(rangeName)
	if err != nil {
		return ThroughputSeries{}, err
	}
	if topic != "" {
		if err := jobspec.ValidateTopic("topic", topic); err != nil {
			return ThroughputSeries{}, err
		}
	}
	points, err := t.store.Throughput(ctx, jobstore.ThroughputQuery{Topic: topic, Step: r.Step, Buckets: r.Buckets()})
	if err != nil {
		return ThroughputSeries{}, err
	}
	out := ThroughputSeries{Range: r, Topic: topic, Points: make([]ThroughputPoint, len(points))}
	for i, p := range points {
		out.Points[i] = ThroughputPoint{Start: p.Start, Completed: p.Completed, Failed: p.Failed, DeadLettered: p.DeadLettered}
	}
	return out, nil
}

// ThroughputRangeNamed is the range named name; "" is the default.
func ThroughputRangeNamed(name string) (ThroughputRange, error) {
	if name == "" {
		return ThroughputRanges[0], nil
	}
	names := make([]string, len(ThroughputRanges))
	for i, r := range ThroughputRanges {
		if r.Name == name {
			return r, nil
		}
		names[i] = r.Name
	}
	return ThroughputRange{}, apierr.Invalid("range", "%q is not a chart range; use one of %v", name, names)
}
