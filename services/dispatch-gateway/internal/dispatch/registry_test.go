package dispatch_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
)

func claimedFor(workers ...string) []pulsetype.Claimed {
	out := make([]pulsetype.Claimed, len(workers))
	for i, w := range workers {
		out[i] = pulsetype.Claimed{ID: uuid.New(), Attempt: 1, WorkerID: w}
	}
	return out
}

func TestRegistry(t *testing.T) {
	t.Parallel()

	t.Run("ReserveInterleavesWorkersAndStopsAtMax", func(t *testing.T) {
		t.Parallel()
		r := dispatch.NewRegistry(nil)
		r.Add("a", []string{"t"}, 3)
		r.Add("b", []string{"t"}, 1)
		groups := r.Reserve(nil, 3)
		require.Len(t, groups, 1)
		require.ElementsMatch(t, []string{"a", "b", "a"}, groups[0].Slots)
		_, free := r.Stats()
		require.Equal(t, 1, free)
	})

	t.Run("WorkersWithTheSameTopicsShareOneGroup", func(t *testing.T) {
		t.Parallel()
		r := dispatch.NewRegistry(nil)
		r.Add("a", []string{"y", "x"}, 1)
		r.Add("b", []string{"x", "y", "x"}, 1)
		r.Add("c", []string{"z"}, 1)
		groups := r.Reserve(nil, 10)
		require.Len(t, groups, 2)
		require.Equal(t, []string{"x", "y"}, groups[0].Topics)
		require.Len(t, groups[0].Slots, 2)
		require.Equal(t, []string{"z"}, groups[1].Topics)
	})

	t.Run("FinishWaitsOutTheClaimInFlightAndReservesNothingMore", func(t *testing.T) {
		t.Parallel()
		r := dispatch.NewRegistry(nil)
		a := r.Add("a", []string{"t"}, 2)
		g := r.Reserve(nil, 1)[0]
		finished := r.Finish(a)
		select {
		case <-finished:
			t.Fatal("finished while a claim still holds a slot of the worker")
		default:
		}
		require.Empty(t, r.Reserve(nil, 10), "a finishing worker's free slot is not reserved")
		require.Empty(t, r.Settle(g, claimedFor("a")), "the claim in flight is delivered, not lost")
		<-finished
		require.Len(t, a.TakeOutbox(), 1)
		require.Equal(t, finished, r.Finish(a), "Finish is idempotent")
	})

	t.Run("FinishWithNothingInFlightIsImmediate", func(t *testing.T) {
		t.Parallel()
		r := dispatch.NewRegistry(nil)
		a := r.Add("a", []string{"t"}, 2)
		r.Settle(r.Reserve(nil, 10)[0], nil)
		<-r.Finish(a)
	})

	t.Run("SettleDeliversAndReturnsUnfilledSlots", func(t *testing.T) {
		t.Parallel()
		r := dispatch.NewRegistry(nil)
		a := r.Add("a", []string{"t"}, 2)
		b := r.Add("b", []string{"t"}, 2)
		g := r.Reserve(nil, 10)[0]
		require.Len(t, g.Slots, 4)
		lost := r.Settle(g, claimedFor("a"))
		require.Empty(t, lost)
		require.Len(t, a.TakeOutbox(), 1)
		require.Empty(t, b.TakeOutbox())
		_, free := r.Stats()
		require.Equal(t, 3, free)
	})

	t.Run("TwoStreamsWithOneWorkerIDNeverGetMoreThanTheyReserved", func(t *testing.T) {
		t.Parallel()
		r := dispatch.NewRegistry(nil)
		old := r.Add("w", []string{"t"}, 1)
		fresh := r.Add("w", []string{"t"}, 2)
		g := r.Reserve(nil, 10)[0]
		r.Settle(g, claimedFor("w", "w", "w"))
		got := len(old.TakeOutbox()) + len(fresh.TakeOutbox())
		require.Equal(t, 3, got)
		_, free := r.Stats()
		require.Equal(t, 0, free)
	})

	t.Run("JobsForAClosedStreamAreReportedUndeliverable", func(t *testing.T) {
		t.Parallel()
		r := dispatch.NewRegistry(nil)
		w := r.Add("w", []string{"t"}, 2)
		g := r.Reserve(nil, 10)[0]
		r.Remove(w)
		lost := r.Settle(g, claimedFor("w", "w"))
		require.Len(t, lost, 2)
	})

	t.Run("CreditsWakeWithTheGroupKey", func(t *testing.T) {
		t.Parallel()
		var woke []string
		r := dispatch.NewRegistry(func(k string) { woke = append(woke, k) })
		w := r.AddStream("w", []string{"t"}, 2, 2)
		require.Empty(t, woke, "no free slots, nothing to wake for")
		require.Zero(t, r.Credit(w, 2))
		require.Len(t, woke, 1)
		_, free := r.Stats()
		require.Equal(t, 2, free)
	})

	// A stream's credits never give it more slots than the concurrency it
	// declared: a credit for slots it does not hold is refused (clamped)
	// and counted, and wakes nobody.
	t.Run("CreditsAreCappedAtTheDeclaredConcurrency", func(t *testing.T) {
		t.Parallel()
		var woke int
		r := dispatch.NewRegistry(func(string) { woke++ })
		w := r.AddStream("w", []string{"t"}, 3, 1)
		require.Equal(t, 1, woke)
		require.Equal(t, 9999, r.Credit(w, 10000), "it holds only the job in flight at open: that slot comes back, the rest is refused")
		_, free := r.Stats()
		require.Equal(t, 3, free)
		require.Equal(t, 2, woke)
		require.Equal(t, 5, r.Credit(w, 5))
		require.Equal(t, 2, woke, "a refused credit wakes nobody")

		g := r.Reserve(nil, 10)[0]
		require.Len(t, g.Slots, 3)
		r.Settle(g, claimedFor("w", "w"))
		require.Len(t, w.TakeOutbox(), 2)
		_, free = r.Stats()
		require.Equal(t, 1, free, "one slot unfilled, two held by the jobs sent")
		require.Equal(t, 1, r.Credit(w, 3), "two held, so two come back")
		_, free = r.Stats()
		require.Equal(t, 3, free)
	})
}
