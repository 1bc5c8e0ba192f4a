package pulsetype_test

import (
	"strings"
	"testing"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

func TestParseStatusRoundTrips(t *testing.T) {
	for _, s := range pulsetype.Statuses {
		for _, name := range []string{s.String(), string(s) + " ", " " + strings.ToLower(string(s))} {
			got, err := pulsetype.ParseStatus(name)
			if err != nil || got != s {
				t.Fatalf("ParseStatus(%q) = %q, %v; want %q", name, got, err, s)
			}
		}
	}
}

func TestParseStatusRefusesUnknown(t *testing.T) {
	for _, name := range []string{"", "DONE", "PENDING\x00", "\xff\xfe", "pending;DROP", "COMPLETEDX"} {
		got, err := pulsetype.ParseStatus(name)
		if err == nil {
			t.Fatalf("ParseStatus(%q) = %q, want an error", name, got)
		}
	}
}

func TestTerminal(t *testing.T) {
	terminal := map[pulsetype.Status]bool{
		pulsetype.StatusCompleted: true, pulsetype.StatusDeadLettered: true, pulsetype.StatusCanceled: true,
	}
	for _, s := range pulsetype.Statuses {
		if s.Terminal() != terminal[s] {
			t.Errorf("%s.Terminal() = %v", s, s.Terminal())
		}
		if !s.Valid() {
			t.Errorf("%s.Valid() = false", s)
		}
	}
	if pulsetype.Status("pending").Valid() {
		t.Error(`Status("pending").Valid() = true; stored names are upper case`)
	}
}
