// Package scenario holds the load-test scenarios. Each returns a Result
// printed as JSON and as a readable line.
package scenario

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Result is one scenario's measurements.
type Result struct {
	Scenario string             `json:"scenario"`
	Params   map[string]any     `json:"params"`
	Metrics  map[string]float64 `json:"metrics"`
	// WAL is the run's WAL by record type, per job (pulse-load -wal-stats).
	WAL []WALRecord `json:"wal,omitempty"`
}

// Line renders r for people.
func (r Result) Line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s", r.Scenario)
	keys := make([]string, 0, len(r.Metrics))
	for k := range r.Metrics {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%.4g", k, r.Metrics[k])
	}
	pk := make([]string, 0, len(r.Params))
	for k := range r.Params {
		pk = append(pk, k)
	}
	slices.Sort(pk)
	b.WriteString("  (")
	for i, k := range pk {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%v", k, r.Params[k])
	}
	b.WriteString(")")
	if len(r.WAL) > 0 {
		b.WriteString("\n    wal " + FormatWAL(r.WAL))
	}
	return b.String()
}

// Percentiles returns p50, p95, p99 and the maximum (pmax) of ds in milliseconds.
func Percentiles(ds []time.Duration) (p50, p95, p99, pmax float64) {
	if len(ds) == 0 {
		return 0, 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) float64 {
		i := int(q * float64(len(s)-1))
		return float64(s[i]) / float64(time.Millisecond)
	}
	return at(.50), at(.95), at(.99), float64(s[len(s)-1]) / float64(time.Millisecond)
}
