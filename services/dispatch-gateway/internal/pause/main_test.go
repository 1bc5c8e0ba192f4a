package pause_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			println("goleak:", err.Error())
			code = 1
		}
	}
	os.Exit(code)
}
