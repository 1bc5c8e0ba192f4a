package mcpserver_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

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
