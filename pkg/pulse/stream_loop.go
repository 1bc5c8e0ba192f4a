package pulse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// Reconnect backoff bounds; jittered so a gateway restart does not bring
// every worker back in the same millisecond.
const (
	reconnectMin = 100 * time.Millisecond
	reconnectMax = 5 * time.Second
	// halfCloseGrace bounds how long a stopping worker waits for the
	// gateway to send what it already claimed and end the stream.
	halfCloseGrace = 3 * time.Second
)

// streamLoop keeps one StreamJobs stream open to some gateway: it opens the
// stream, hands assignments to the executor and returns freed slots as
// credits. When the stream breaks it moves to the next target, while the
// handlers already running carry on.
type streamLoop struct {
	pool        *gatewayPool
	terms       *leaseTerms
	ledger      *slotLedger
	exec        *executor
	dispatch    *dispatchWatch
	workerID    string
	topics      []string
	concurrency int
	log         *slog.Logger
}

func newStreamLoop(pool *gatewayPool, terms *leaseTerms, ledger *slotLedger, exec *executor, dispatch *dispatchWatch,
	workerID string, topics []string, concurrency int, log *slog.Logger,
) *streamLoop {
	return &streamLoop{
		pool:        pool,
		terms:       terms,
		ledger:      ledger,
		exec:        exec,
		dispatch:    dispatch,
		workerID:    workerID,
		topics:      topics,
		concurrency: concurrency,
		log:         log.With(logKeyComponent, "stream"),
	}
}

// run streams until ctx is done. Then the worker half-closes its stream,
// which is how the gateway learns it takes no more work: the gateway sends
// what it had already claimed for the worker (those jobs run in the wind-down)
// and ends the stream, so a worker that stops cleanly strands no lease.
//
// Until some gateway has welcomed the worker, a refusal (refused) from
// every target in a row ends run with ErrWorkerRefused: a worker that was
// never let in is misconfigured, and retrying would only hide it. After
// the first welcome, run reconnects through anything.
func (s *streamLoop) run(ctx context.Context) error {
	bo := backoff{min: reconnectMin, max: reconnectMax, jitter: true}
	everWelcomed := false
	refusals := 0 // in a row, before the first welcome
	for {
		target, client := s.pool.rotate()
		welcomed, err := s.session(ctx, client, target)
		if ctx.Err() != nil {
			return nil //nolint:nilerr // the worker is stopping: the session's error is the stop
		}
		if welcomed {
			bo.reset()
			everWelcomed = true
		}
		if !everWelcomed {
			if !refused(err) {
				refusals = 0
			} else if refusals++; refusals >= s.pool.size() {
				return fmt.Errorf("%w (last: %s): %w", ErrWorkerRefused, target, err)
			}
		}
		delay := bo.next()
		if refused(err) {
			s.log.Error("gateway refused the worker, reconnecting", logKeyTarget, target, logKeyDelay, delay, logKeyError, err)
		} else {
			s.log.Warn("job stream lost, reconnecting", logKeyTarget, target, logKeyDelay, delay, logKeyError, err)
		}
		if !sleepCtx(ctx, delay) {
			return nil
		}
	}
}

// refused reports whether err is a gateway turning the worker away for
// what it is — its credentials, its worker id or what it asked for —
// rather than an outage: reconnecting as the same worker cannot help.
func refused(err error) bool {
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied, codes.InvalidArgument, codes.AlreadyExists:
		return true
	}
	return false
}

// session runs one stream to completion. It reports whether the gateway
// welcomed the worker, and the error that ended the stream.
func (s *streamLoop) session(ctx context.Context, client pulsev1.DispatchServiceClient, target string) (bool, error) {
	// The stream outlives ctx by up to halfCloseGrace: once ctx is done the
	// credit sender half-closes, and the gateway ends the stream after
	// sending what it claimed for this worker. The grace bounds the wait
	// for a gateway that does not.
	if err := ctx.Err(); err != nil {
		return false, err
	}
	streamCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopGrace := context.AfterFunc(ctx, func() { time.AfterFunc(halfCloseGrace, cancel) })
	var sender sync.WaitGroup
	defer sender.Wait()
	defer cancel()
	defer stopGrace()

	stream, err := client.StreamJobs(streamCtx)
	if err != nil {
		return false, fmt.Errorf("open stream: %w", err)
	}
	inFlight := s.ledger.opened()
	err = stream.Send(&pulsev1.StreamJobsRequest{Msg: &pulsev1.StreamJobsRequest_Open{Open: &pulsev1.OpenStream{
		WorkerId:    s.workerID,
		Topics:      s.topics,
		Concurrency: int32(s.concurrency),
		InFlight:    int32(inFlight),
	}}})
	if err != nil {
		return false, fmt.Errorf("send open: %w", err)
	}
	first, err := stream.Recv()
	if err != nil {
		return false, fmt.Errorf("await welcome: %w", err)
	}
	welcome := first.GetWelcome()
	if welcome == nil {
		return false, errors.New("protocol error: first message is not a welcome")
	}
	s.terms.update(welcome)
	s.log.Info("job stream open", logKeyTarget, target, logKeyGatewayID, welcome.GetGatewayId(),
		logKeyInFlight, inFlight)

	sender.Add(1)
	go func() {
		defer sender.Done()
		s.sendCredits(ctx, streamCtx, stream)
	}()

	for {
		msg, err := stream.Recv()
		if err != nil {
			return true, err
		}
		if w := msg.GetWelcome(); w != nil {
			s.terms.update(w) // a gateway may revise its terms mid-stream
		}
		s.dispatch.observe(msg.GetDispatchState(), true)
		for _, a := range msg.GetAssignments().GetJobs() {
			s.exec.start(a)
		}
	}
}

// sendCredits is the stream's only sender after Open. Each time it wakes it
// sends one Credit with every slot freed since the last, so a burst of
// finished handlers costs one message. When stop is done it half-closes
// the stream and sends nothing more.
func (s *streamLoop) sendCredits(stop, streamCtx context.Context, stream pulsev1.DispatchService_StreamJobsClient) {
	for {
		select {
		case <-streamCtx.Done():
			return
		case <-stop.Done():
			_ = stream.CloseSend() // an error means the stream is gone already
			return
		case <-s.ledger.wake:
		}
		n := s.ledger.takeUnsent()
		if n == 0 {
			continue
		}
		err := stream.Send(&pulsev1.StreamJobsRequest{Msg: &pulsev1.StreamJobsRequest_Credit{Credit: &pulsev1.Credit{Slots: int32(n)}}})
		if err != nil {
			// The receive side sees the broken stream and reconnects; the
			// next Open's in_flight accounts for these slots.
			return
		}
	}
}
