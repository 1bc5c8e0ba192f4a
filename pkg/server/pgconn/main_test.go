package pgconn_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// TestMain runs the tests against pgtest's throwaway cluster, then checks
// for leaked goroutines; goleak.VerifyTestMain cannot wrap pgtest.Main
// because both want to call m.Run.
func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
