package main

import "testing"

func TestDefaultGateways(t *testing.T) {
	for _, c := range []struct {
		scenarios    []string
		riverClients int
		want         int
	}{
		{[]string{"river"}, 1, 1},
		{[]string{"river"}, 3, 3},
		{[]string{"river", "rawsql"}, 2, 2},
		{[]string{"river", ""}, 1, 1}, // -scenario river,
		{[]string{"river", "pause"}, 1, 2},
		{[]string{"all", "river"}, 1, 2},
		{[]string{"all"}, 1, 2},
		{[]string{"throughput"}, 4, 2},
		{[]string{"rawsql"}, 1, 2},
	} {
		want := map[string]bool{}
		for _, s := range c.scenarios {
			want[s] = true
		}
		if got := defaultGateways(want, c.riverClients); got != c.want {
			t.Errorf("defaultGateways(%v, %d) = %d, want %d", c.scenarios, c.riverClients, got, c.want)
		}
	}
}
