package pulsetype_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

func TestValidTopic(t *testing.T) {
	for name, want := range map[string]bool{
		"a":                      true,
		"orders:v2.created":      true,
		"0_-.:":                  true,
		strings.Repeat("t", 128): true,
		strings.Repeat("t", 129): false,
		"":                       false,
		".a":                     false,
		"a b":                    false,
		"é":                      false,
		"a\x00":                  false,
		"a\xff":                  false,
		"a\n":                    false,
		"ａ":                      false,
	} {
		if got := pulsetype.ValidTopic(name); got != want {
			t.Errorf("ValidTopic(%q) = %v, want %v", name, got, want)
		}
	}
}

// ValidTopic reads bytes instead of running TopicPattern: the two agree on
// every input.
func FuzzValidTopic(f *testing.F) {
	for _, seed := range []string{"a", "orders:v2.created", "0_-.:", ".a", "-a", "a b", "é", "a\x00", "a\xff",
		"a\n", "ａ", "", strings.Repeat("t", 128), strings.Repeat("t", 129), "A-Z", "z9", "a/b", "a$", "a\u0130"} {
		f.Add(seed)
	}
	pattern := regexp.MustCompile(pulsetype.TopicPattern)
	f.Fuzz(func(t *testing.T, name string) {
		if got, want := pulsetype.ValidTopic(name), pattern.MatchString(name); got != want {
			t.Errorf("ValidTopic(%q) = %v, TopicPattern says %v", name, got, want)
		}
	})
}

func TestLimitsAreOrdered(t *testing.T) {
	if !(pulsetype.MinPriority <= pulsetype.DefaultPriority && pulsetype.DefaultPriority <= pulsetype.MaxPriority) {
		t.Errorf("DefaultPriority %d outside %d..%d", pulsetype.DefaultPriority, pulsetype.MinPriority, pulsetype.MaxPriority)
	}
	if !(pulsetype.MinMaxAttempts <= pulsetype.DefaultMaxAttempts && pulsetype.DefaultMaxAttempts <= pulsetype.MaxMaxAttempts) {
		t.Errorf("DefaultMaxAttempts %d outside %d..%d", pulsetype.DefaultMaxAttempts, pulsetype.MinMaxAttempts, pulsetype.MaxMaxAttempts)
	}
	for _, d := range []int64{int64(pulsetype.MinTimeout), int64(pulsetype.MaxTimeout), int64(pulsetype.MinUniqueFor),
		int64(pulsetype.MaxUniqueFor), int64(pulsetype.MinRetryDelay), int64(pulsetype.MaxRetryDelay)} {
		if d%int64(pulsetype.DurationResolution) != 0 {
			t.Errorf("bound %d ns is not a whole number of %s", d, pulsetype.DurationResolution)
		}
	}
	if pulsetype.MaxReportedErrorBytes > pulsetype.MaxErrorBytes {
		t.Errorf("the SDK cuts at %d bytes, above the gateway's %d", pulsetype.MaxReportedErrorBytes, pulsetype.MaxErrorBytes)
	}
	if !(0 < pulsetype.DefaultMaxResultBytes && pulsetype.DefaultMaxResultBytes <= pulsetype.MaxResultBytes) {
		t.Errorf("DefaultMaxResultBytes %d outside 1..%d", pulsetype.DefaultMaxResultBytes, pulsetype.MaxResultBytes)
	}
	// One result at the cap, and the largest error text, fit a batch,
	// which fits a gRPC message (4 MiB, grpc-go's default receive bound).
	if pulsetype.MaxResultBytes+pulsetype.MaxErrorBytes > pulsetype.MaxReportBatchBytes || pulsetype.MaxReportBatchBytes*2 > 4<<20+1 {
		t.Errorf("a report batch of %d bytes does not hold a %d-byte result, or does not fit a gRPC message with room to spare",
			pulsetype.MaxReportBatchBytes, pulsetype.MaxResultBytes)
	}
}
