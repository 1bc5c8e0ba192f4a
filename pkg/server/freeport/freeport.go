// Package freeport hands out TCP ports on 127.0.0.1 for processes that a
// test or a local fleet starts and that bind the port a moment later.
//
// A port the kernel picks for a listener on port 0 comes from the
// ephemeral range, the same range every outgoing connection's local port
// comes from. Between the pick and the child's bind, any connection opened
// on the machine — a pool dialing Postgres, a gRPC client of a parallel
// test — may take it, and the child fails with "address already in use".
// Ports handed out here come from below the ephemeral range, which
// outgoing connections never use, and one process never hands out the
// same port twice.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// rangeFile holds the ephemeral range, "low high".
const rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// Defaults when rangeFile cannot be read: Linux's default ephemeral range
// starts at 32768.
const (
	defaultEphemeralLow = 32768
	lowest              = 10000
	attempts            = 200
)

var (
	mu     sync.Mutex
	handed = map[int]bool{}
)

// Get returns a port on 127.0.0.1 that was free a moment ago, is below the
// ephemeral range and was not returned before in this process.
func Get() (int, error) {
	low, high := Range()
	mu.Lock()
	defer mu.Unlock()
	var last error
	for range attempts {
		port := low + rand.IntN(high-low+1)
		if handed[port] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			last = err
			continue
		}
		l.Close()
		handed[port] = true
		return port, nil
	}
	if last == nil {
		last = errors.New("every port tried was handed out before")
	}
	return 0, fmt.Errorf("freeport: no free port in %d-%d after %d tries: %w", low, high, attempts, last)
}

// Range is the range Get picks from: from 10000 to just below the
// ephemeral range.
func Range() (low, high int) {
	ephemeral := defaultEphemeralLow
	if b, err := os.ReadFile(rangeFile); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > lowest+1000 {
				ephemeral = n
			}
		}
	}
	return lowest, ephemeral - 1
}
