package scenario

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
)

func TestProduce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ jobs, producers, batch int }{
		{1000, 4, 100}, {1001, 4, 100}, {7, 3, 2}, {5, 8, 10}, {0, 2, 10},
	} {
		t.Run(fmt.Sprintf("%d/%d/%d", tc.jobs, tc.producers, tc.batch), func(t *testing.T) {
			t.Parallel()
			var sent atomic.Int64
			err := produce(tc.jobs, tc.producers, tc.batch, func(k int) error {
				if k < 1 || k > tc.batch {
					return fmt.Errorf("a call of %d jobs, batch %d", k, tc.batch)
				}
				sent.Add(int64(k))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := sent.Load(); got != int64(tc.jobs) {
				t.Fatalf("sent %d jobs, want %d", got, tc.jobs)
			}
		})
	}

	t.Run("TheFirstErrorOfAnyTypeIsReturned", func(t *testing.T) {
		t.Parallel()
		type otherErr struct{ error }
		var n atomic.Int64
		err := produce(100, 4, 5, func(int) error {
			// Producers fail with errors of different types: an
			// atomic.Value would panic storing the second.
			if n.Add(1)%2 == 0 {
				return otherErr{errors.New("refused")}
			}
			return errors.New("down")
		})
		if err == nil {
			t.Fatal("no error returned")
		}
		if got := n.Load(); got != 4 {
			t.Fatalf("%d calls; each producer must stop at its first error", got)
		}
	})
}
