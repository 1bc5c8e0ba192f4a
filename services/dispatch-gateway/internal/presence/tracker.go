package presence

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/logging"
)

// Defaults, named so config, docs and code agree.
const (
	// IntervalDefault is PULSE_PRESENCE_INTERVAL's default: how often a
	// gateway refreshes the rows of all its streams.
	IntervalDefault = 10 * time.Second
	// TTLDefault is PULSE_PRESENCE_TTL's default: a row not refreshed for
	// this long has expired (its gateway is gone).
	TTLDefault = 30 * time.Second
	// SweepBatch is the most expired rows one refresh deletes.
	SweepBatch = 1000
	// finalFlushTimeout bounds the last delete at shutdown.
	finalFlushTimeout = 5 * time.Second
)

// Store is what the tracker needs from jobstore.
type Store interface {
	OpenPresence(ctx context.Context, gateway string, p jobstore.Presence, ttl time.Duration) (time.Time, error)
	RefreshPresence(ctx context.Context, gateway string, entries []jobstore.Presence, ttl time.Duration, sweep int) (map[string]bool, int, error)
	LeavePresence(ctx context.Context, left []jobstore.Left) error
}

// Config wires a Tracker.
type Config struct {
	// Gateway names this replica in the rows (PULSE_GATEWAY_ID).
	Gateway string
	// Interval and TTL: zero means the defaults.
	Interval time.Duration
	TTL      time.Duration
	// OnError is told about each failed statement (metrics); may be nil.
	OnError func()
}

// Tracker keeps this gateway's streams in worker_presence. A nil *Tracker
// records nothing: Open succeeds with a session that is never lost.
type Tracker struct {
	store  Store
	cfg    Config
	logger *slog.Logger

	mu       sync.Mutex
	sessions map[*Session]struct{}
	left     []jobstore.Left
	kick     chan struct{}
}

// New builds a tracker; Run keeps its rows fresh.
func New(store Store, cfg Config, logger *slog.Logger) *Tracker {
	if cfg.Interval <= 0 {
		cfg.Interval = IntervalDefault
	}
	if cfg.TTL <= 0 {
		cfg.TTL = TTLDefault
	}
	return &Tracker{store: store, cfg: cfg, logger: logger.With(logging.Loop, "presence"),
		sessions: map[*Session]struct{}{}, kick: make(chan struct{}, 1)}
}

// Session is one open stream's presence.
type Session struct {
	t        *Tracker
	p        jobstore.Presence
	lost     chan struct{}
	lostOnce sync.Once
	done     sync.Once
}

// Open records a stream of workerID, opened as principal, serving topics.
// It fails with AlreadyExists while a live row holds the worker id for
// another principal (on any gateway), and with Unavailable when the
// database cannot be reached.
func (t *Tracker) Open(ctx context.Context, workerID, principal string, topics []string) (*Session, error) {
	if t == nil {
		return nil, nil
	}
	p := jobstore.Presence{WorkerID: workerID, Principal: principal, Topics: topics}
	at, err := t.store.OpenPresence(ctx, t.cfg.Gateway, p, t.cfg.TTL)
	if err != nil {
		return nil, err
	}
	p.ConnectedAt = at
	s := &Session{t: t, p: p, lost: make(chan struct{})}
	t.mu.Lock()
	t.sessions[s] = struct{}{}
	t.mu.Unlock()
	return s, nil
}

// Lost is closed when another identity took the worker id over (possible
// only after this gateway failed to refresh the row for a whole TTL); the
// stream should end. A nil session is never lost.
func (s *Session) Lost() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.lost
}

// Close removes the stream's row, soon and batched with other closes.
func (s *Session) Close() {
	if s == nil {
		return
	}
	s.done.Do(func() {
		t := s.t
		t.mu.Lock()
		delete(t.sessions, s)
		t.left = append(t.left, jobstore.Left{WorkerID: s.p.WorkerID, ConnectedAt: s.p.ConnectedAt})
		t.mu.Unlock()
		select {
		case t.kick <- struct{}{}:
		default:
		}
	})
}

// Run refreshes every interval and deletes the rows of closed streams as
// they close, until ctx is done; then it deletes the rows of every stream
// still recorded, so a gateway that stops cleanly leaves nothing to expire.
// Stop it after the streams have ended.
func (t *Tracker) Run(ctx context.Context) {
	if t == nil {
		return
	}
	tick := time.NewTicker(t.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			t.shutdown()
			return
		case <-t.kick:
			t.flushLeft(ctx)
		case <-tick.C:
			t.flushLeft(ctx)
			t.refresh(ctx)
		}
	}
}

// flushLeft deletes the rows of the streams that closed since the last
// flush, in one statement; on failure they wait for the next one (the
// delete is fenced by each row's mark, so a retry is safe).
func (t *Tracker) flushLeft(ctx context.Context) {
	t.mu.Lock()
	left := t.left
	t.left = nil
	t.mu.Unlock()
	if len(left) == 0 {
		return
	}
	if err := t.store.LeavePresence(ctx, left); err != nil {
		t.failed("delete closed streams' presence", err)
		t.mu.Lock()
		t.left = append(left, t.left...)
		t.mu.Unlock()
	}
}

// refresh extends the rows of every open stream, one entry per worker id
// (two streams may share one: a reconnect racing its old stream), and ends
// the sessions whose worker id another identity took over.
func (t *Tracker) refresh(ctx context.Context) {
	t.mu.Lock()
	byID := make(map[string][]*Session, len(t.sessions))
	for s := range t.sessions {
		byID[s.p.WorkerID] = append(byID[s.p.WorkerID], s)
	}
	t.mu.Unlock()
	entries := make([]jobstore.Presence, 0, len(byID))
	for _, ss := range byID {
		entries = append(entries, merge(ss))
	}
	kept, swept, err := t.store.RefreshPresence(ctx, t.cfg.Gateway, entries, t.cfg.TTL, SweepBatch)
	if err != nil {
		t.failed("refresh presence", err)
		return
	}
	if swept > 0 {
		t.logger.Info("swept the presence of workers whose gateway stopped refreshing it", "rows", swept)
	}
	for id, ss := range byID {
		if kept[id] {
			continue
		}
		t.logger.Warn("worker id taken over by another identity after this gateway's row expired; ending its streams",
			logging.WorkerID, id, "streams", len(ss))
		for _, s := range ss {
			s.lostOnce.Do(func() { close(s.lost) })
		}
	}
}

// merge is the row for the streams of one worker id: every topic any of
// them serves, under the newest stream's mark (the one its row carries
// unless a close raced it).
func merge(ss []*Session) jobstore.Presence {
	newest := ss[0]
	var topics []string
	for _, s := range ss {
		if s.p.ConnectedAt.After(newest.p.ConnectedAt) {
			newest = s
		}
		topics = append(topics, s.p.Topics...)
	}
	slices.Sort(topics)
	p := newest.p
	p.Topics = slices.Compact(topics)
	return p
}

// shutdown deletes what this gateway still holds: the closed streams'
// rows, and the rows of any stream still open.
func (t *Tracker) shutdown() {
	t.mu.Lock()
	for s := range t.sessions {
		t.left = append(t.left, jobstore.Left{WorkerID: s.p.WorkerID, ConnectedAt: s.p.ConnectedAt})
		delete(t.sessions, s)
	}
	t.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), finalFlushTimeout)
	defer cancel()
	t.flushLeft(ctx)
}

func (t *Tracker) failed(what string, err error) {
	if t.cfg.OnError != nil {
		t.cfg.OnError()
	}
	t.logger.Warn(what+" failed; retrying at the next refresh", logging.Error, err)
}
