package ui

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

// ThroughputService is the part of api.Throughput the overview's chart
// calls.
type ThroughputService interface {
	Series(ctx context.Context, rangeName, topic string) (api.ThroughputSeries, error)
}

// The chart's drawing area, in the SVG's own units (it scales to the
// panel's width).
const (
	chartWidth  = 720
	chartHeight = 240
	chartLeft   = 52 // room for the y axis's numbers and its label
	chartRight  = 12
	chartTop    = 14
	chartBottom = 40 // room for the times and the x axis's label
)

// chartView is the throughput chart, computed here so the template only
// places what it is given: a polyline per series, the axes' ticks, the
// title and the description a screen reader reads.
type chartView struct {
	// Range is the range shown; Ranges every range with its link.
	Range  string
	Ranges []rangeLink
	Title  string
	Desc   string
	// Unit is what one bucket is: "per minute", "per 5 minutes".
	Unit string
	// Width and Height are the viewBox; PlotLeft... the plot's edges.
	Width, Height                          int
	PlotLeft, PlotRight, PlotTop, PlotBase float64
	// TickEnd is where the time ticks end, below the base.
	TickEnd float64
	// Completed and Failed are polyline points ("x,y x,y ..."); the
	// completed area closes the line to the base.
	Completed, CompletedArea, Failed string
	YTicks                           []tick
	XTicks                           []tick
	// Totals over the range.
	TotalCompleted, TotalFailed, TotalDead int64
	// Empty is true when nothing settled in the range.
	Empty bool
	// Error says why the chart could not be read; the rest is empty then.
	Error string
}

type rangeLink struct {
	Name    string
	URL     string
	Current bool
}

// tick is one axis mark: its position along the axis and its label.
type tick struct {
	At    float64
	Label string
	// Anchor is the label's text-anchor: a label at the plot's right edge
	// ends there instead of running past it.
	Anchor string
}

// chartOf lays series out in the chart's viewBox.
func chartOf(s api.ThroughputSeries) *chartView {
	c := &chartView{
		Range: s.Range.Name, Width: chartWidth, Height: chartHeight,
		PlotLeft: chartLeft, PlotRight: chartWidth - chartRight, PlotTop: chartTop, PlotBase: chartHeight - chartBottom,
		TickEnd: chartHeight - chartBottom + 5,
		Unit:    "per " + stepWords(s.Range.Step),
	}
	c.Ranges = rangeLinks(s.Range.Name)
	var peak int64
	var peakAt time.Time
	for _, p := range s.Points {
		c.TotalCompleted += p.Completed
		c.TotalFailed += p.Failed
		c.TotalDead += p.DeadLettered
		if p.Completed+p.Failed > peak {
			peak, peakAt = p.Completed+p.Failed, p.Start
		}
	}
	c.Empty = c.TotalCompleted == 0 && c.TotalFailed == 0
	c.Title = fmt.Sprintf("Attempts completed and failed %s, last %s", c.Unit, spanWords(s.Range.Span))
	c.Desc = fmt.Sprintf("Over the last %s: %d completed, %d failed (%d of them dead-lettered).",
		spanWords(s.Range.Span), c.TotalCompleted, c.TotalFailed, c.TotalDead)
	if peak > 0 {
		c.Desc += fmt.Sprintf(" Busiest: %d settled in the %s from %s UTC.", peak, stepWords(s.Range.Step), peakAt.UTC().Format("15:04"))
	} else {
		c.Desc += " Nothing settled."
	}

	top := niceCeil(maxOf(s.Points))
	plotW, plotH := c.PlotRight-c.PlotLeft, c.PlotBase-c.PlotTop
	n := len(s.Points)
	x := func(i int) float64 {
		if n == 1 {
			return c.PlotLeft + plotW/2
		}
		return c.PlotLeft + plotW*float64(i)/float64(n-1)
	}
	y := func(v int64) float64 { return c.PlotBase - plotH*float64(v)/float64(top) }
	var done, failed strings.Builder
	for i, p := range s.Points {
		fmt.Fprintf(&done, "%s,%s ", num(x(i)), num(y(p.Completed)))
		fmt.Fprintf(&failed, "%s,%s ", num(x(i)), num(y(p.Failed)))
	}
	c.Completed, c.Failed = strings.TrimSpace(done.String()), strings.TrimSpace(failed.String())
	if n > 0 {
		c.CompletedArea = fmt.Sprintf("%s,%s %s %s,%s", num(x(0)), num(c.PlotBase), c.Completed, num(x(n-1)), num(c.PlotBase))
	}
	for _, v := range []int64{0, top / 2, top} {
		if v == top/2 && top%2 != 0 {
			continue // no half of an odd top: ticks are whole attempts
		}
		c.YTicks = append(c.YTicks, tick{At: y(v), Label: strconv.FormatInt(v, 10)})
	}
	every := xTickEvery(s.Range.Span)
	for i, p := range s.Points {
		if t := p.Start.UTC(); t.Truncate(every).Equal(t) {
			anchor := "middle"
			if x(i) > c.PlotRight-20 {
				anchor = "end"
			}
			c.XTicks = append(c.XTicks, tick{At: x(i), Label: t.Format("15:04"), Anchor: anchor})
		}
	}
	return c
}

func maxOf(points []api.ThroughputPoint) int64 {
	var m int64
	for _, p := range points {
		m = max(m, p.Completed, p.Failed)
	}
	return m
}

// niceCeil is the smallest 1, 2 or 5 × 10ⁿ at or above v (at least 2, so
// an idle chart still has a middle tick).
func niceCeil(v int64) int64 {
	if v <= 2 {
		return 2
	}
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= v {
				return m * p
			}
		}
	}
}

// xTickEvery spaces the time labels: six or so across any range.
func xTickEvery(span time.Duration) time.Duration {
	switch {
	case span <= time.Hour:
		return 10 * time.Minute
	case span <= 6*time.Hour:
		return time.Hour
	}
	return 4 * time.Hour
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

func stepWords(d time.Duration) string {
	if d == time.Minute {
		return "minute"
	}
	return strconv.Itoa(int(d/time.Minute)) + " minutes"
}

func spanWords(d time.Duration) string {
	if d == time.Hour {
		return "hour"
	}
	return strconv.Itoa(int(d/time.Hour)) + " hours"
}

// rangeLinks are the overview's links to each range, the current one
// marked.
func rangeLinks(current string) []rangeLink {
	out := make([]rangeLink, len(api.ThroughputRanges))
	for i, r := range api.ThroughputRanges {
		u := "/ui/"
		if i > 0 {
			u = withQuery("/ui/", url.Values{"range": {r.Name}})
		}
		out[i] = rangeLink{Name: r.Name, URL: u, Current: r.Name == current}
	}
	return out
}
