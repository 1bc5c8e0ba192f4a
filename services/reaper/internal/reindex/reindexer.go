package reindex

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/logging"
)

const tracerName = "github.com/pulsequeue/pulse/services/reaper/internal/reindex"

const (
	// OldestSnapshot postpones a pass while another transaction has held
	// a snapshot for longer: a rebuild waits for every snapshot older than
	// each of its phases, and gives up after jobstore.ReindexLockTimeout.
	OldestSnapshot = 10 * time.Second
	// VacuumWait is how long a pass waits for a vacuum of the jobs table
	// to end before it postpones. A busy queue's table is vacuumed often
	// and for long, and a rebuild can start only between two vacuums
	// (Postgres would cancel the vacuum rather than let the rebuild wait).
	VacuumWait = 5 * time.Minute
	// vacuumPoll is how often a waiting pass looks again.
	vacuumPoll = time.Second
	// TableShare is the least share of the table's size a rebuild must
	// give back, beside Config.MinFreed: a rebuild reads the whole table
	// twice, and on a table of a day's jobs an index that churns (the
	// claim index holds only queued jobs, and grows between vacuums) is
	// not worth two reads of it.
	TableShare = 0.05
	// Cooldown is how long after this process rebuilt an index it is not
	// rebuilt again unless it has grown past Regrowth times the size it
	// had when it was: an index that churns grows back to its working size
	// between vacuums, and one whose entries Postgres had counted when it
	// held fewer (a backlog since) looked bloated and was not.
	Cooldown = time.Hour
	// Regrowth is how many times its size at its last rebuild an index
	// must reach to be rebuilt again within Cooldown: the claim index,
	// rebuilt at its working size before a long snapshot, grows to ten
	// times that during one (ADR-0075), which a rebuild gives back.
	Regrowth = 2.0
	// WorkingHold is how long the Regrowth rule holds past Cooldown for an
	// index that had grown back, when Cooldown ended, to at least
	// 1/Regrowth of its size before its rebuild: that size is its working
	// size (a partial index that churns with the queue, as the claim index
	// does at thousands of jobs a second), and a rebuild there reads the
	// heap twice for what the index takes back within minutes (ADR-0078).
	// After it, the index may be rebuilt at that size once more, so one
	// left large by a workload that has since quietened is given back
	// within a day.
	WorkingHold = 24 * time.Hour
	// HeapRegrowth is how many times its size before a long snapshot the
	// jobs table's heap may be and count as back (ADR-0077): a snapshot of
	// ten minutes on a busy queue leaves the heap several times its size,
	// and while it is, every vacuum of the table takes minutes and the
	// indexes that churn grow back to what the queue passes through them
	// in that time.
	HeapRegrowth = 2.0
	// heapFloor is a heap small enough to count as back whatever its size
	// before the snapshot (an empty table's).
	heapFloor = 1 << 20
)

// Session is one maintenance connection (jobstore.IndexMaintenance).
type Session interface {
	IndexSizes(ctx context.Context) ([]jobstore.IndexSize, error)
	Obstacle(ctx context.Context) (jobstore.Obstacle, error)
	DropLeftovers(ctx context.Context) ([]string, error)
	Rebuild(ctx context.Context, schema, name string) (int64, error)
	Close(ctx context.Context) error
}

// Opener opens a Session, or returns nil and no error when another
// reaper's session holds the reindex lock.
type Opener func(ctx context.Context) (Session, error)

// StoreOpener opens sessions on store whose lock waits give up after
// lockTimeout (jobstore.ReindexLockTimeout).
func StoreOpener(store *jobstore.Store, lockTimeout time.Duration) Opener {
	return func(ctx context.Context) (Session, error) {
		m, err := store.OpenIndexMaintenance(ctx, lockTimeout)
		if m == nil || err != nil {
			return nil, err
		}
		return m, nil
	}
}

// Watcher reads what would make a rebuild wait, without the reindex lock
// (jobstore.Store.ReindexObstacle).
type Watcher func(ctx context.Context) (jobstore.Obstacle, error)

// StoreWatcher watches on store's pool.
func StoreWatcher(store *jobstore.Store) Watcher { return store.ReindexObstacle }

// Observer is told what each pass found and did, for metrics.
type Observer interface {
	IndexSizes(sizes []jobstore.IndexSize)
	Reindexed(index string, err error)
}

// Config tunes the reindexer. How often it runs is the loop's business
// (app: pkg/server/loop, every PULSE_REINDEX_INTERVAL).
type Config struct {
	// Bloat is how many times its estimated size an index must be to be
	// rebuilt.
	Bloat float64
	// MinFreed is the least a rebuild must give back, in bytes.
	MinFreed int64
	// OldestSnapshot postpones rebuilds while another transaction has held
	// a snapshot longer than this.
	OldestSnapshot time.Duration
	// VacuumWait is how long a pass waits for a vacuum of the table to end
	// before it postpones.
	VacuumWait time.Duration
}

// Reindexer rebuilds bloated indexes of the jobs table.
type Reindexer struct {
	cfg      Config
	open     Opener
	watch    Watcher
	observer Observer
	logger   *slog.Logger
	// rebuilt is this process's last rebuild of each index (Cooldown).
	rebuilt map[string]rebuild
	// cleanup follows a long snapshot: the vacuums of the table that
	// must end after this process saw it closed before a rebuild. Passes
	// that find the lock held elsewhere follow it too (watch), so a reaper
	// that takes the lock over knows what the holder knew.
	cleanup cleanup
}

// cleanup is what a long snapshot leaves the reindexer waiting for: the
// vacuum that removes the versions it kept (ADR-0075), and then the heap's
// return to its size (ADR-0077). An index rebuilt before that vacuum has
// run has no free pages, and takes new ones for every version written
// while the vacuum works through millions, growing back much of what the
// rebuild gave. One rebuilt after it, while the heap is still several
// times its size, grows back to what the queue passes through it during
// each of the next vacuums, which take minutes over that heap; once the
// heap is back they take seconds, and the rebuilds made meanwhile are
// exempt from the cooldown once.
type cleanup struct {
	// open is set while a pass sees a transaction holding a snapshot
	// longer than Config.OldestSnapshot.
	open bool
	// heap is the smallest size of the table's heap seen while a long
	// snapshot was open: what it held before the snapshot grew it.
	heap int64
	// until is the count of the table's vacuums (Obstacle.Vacuums) a
	// rebuild waits for; 0 when it waits for none.
	until int64
	// closed is when a look first found the snapshot closed: the
	// rebuilds since are made over the large heap.
	closed time.Time
	// large is when the vacuums counted by until were found ended with
	// the heap still past HeapRegrowth times its size before the
	// snapshot; zero when it was not. After Cooldown the heap is taken to
	// have grown for good.
	large time.Time
}

// see notes what one look at now found: a long snapshot, or the first look
// after one, which counts the vacuums that must end before a rebuild — the
// next to end, and one more if a vacuum was already running, since that
// one may have started before the snapshot closed — then whether those
// vacuums left the heap large, and then whether it is back. It returns
// when the snapshot closed on the look that finds the heap back after it
// was left large, and the zero time otherwise.
func (c *cleanup) see(o jobstore.Obstacle, oldest time.Duration, now time.Time) (back time.Time) {
	switch {
	case o.Snapshot > oldest:
		if !c.open && c.until == 0 && c.large.IsZero() || o.Heap < c.heap {
			c.heap = o.Heap
		}
		c.open, c.until = true, 0
	case c.open:
		c.open, c.until = false, o.Vacuums+1
		if o.Vacuum {
			c.until++
		}
		if c.closed.IsZero() {
			c.closed = now
		}
	case c.until != 0 && o.Vacuums < c.until-2:
		// The count was reset with the statistics.
		*c = cleanup{}
	case c.until != 0 && o.Vacuums < c.until:
	case c.until != 0:
		c.until = 0
		if c.isBack(o) {
			*c = cleanup{}
		} else {
			c.large = now
		}
	case c.large.IsZero():
	case c.isBack(o):
		back = c.closed
		*c = cleanup{}
	case now.Sub(c.large) >= Cooldown:
		*c = cleanup{}
	}
	return back
}

// isBack says whether the heap is back within HeapRegrowth of its size
// before the snapshot.
func (c *cleanup) isBack(o jobstore.Obstacle) bool {
	return o.Heap <= heapFloor || float64(o.Heap) <= HeapRegrowth*float64(c.heap)
}

// waiting says why a rebuild waits for the cleanup, or "".
func (c *cleanup) waiting(o jobstore.Obstacle) string {
	if c.until == 0 {
		return ""
	}
	return fmt.Sprintf("a long snapshot closed; waiting for %d more vacuum(s) of the jobs table to end", c.until-o.Vacuums)
}

// rebuild is when an index was last rebuilt and its size just before.
type rebuild struct {
	at    time.Time
	bytes int64
	// settled is the index's size at the first pass after Cooldown, 0
	// until then. At least bytes/Regrowth, the index grew back: the
	// rebuild gave back nothing that lasted (WorkingHold).
	settled int64
}

// holds says whether the record keeps an index of bytes from being
// rebuilt at now: within Cooldown, or within WorkingHold once the index
// has shown its working size, unless it has grown to Regrowth times its
// size before the rebuild.
func (b rebuild) holds(bytes int64, now time.Time) bool {
	if float64(bytes) >= Regrowth*float64(b.bytes) {
		return false
	}
	age := now.Sub(b.at)
	return age < Cooldown || age < WorkingHold && b.grewBack()
}

// grewBack says whether the index was back near its size before the
// rebuild when Cooldown ended.
func (b rebuild) grewBack() bool {
	return b.settled > 0 && float64(b.settled)*Regrowth >= float64(b.bytes)
}

// NewReindexer builds the reindexer. watch and observer may be nil; with
// no watch, a pass that finds the lock held elsewhere looks at nothing.
func NewReindexer(cfg Config, open Opener, watch Watcher, observer Observer, logger *slog.Logger) *Reindexer {
	if observer == nil {
		observer = nopObserver{}
	}
	return &Reindexer{cfg: cfg, open: open, watch: watch, observer: observer,
		logger: logger.With(logging.Loop, "reindexer"), rebuilt: map[string]rebuild{}}
}

// Result is what one pass did.
type Result struct {
	// Rebuilt names the indexes rebuilt, in the order they were.
	Rebuilt []string
	// Dropped names the leftovers of failed rebuilds dropped.
	Dropped []string
	// Postponed says why the pass stopped before a rebuild it wanted, or
	// is empty.
	Postponed string
}

// Pass runs once: it drops what failed rebuilds left, then rebuilds every
// index past the thresholds, in the order due gives, looking
// before each for what would make it wait: it waits out a vacuum of the
// table (up to VacuumWait) and postpones to the next pass for an old
// snapshot. It stops at the first rebuild that fails, after dropping what
// that one left: the next pass tries again. When another reaper holds the
// reindex lock it only watches the table's snapshots and vacuums.
func (r *Reindexer) Pass(ctx context.Context) (Result, error) {
	ctx, span := otel.Tracer(tracerName).Start(ctx, "reaper.reindex")
	defer span.End()
	res, err := r.pass(ctx)
	span.SetAttributes(attribute.StringSlice("pulse.reindex.rebuilt", res.Rebuilt))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return res, err
}

func (r *Reindexer) pass(ctx context.Context) (Result, error) {
	var res Result
	s, err := r.open(ctx)
	if err != nil {
		return res, err
	}
	if s == nil {
		// Another reaper's pass holds the lock: only watch.
		if r.watch != nil {
			o, err := r.watch(ctx)
			if err != nil {
				return res, err
			}
			r.look(ctx, o)
		}
		return res, nil
	}
	defer func() { _ = s.Close(context.WithoutCancel(ctx)) }()

	res.Dropped, err = r.dropLeftovers(ctx, s)
	if err != nil {
		return res, err
	}
	// A look every pass, whether or not an index is due, so that a long
	// snapshot is seen while it is open.
	o, err := s.Obstacle(ctx)
	if err != nil {
		return res, err
	}
	r.look(ctx, o)
	sizes, err := s.IndexSizes(ctx)
	if err != nil {
		return res, err
	}
	r.observer.IndexSizes(sizes)
	r.settle(ctx, sizes, time.Now())
	for _, idx := range r.due(sizes, time.Now()) {
		reason, err := r.clear(ctx, s)
		if err != nil {
			return res, err
		}
		if reason != "" {
			res.Postponed = reason
			r.logger.InfoContext(ctx, "index rebuild postponed to the next pass", "index", idx.Name, "why", reason,
				"bytes", idx.Bytes, "estimated_bytes", idx.CompactBytes())
			return res, nil
		}
		start := time.Now()
		after, err := s.Rebuild(ctx, idx.Schema, idx.Name)
		r.observer.Reindexed(idx.Name, err)
		if err != nil {
			dropped, derr := r.dropLeftovers(ctx, s)
			res.Dropped = append(res.Dropped, dropped...)
			return res, errors.Join(err, derr)
		}
		r.rebuilt[idx.Name] = rebuild{at: time.Now(), bytes: idx.Bytes}
		res.Rebuilt = append(res.Rebuilt, idx.Name)
		r.logger.InfoContext(ctx, "rebuilt a bloated index", "index", idx.Name,
			"bytes_before", idx.Bytes, "bytes_after", after, "estimated_bytes", idx.CompactBytes(),
			"seconds", time.Since(start).Seconds())
	}
	return res, nil
}

// look follows the cleanup after a long snapshot (cleanup.see) with what
// one look found, and once the heap is back, forgets this process's
// rebuilds made since the snapshot closed: the cooldown keeps an index
// that churns from being rebuilt at its working size, and their size was
// the working size of a table whose vacuums took minutes (ADR-0077).
func (r *Reindexer) look(ctx context.Context, o jobstore.Obstacle) {
	since := r.cleanup.see(o, r.cfg.OldestSnapshot, time.Now())
	if since.IsZero() {
		return
	}
	var forgot []string
	for name, b := range r.rebuilt {
		if !b.at.Before(since) {
			delete(r.rebuilt, name)
			forgot = append(forgot, name)
		}
	}
	sort.Strings(forgot)
	r.logger.InfoContext(ctx, "the jobs table's heap is back near its size before a long snapshot; the indexes rebuilt since may be rebuilt again",
		"heap_bytes", o.Heap, "indexes", forgot)
}

// clear waits, up to VacuumWait, for a vacuum or an analyze of the jobs
// table to end (an autovacuum analyzes the table after vacuuming it, and
// Postgres would cancel that analyze for the rebuild's lock), and
// returns why a rebuild cannot start now, or "" when it can: a long
// snapshot open, or the vacuums after one still to come.
func (r *Reindexer) clear(ctx context.Context, s Session) (string, error) {
	deadline := time.Now().Add(r.cfg.VacuumWait)
	waiting := false
	for {
		o, err := s.Obstacle(ctx)
		if err == nil {
			r.look(ctx, o)
		}
		switch {
		case err != nil:
			return "", err
		case o.Snapshot > r.cfg.OldestSnapshot:
			return fmt.Sprintf("a transaction has held a snapshot for %s", o.Snapshot.Round(time.Second)), nil
		case r.cleanup.waiting(o) != "":
			return r.cleanup.waiting(o), nil
		case !o.Vacuum && !o.Analyze:
			return "", nil
		case !time.Now().Before(deadline):
			return fmt.Sprintf("vacuums or analyzes of the jobs table ran for all of %s", r.cfg.VacuumWait), nil
		}
		if !waiting {
			waiting = true
			r.logger.InfoContext(ctx, "waiting for a vacuum or an analyze of the jobs table to end before a rebuild",
				"vacuum", o.Vacuum, "analyze", o.Analyze)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(vacuumPoll):
		}
	}
}

// settle records, at the first pass after Cooldown, the size each index
// this process rebuilt has grown back to (rebuild.settled), and says so
// when that is its working size. Not while a long snapshot or the cleanup
// after it is under way: the indexes are larger then than the queue keeps
// them.
func (r *Reindexer) settle(ctx context.Context, sizes []jobstore.IndexSize, now time.Time) {
	if r.cleanup != (cleanup{}) {
		return
	}
	for _, s := range sizes {
		b, ok := r.rebuilt[s.Name]
		if !ok || b.settled > 0 || now.Sub(b.at) < Cooldown {
			continue
		}
		b.settled = max(s.Bytes, 1)
		r.rebuilt[s.Name] = b
		if b.grewBack() {
			r.logger.InfoContext(ctx, "an index grew back to about its size before its last rebuild: its working size; not rebuilt there again for a while",
				"index", s.Name, "bytes", s.Bytes, "bytes_before_rebuild", b.bytes, "rebuilt_at", b.at, "hold", WorkingHold)
		}
	}
}

// due lists the indexes to rebuild at now: Bloat times their estimated
// size, giving back MinFreed and TableShare of the table, and not held by
// this process's last rebuild of them (rebuild.holds: within Cooldown, or
// WorkingHold for an index that grew back) unless grown to Regrowth times
// their size then. Those over every row come first, the one that gives
// back most first; the partial ones after them, the one that gives back most last
// (ADR-0076): a partial index churns with the queue (the claim index holds
// only queued jobs), and grows back while a later rebuild holds the
// vacuums off, so the one that churns most is rebuilt when no rebuild
// follows it.
func (r *Reindexer) due(sizes []jobstore.IndexSize, now time.Time) []jobstore.IndexSize {
	var out []jobstore.IndexSize
	for _, s := range sizes {
		freed := s.Bytes - s.CompactBytes()
		if s.Bloat() < r.cfg.Bloat || freed < r.cfg.MinFreed || float64(freed) < TableShare*float64(s.TableBytes) {
			continue
		}
		if last, ok := r.rebuilt[s.Name]; ok && last.holds(s.Bytes, now) {
			continue
		}
		out = append(out, s)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Partial != b.Partial {
			return !a.Partial
		}
		freedA, freedB := a.Bytes-a.CompactBytes(), b.Bytes-b.CompactBytes()
		if a.Partial {
			return freedA < freedB
		}
		return freedA > freedB
	})
	return out
}

func (r *Reindexer) dropLeftovers(ctx context.Context, s Session) ([]string, error) {
	dropped, err := s.DropLeftovers(ctx)
	for _, name := range dropped {
		r.logger.WarnContext(ctx, "dropped an invalid index a failed rebuild left", "index", name)
	}
	if err != nil {
		return dropped, fmt.Errorf("drop leftovers: %w", err)
	}
	return dropped, nil
}

type nopObserver struct{}

func (nopObserver) IndexSizes([]jobstore.IndexSize) {}
func (nopObserver) Reindexed(string, error)         {}
