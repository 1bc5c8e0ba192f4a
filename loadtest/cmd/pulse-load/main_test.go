package main

import (
	"testing"

	"github.com/pulsequeue/pulse/deploy/localfleet"
)

func TestDefaultGateways(t *testing.T) {
	for _, c := range []struct {
		scenarios []string
		want      int
	}{
		{[]string{"river"}, localfleet.GatewaysDefault},
		{[]string{"river", "rawsql", "rivercli"}, localfleet.GatewaysDefault},
		{[]string{"soak"}, localfleet.GatewaysDefault},
		{[]string{"river", "pause"}, 2},
		{[]string{"all"}, 2},
		{[]string{"latency"}, 2},
	} {
		want := map[string]bool{}
		for _, s := range c.scenarios {
			want[s] = true
		}
		if got := defaultGateways(want); got != c.want {
			t.Errorf("defaultGateways(%v) = %d, want %d", c.scenarios, got, c.want)
		}
	}
}

func TestRiverWorkers(t *testing.T) {
	for _, c := range []struct {
		name                  string
		gateways              int
		workersGiven          bool
		workers               int
		concGiven             bool
		conc                  int
		wantWorkers, wantConc int
	}{
		{"one a side", 1, false, 4, false, 256, 1, 2000},
		{"two a side", 2, false, 4, false, 256, 2, 1000},
		{"uneven split rounds down", 3, false, 4, false, 256, 3, 666},
		{"workers given", 1, true, 4, false, 256, 4, 500},
		{"workers given, slots still split", 2, true, 8, false, 256, 8, 250},
		{"concurrency given", 2, false, 4, true, 100, 2, 100},
		{"both given", 1, true, 3, true, 7, 3, 7},
		{"more gateways than slots", 2000, false, 4, false, 256, 2000, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, n := riverWorkers(c.gateways, c.workersGiven, c.workers, c.concGiven, c.conc)
			if w != c.wantWorkers || n != c.wantConc {
				t.Errorf("riverWorkers(%d, %v, %d, %v, %d) = %d × %d, want %d × %d",
					c.gateways, c.workersGiven, c.workers, c.concGiven, c.conc, w, n, c.wantWorkers, c.wantConc)
			}
		})
	}
}

func TestRiverOnly(t *testing.T) {
	for _, c := range []struct {
		scenarios []string
		want      bool
	}{
		{[]string{"river"}, true},
		{[]string{"river", "rawsql"}, true},
		{[]string{"river", ""}, true},
		{[]string{"river", "rivercli"}, true},
		{[]string{"soak"}, true},
		{[]string{"soak", "latency"}, false},
		{[]string{"rawsql"}, false},
		{[]string{"river", "throughput"}, false},
		{[]string{"all", "river"}, false},
	} {
		want := map[string]bool{}
		for _, s := range c.scenarios {
			want[s] = true
		}
		if got := riverOnly(want); got != c.want {
			t.Errorf("riverOnly(%v) = %v, want %v", c.scenarios, got, c.want)
		}
	}
}
