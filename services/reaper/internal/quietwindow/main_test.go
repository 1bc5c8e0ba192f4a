package quietwindow_test

import (
	"os"
	"testing"

	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

func TestMain(m *testing.M) {
	os.Exit(pgtest.MainLeakChecked(m))
}
