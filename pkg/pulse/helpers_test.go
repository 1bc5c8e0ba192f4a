package pulse

import (
	"time"

	"github.com/pulsequeue/pulse/pkg/pulsetest/fakegateway"
)

// liveness bounds how long a test waits for something that must happen; it
// only keeps a broken test from hanging, it asserts nothing about speed.
const (
	liveness = fakegateway.Patience
	tick     = 5 * time.Millisecond
)
