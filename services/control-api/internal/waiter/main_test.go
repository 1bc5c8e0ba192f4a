package waiter_test

import (
	"os"
	"testing"

	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// TestMain stops the throwaway cluster the tests started (without it,
// every run of this package left a Postgres running) and checks that no
// goroutine outlived them.
func TestMain(m *testing.M) {
	os.Exit(pgtest.MainLeakChecked(m))
}
