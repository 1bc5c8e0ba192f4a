package freeport_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/freeport"
)

// Ports come from below the ephemeral range, are never handed out twice,
// and can be bound.
func TestGet(t *testing.T) {
	t.Parallel()
	low, high := freeport.Range()
	require.Less(t, low, high)
	seen := map[int]bool{}
	for range 200 {
		port, err := freeport.Get()
		require.NoError(t, err)
		require.GreaterOrEqual(t, port, low)
		require.LessOrEqual(t, port, high, "a port from the ephemeral range can be taken by any outgoing connection")
		require.False(t, seen[port], "port %d handed out twice", port)
		seen[port] = true
	}
	port, err := freeport.Get()
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	require.NoError(t, err)
	l.Close()
}
