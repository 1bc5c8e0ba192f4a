package conformance_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
)

// testSlots: at most concurrency handlers run at once, the worker fills its
// slots, and it never holds more than twice its concurrency leases (its
// running jobs plus results settling behind returned slots).
func testSlots(t *testing.T, h *harness) {
	const concurrency, jobs = 3, 12
	topic := h.topic(t)
	d := h.driver(t, concurrency, 0)

	var leased maxSampler
	stop := leased.sample(t.Context(), func(ctx context.Context) (int, error) {
		var n int
		err := h.db.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE topic = $1 AND status = 'RUNNING'`, topic).Scan(&n)
		return n, err
	})
	var batch []job
	for range jobs {
		batch = append(batch, op("sleep", "ms", 150))
	}
	infos := h.waitCompleted(t, h.enqueue(t, topic, batch...))
	stop()

	running, most := 0, 0
	for _, e := range d.snapshot() {
		switch e.Event {
		case "started":
			running++
		case "finished":
			running--
		}
		most = max(most, running)
	}
	if most > concurrency {
		t.Errorf("%d handlers ran at once; the worker has %d slots", most, concurrency)
	}
	if most < concurrency {
		t.Errorf("at most %d handlers ran at once with %d jobs waiting; the worker has %d slots", most, jobs, concurrency)
	}
	if n := leased.max(); n > 2*concurrency {
		t.Errorf("%d jobs were leased (RUNNING) at once; a worker of %d slots may hold at most %d", n, concurrency, 2*concurrency)
	}
	if err := leased.error(); err != nil {
		t.Errorf("sampling leases: %v", err)
	}
	checkOnce(t, d, infos)
	checkNoBadLines(t, d)
}

// testSettleOnce: every job assigned to the worker runs once and settles
// once.
func testSettleOnce(t *testing.T, h *harness) {
	topic := h.topic(t)
	d := h.driver(t, 4, 0)
	var batch []job
	for i := range 24 {
		if i%2 == 0 {
			batch = append(batch, op("complete"))
		} else {
			batch = append(batch, op("sleep", "ms", 30))
		}
	}
	infos := h.waitCompleted(t, h.enqueue(t, topic, batch...))
	for _, info := range infos {
		if info.Attempts != 1 {
			t.Errorf("job %s completed after %d attempts, want 1", info.ID, info.Attempts)
		}
	}
	checkOnce(t, d, infos)
	checkNoBadLines(t, d)
}

// testRetries: a failure is retried, a permanent failure dead-letters at
// once, and a retry-after reaches the server as the next attempt's time.
func testRetries(t *testing.T, h *harness) {
	topic := h.topic(t)
	d := h.driver(t, 3, 0)
	ids := h.enqueue(t, topic,
		op("fail", "until_attempt", 2, "message", "flaky").with(pulse.MaxAttempts(3)),
		op("fail_permanent", "message", "hopeless").with(pulse.MaxAttempts(5)),
		op("retry_after", "ms", int64(time.Hour/time.Millisecond), "message", "later").with(pulse.MaxAttempts(3)),
	)
	flaky := h.waitStatus(t, ids[0], pulsetype.StatusCompleted)
	if flaky.Attempts != 2 || len(flaky.Errors) != 1 || flaky.Errors[0].Error != "flaky" {
		t.Errorf("retried job: attempts %d, errors %+v; want 2 attempts, the first failing with \"flaky\"", flaky.Attempts, flaky.Errors)
	}
	hopeless := h.waitStatus(t, ids[1], pulsetype.StatusDeadLettered)
	if hopeless.Attempts != 1 || len(hopeless.Errors) != 1 || hopeless.Errors[0].Error != "hopeless" {
		t.Errorf("permanent failure: attempts %d, errors %+v; want dead-lettered after 1 attempt with \"hopeless\"", hopeless.Attempts, hopeless.Errors)
	}
	later := h.waitStatus(t, ids[2], pulsetype.StatusRetrying)
	// The fleet's own backoff is milliseconds; only the handler's hour
	// puts the next attempt this far out.
	if floor := time.Now().Add(50 * time.Minute); later.NextRunAt.Before(floor) {
		t.Errorf("retry-after of 1h: next attempt at %s, want after %s", later.NextRunAt, floor)
	}
	if later.Attempts != 1 || len(later.Errors) != 1 || later.Errors[0].Error != "later" {
		t.Errorf("retry-after job: attempts %d, errors %+v; want 1 attempt failing with \"later\"", later.Attempts, later.Errors)
	}
	if _, err := h.client.Cancel(t.Context(), ids[2]); err != nil {
		t.Errorf("cancel the waiting job: %v", err)
	}
	checkOnce(t, d, []*pulse.JobInfo{flaky, hopeless, later})
	checkNoBadLines(t, d)
}

// testHeartbeats: a job running for longer than the lease TTL keeps its
// lease (the reaper sweeps five times a second), and its lease_until moves.
func testHeartbeats(t *testing.T, h *harness) {
	topic := h.topic(t)
	d := h.driver(t, 1, 0)
	id := h.enqueue(t, topic, op("sleep", "ms", int64(5*leaseTTL/(2*time.Millisecond))))[0]
	d.waitEvent(t, "the long job's start", jobEvent("started", id, 1))
	first := h.waitStatus(t, id, pulsetype.StatusRunning).LeaseUntil
	seen := []time.Time{first}
	info := h.get(t, id)
	proctest.WaitFor(t, "the job to finish", func() bool {
		info = h.get(t, id)
		if info.Status == pulsetype.StatusRunning && !slices.ContainsFunc(seen, info.LeaseUntil.Equal) {
			seen = append(seen, info.LeaseUntil)
		}
		return info.Status.Terminal()
	})
	if info.Status != pulsetype.StatusCompleted || info.Attempts != 1 {
		t.Errorf("a job of 2.5 lease TTLs ended %s after %d attempts; heartbeats should have kept its one lease", info.Status, info.Attempts)
	}
	if len(seen) < 3 {
		t.Errorf("lease_until took %d values while the job ran 2.5 lease TTLs; heartbeats should have moved it at least twice", len(seen))
	}
	if ab := d.find(func(e event) bool { return e.Event == "aborted" }); len(ab) > 0 {
		t.Errorf("the handler was stopped: %+v", ab)
	}
	checkOnce(t, d, []*pulse.JobInfo{info})
}

// testLeaseLost: the driver is frozen (SIGSTOP) until the reaper takes the
// job's lease; once it thaws, the handler is stopped with lease_lost, the
// success it then returns is refused (the job is not completed by it), and
// the next attempt runs.
func testLeaseLost(t *testing.T, h *harness) {
	topic := h.topic(t)
	d := h.driver(t, 1, 0)
	id := h.enqueue(t, topic, op("hang_past_lease").with(pulse.MaxAttempts(3)))[0]
	d.waitEvent(t, "the first attempt's start", jobEvent("started", id, 1))
	d.signal(t, syscall.SIGSTOP)
	proctest.WaitFor(t, "the reaper to take the frozen worker's lease", func() bool {
		info := h.get(t, id)
		return info.Status != pulsetype.StatusRunning && info.Attempts == 1
	})
	d.signal(t, syscall.SIGCONT)
	ab := d.waitEvent(t, "the first attempt to be stopped", jobEvent("aborted", id, 1))
	if ab.Reason != "lease_lost" {
		t.Errorf("the first attempt was stopped for %q (%s), want lease_lost", ab.Reason, ab.Detail)
	}
	info := h.waitStatus(t, id, pulsetype.StatusDeadLettered)
	if info.Attempts != 2 {
		t.Errorf("job ended after %d attempts, want 2 (the first one's lease was lost)", info.Attempts)
	}
	if n := len(info.Errors); n == 0 || info.Errors[n-1].Error != "second attempt" {
		t.Errorf("job errors %+v; the last should be the second attempt's", info.Errors)
	}
	checkOnce(t, d, []*pulse.JobInfo{info})
	checkNoBadLines(t, d)
}

// testCancel: canceling a running job stops its handler with the reason
// canceled, the job ends canceled, and the slot serves the next job.
func testCancel(t *testing.T, h *harness) {
	topic := h.topic(t)
	d := h.driver(t, 1, 0)
	id := h.enqueue(t, topic, op("wait_cancel"))[0]
	d.waitEvent(t, "the job's start", jobEvent("started", id, 1))
	if _, err := h.client.Cancel(t.Context(), id); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	ab := d.waitEvent(t, "the handler to see the cancel", jobEvent("aborted", id, 1))
	if ab.Reason != "canceled" {
		t.Errorf("the handler was stopped for %q (%s), want canceled", ab.Reason, ab.Detail)
	}
	info := h.waitStatus(t, id, pulsetype.StatusCanceled)
	next := h.waitStatus(t, h.enqueue(t, topic, op("complete"))[0], pulsetype.StatusCompleted)
	d.waitEvent(t, "the canceled handler's return", jobEvent("finished", id, 1))
	checkOnce(t, d, []*pulse.JobInfo{info, next})
	checkNoBadLines(t, d)
}

// testTimeout: a job's own timeout stops its handler with the reason
// timeout and fails the attempt saying it timed out.
func testTimeout(t *testing.T, h *harness) {
	topic := h.topic(t)
	d := h.driver(t, 1, 0)
	id := h.enqueue(t, topic, op("sleep", "ms", int64(time.Hour/time.Millisecond)).with(pulse.Timeout(time.Second), pulse.MaxAttempts(1)))[0]
	ab := d.waitEvent(t, "the handler to be stopped", jobEvent("aborted", id, 1))
	if ab.Reason != "timeout" {
		t.Errorf("the handler was stopped for %q (%s), want timeout", ab.Reason, ab.Detail)
	}
	info := h.waitStatus(t, id, pulsetype.StatusDeadLettered)
	if len(info.Errors) != 1 || !strings.Contains(info.Errors[0].Error, "timed out") {
		t.Errorf("errors %+v; want one saying the attempt timed out", info.Errors)
	}
	checkOnce(t, d, []*pulse.JobInfo{info})
	checkNoBadLines(t, d)
}

// testQuiesce: while the job's topic is paused in quiesce mode, its
// handler stays at a checkpoint through several heartbeats (which keep its
// lease), and goes on after resume. The heartbeats are the clock: no
// checkpoint may pass between the second and the fourth lease renewal
// after the pause.
func testQuiesce(t *testing.T, h *harness) {
	const steps = 200
	topic := h.topic(t)
	d := h.driver(t, 1, 0)
	id := h.enqueue(t, topic, op("checkpoint", "steps", steps, "ms", 20))[0]
	d.waitEvent(t, "the first checkpoint", func(e event) bool { return e.Event == "checkpoint" && e.Job == id })
	if _, _, err := h.client.PauseDispatch(t.Context(), pulse.PauseRequest{Reason: "conformance: quiesce", Mode: pulse.PauseQuiesce, Topic: topic}); err != nil {
		t.Fatalf("pause: %v", err)
	}
	checkpoints := func() int { return len(d.find(func(e event) bool { return e.Event == "checkpoint" && e.Job == id })) }
	h.waitRenewals(t, id, 2)
	held := checkpoints()
	h.waitRenewals(t, id, 2)
	if n := checkpoints(); n != held {
		t.Errorf("%d checkpoints passed while the topic was quiesced, want none", n-held)
	}
	if held >= steps {
		t.Errorf("the job passed all %d checkpoints before the quiesce held it", steps)
	}
	if _, _, err := h.client.ResumeDispatch(t.Context(), topic); err != nil {
		t.Fatalf("resume: %v", err)
	}
	info := h.waitStatus(t, id, pulsetype.StatusCompleted)
	if info.Attempts != 1 || checkpoints() != steps {
		t.Errorf("after resume: attempts %d, checkpoints %d; want 1 attempt passing all %d", info.Attempts, checkpoints(), steps)
	}
	checkOnce(t, d, []*pulse.JobInfo{info})
	checkNoBadLines(t, d)
}

// waitRenewals waits until the running job's lease_until has moved n times.
func (h *harness) waitRenewals(t *testing.T, id string, n int) {
	t.Helper()
	last := h.get(t, id).LeaseUntil
	moved := 0
	proctest.WaitFor(t, "lease renewals of a held job", func() bool {
		info := h.get(t, id)
		if info.Status != pulsetype.StatusRunning {
			t.Fatalf("job %s is %s while it should be held at a checkpoint", id, info.Status)
		}
		if !info.LeaseUntil.Equal(last) {
			last, moved = info.LeaseUntil, moved+1
		}
		return moved >= n
	})
}

// testBadInput: error texts with NUL, invalid UTF-8 (or the language's
// nearest: lone surrogates) and megabytes settle as readable, bounded
// errors, and the jobs beside them complete.
func testBadInput(t *testing.T, h *harness) {
	topic := h.topic(t)
	d := h.driver(t, 4, 0)
	batch := []job{
		op("nul_error").with(pulse.MaxAttempts(3)),
		op("bad_utf8_error").with(pulse.MaxAttempts(3)),
		op("huge_error", "bytes", 5<<20).with(pulse.MaxAttempts(3)),
	}
	for range 8 {
		batch = append(batch, op("sleep", "ms", 20))
	}
	ids := h.enqueue(t, topic, batch...)
	var infos []*pulse.JobInfo
	for i, want := range []string{"nul:", "bad-utf8:", "xxxx"} {
		info := h.waitStatus(t, ids[i], pulsetype.StatusDeadLettered)
		infos = append(infos, info)
		if info.Attempts != 1 || len(info.Errors) != 1 {
			t.Errorf("%s: attempts %d, errors %d; want one permanent failure", batch[i].args["op"], info.Attempts, len(info.Errors))
			continue
		}
		msg := info.Errors[0].Error
		switch {
		case !utf8.ValidString(msg), strings.ContainsRune(msg, 0):
			t.Errorf("%s: stored error %q is not valid UTF-8 without NUL", batch[i].args["op"], msg)
		case len(msg) > pulsetype.MaxReportedErrorBytes:
			t.Errorf("%s: stored error is %d bytes; the SDK must cut it to %d", batch[i].args["op"], len(msg), pulsetype.MaxReportedErrorBytes)
		case !strings.HasPrefix(msg, want):
			t.Errorf("%s: stored error %q, want it to start %q", batch[i].args["op"], msg, want)
		}
	}
	infos = append(infos, h.waitCompleted(t, ids[3:])...)
	for _, info := range infos[3:] {
		if info.Attempts != 1 {
			t.Errorf("job %s beside the bad ones took %d attempts, want 1", info.ID, info.Attempts)
		}
	}
	if d.hasExited() {
		t.Errorf("the driver exited: %v", d.waitErr)
	}
	checkOnce(t, d, infos)
	checkNoBadLines(t, d)
}

// testDrain: on SIGTERM the worker takes no new work, finishes and reports
// the jobs it holds, and exits 0 with nothing left leased.
func testDrain(t *testing.T, h *harness) {
	topic := h.topic(t)
	d := h.driver(t, 2, time.Minute)
	held := h.enqueue(t, topic, op("sleep", "ms", 1500), op("sleep", "ms", 1500))
	for _, id := range held {
		d.waitEvent(t, "a held job's start", jobEvent("started", id, 1))
	}
	waiting := h.enqueue(t, topic, op("complete"), op("complete"), op("complete"))
	d.signal(t, syscall.SIGTERM)
	if err := d.waitExit(t); err != nil {
		t.Errorf("the driver exited with %v after SIGTERM, want status 0", err)
	}
	var infos []*pulse.JobInfo
	for _, id := range held {
		info := h.get(t, id)
		infos = append(infos, info)
		if info.Status != pulsetype.StatusCompleted || info.Attempts != 1 {
			t.Errorf("held job %s is %s after %d attempts once the worker exited; want completed by its first", id, info.Status, info.Attempts)
		}
	}
	for _, id := range waiting {
		if info := h.get(t, id); info.Status != pulsetype.StatusPending || info.Attempts != 0 {
			t.Errorf("waiting job %s is %s after %d attempts; a draining worker must not take it", id, info.Status, info.Attempts)
		}
	}
	if len(d.find(func(e event) bool { return e.Event == "stopped" })) != 1 {
		t.Errorf("the driver did not print its stopped line")
	}
	checkOnce(t, d, infos)
	checkNoBadLines(t, d)
}

// testReconnect: the worker, given both gateways, keeps working when the
// gateway it uses dies: each gateway is killed in turn (so whichever it
// was connected to dies once), with jobs running and jobs queued.
func testReconnect(t *testing.T, h *harness) {
	topic := h.topic(t)
	d := h.driver(t, 2, 0)
	infos := h.waitCompleted(t, h.enqueue(t, topic, op("complete"), op("complete")))
	for i := range h.fleet.GatewayAddrs {
		name := fmt.Sprintf("%s-%d", localfleet.DispatchGateway, i+1)
		running := h.enqueue(t, topic, op("sleep", "ms", 800), op("sleep", "ms", 800))
		for _, id := range running {
			d.waitEvent(t, "a running job's start", jobEvent("started", id, 1))
		}
		h.killGateway(t, name)
		queued := h.enqueue(t, topic, op("complete"), op("complete"), op("complete"), op("complete"))
		infos = append(infos, h.waitCompleted(t, append(running, queued...))...)
		h.restartGateway(t, name)
	}
	checkOnce(t, d, infos)
	checkNoBadLines(t, d)
}

// maxSampler records the largest value a probe returns while it runs.
type maxSampler struct {
	mu   sync.Mutex
	most int
	err  error
}

// sample polls probe every proctest.PollInterval until stop is called.
func (s *maxSampler) sample(ctx context.Context, probe func(context.Context) (int, error)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(proctest.PollInterval)
		defer tick.Stop()
		for {
			n, err := probe(ctx)
			s.mu.Lock()
			if err != nil && ctx.Err() == nil && s.err == nil {
				s.err = err
			}
			s.most = max(s.most, n)
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

func (s *maxSampler) max() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.most
}

func (s *maxSampler) error() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
