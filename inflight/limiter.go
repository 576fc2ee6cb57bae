package inflight

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/internal/chaos"
	"github.com/floodgate-go/floodgate/internal/decision"
	"github.com/floodgate-go/floodgate/internal/flat"
	"github.com/floodgate-go/floodgate/internal/sweeper"
	"github.com/floodgate-go/floodgate/internal/testhook"
	"github.com/floodgate-go/floodgate/internal/word"
	"golang.org/x/sys/cpu"
)

// Config configures a Limiter. Only Limit is required.
type Config struct {
	// Limit is the most slots one key may hold at once: 1 to MaxLimit.
	Limit int

	// Queue is the most waiters Acquire may queue per key, 0 to 2^30-1.
	// 0, the default, means Acquire never waits: a key whose slots are
	// all held is refused at once, as TryAcquire refuses it.
	Queue int

	// Global, above 0, caps the slots held over all keys together (up to
	// MaxLimit). A slot is taken from it before the key's, and given back
	// when the key's is refused. The queue waits for a key's slots only:
	// a request that finds the global cap full is refused at once.
	Global int

	// MaxKeys bounds the keys held: Len never exceeds it. A new key at
	// the bound takes the place of a key that holds nothing; when every
	// key of its shard holds a slot or a waiter, the new key is refused
	// (ErrKeys), since a held slot cannot be forgotten. 0, the default,
	// is 1,048,576 keys: 64 MiB at 64 bytes a key (a word in the table
	// with its share of the table), the bound floodgate.Config gives a
	// bucket, so that a flood of new ids cannot grow memory without
	// bound. floodgate.Unbounded (math.MaxInt) holds every key; negative
	// is an error.
	MaxKeys int

	// IdleTTL is how often a sweep removes the keys that hold nothing
	// and have not been acquired since the sweep before. 0, the default,
	// is one minute, so that the keys of ids a client rotates go;
	// floodgate.Never (math.MaxInt64) is no sweep; negative is an error.
	// A key removed holds nothing, and comes back as it left. Close
	// stops the sweep, which holds the Limiter weakly: one dropped
	// without Close is collected, and its sweep ends.
	IdleTTL time.Duration

	twin   bool // the mutex twin: set only through testhook.InFlightTwin
	spread bool // every key spreads at once: set only through testhook.InFlightSpread
}

// Errors that Acquire returns. A refusal is final for this attempt; the
// context's error is returned as it is.
var (
	// ErrFull: every slot of the key is held, and its queue is full (or
	// Config.Queue is 0).
	ErrFull = errors.New("inflight: every slot of the key is held")
	// ErrGlobal: every slot of the global cap is held.
	ErrGlobal = errors.New("inflight: every slot of the global cap is held")
	// ErrKeys: MaxKeys are held, and every key that the new one could
	// replace holds a slot or a waiter.
	ErrKeys = errors.New("inflight: MaxKeys keys are held, and all of them are busy")
	// ErrClosed: the Limiter was closed while the request waited, or
	// before it had to wait.
	ErrClosed = errors.New("inflight: the limiter is closed")
)

// A Limiter bounds the requests each key holds at once: at most Limit
// slots of a key are held at any instant, from any number of goroutines.
// TryAcquire takes a slot or refuses at once; Acquire may wait for one in
// the key's queue. Each slot taken comes as a Slot, whose Release gives it
// back once.
//
// A key's state is one word in a sharded flat table: an acquisition and a
// release are one CAS on it, with no lock, and allocate nothing for a key
// already held. Only a key that has waiters takes a lock (its queue's).
//
// A key that holds a slot or a waiter is never removed: not by Sweep,
// nor the sweeper, nor MaxKeys. A key removed while it holds nothing comes
// back with every slot free, which is exactly the state it left: unlike a
// rate, an in-flight count has no history to remember.
//
// A Limiter with no Queue and no Global spreads a key that several cores
// take and give back at once: a slot given back may stay parked on the
// releasing core's lane of the key, still counted held, for that core's
// next request of the key to take with no write to a line that other
// cores share. This changes no answer: a request that finds the key full
// takes a parked slot from any core's lane before it is refused, and a
// slot is parked only while the key is well below its limit. It costs a
// spread key a cache line per P, and every key a pointer; at most 64 keys
// are spread at once, and Sweep takes the lanes of a key that took no
// slot from them since the previous Sweep.
//
// A Limiter is safe for concurrent use. The zero value is not usable:
// call New.
type Limiter struct {
	limit  atomic.Uint64 // SetLimit changes it
	queue  uint64
	flat   flat.Flat
	hasher *flat.Hasher
	global *counter // nil without Config.Global
	queues *queues
	twin   *twin // the mutex twin, instead of the table and queues
	max    int

	spreads   bool   // keys may spread: no queue, no global cap
	spreadAll bool   // every key spreads when created (tests)
	margin    uint64 // a spread key parks only while it holds margin below its limit
	ps        int    // lanes per spread key

	stopOnce sync.Once
	stop     chan struct{}
	swept    <-chan struct{}

	// The keys spread now, at most maxSpread, and those Sweep unspread
	// (for the tests), on a line of their own: a spread or an unspread
	// writes them, and every acquisition reads the fields above.
	_         cpu.CacheLinePad
	spreading atomic.Int64
	unspreads atomic.Int64
	_         cpu.CacheLinePad
}

// counter is the global cap's count, on a line of its own.
type counter struct {
	_   cpu.CacheLinePad
	n   atomic.Int64
	max int64
	_   cpu.CacheLinePad
}

// take takes one of the cap's slots, if one is free.
func (c *counter) take() bool {
	for {
		v := c.n.Load()
		if v >= c.max {
			return false
		}
		chaos.Yield()
		if c.n.CompareAndSwap(v, v+1) {
			return true
		}
		chaos.Lost("inflight.global")
	}
}

// New validates cfg and returns a Limiter. A Limit outside 1 to MaxLimit,
// a Queue outside 0 to 2^30-1, a Global outside 0 to MaxLimit, and a
// negative MaxKeys or IdleTTL are errors.
func New(cfg Config) (*Limiter, error) {
	if err := checkLimit(cfg.Limit); err != nil {
		return nil, err
	}
	switch {
	case cfg.Queue < 0 || cfg.Queue > maxQueue:
		return nil, fmt.Errorf("inflight: Queue must be 0 (no waiting) to %d waiters per key, got %d", maxQueue, cfg.Queue)
	case cfg.Global < 0 || cfg.Global > MaxLimit:
		return nil, fmt.Errorf("inflight: Global must be 0 (no cap) to %d slots, got %d", MaxLimit, cfg.Global)
	case cfg.MaxKeys < 0:
		return nil, fmt.Errorf("inflight: MaxKeys must be 0 (the default bound), positive or floodgate.Unbounded, got %d", cfg.MaxKeys)
	case cfg.IdleTTL < 0:
		return nil, fmt.Errorf("inflight: IdleTTL must be 0 (a minute), positive or floodgate.Never, got %v", cfg.IdleTTL)
	}
	switch cfg.MaxKeys {
	case 0:
		cfg.MaxKeys = defaultMaxKeys
	case unbounded:
		cfg.MaxKeys = 0 // the table's none
	}
	l := &Limiter{queue: uint64(cfg.Queue), hasher: flat.NewHasher(), max: cfg.MaxKeys}
	l.limit.Store(uint64(cfg.Limit))
	if cfg.Global > 0 {
		l.global = &counter{max: int64(cfg.Global)}
	}
	if cfg.twin {
		l.twin = newTwin(l)
	} else {
		l.spreads = cfg.Queue == 0 && cfg.Global == 0
		l.ps = lanesPerKey()
		l.margin = uint64(l.ps)
		if cfg.spread && l.spreads {
			l.spreadAll, l.margin = true, 0 // park at any count, to try every path
		}
		l.flat = flat.NewFlat(flat.FlatConfig{MaxKeys: cfg.MaxKeys, Pointers: l.spreads, Hooks: flat.Hooks{Retire: l.retireIdle}})
		l.queues = new(queues)
	}
	if ttl := cmp.Or(cfg.IdleTTL, defaultIdleTTL); ttl != decision.Never {
		l.stop = make(chan struct{})
		t := time.NewTicker(ttl)
		l.swept = sweeper.Start(l, t.C, t, l.stop, (*Limiter).sweepPass)
	}
	return l, nil
}

// The defaults of Config.MaxKeys and Config.IdleTTL, and floodgate's
// Unbounded.
const (
	defaultMaxKeys = 1 << 20
	defaultIdleTTL = time.Minute
	unbounded      = math.MaxInt
)

// sweepPass is the background sweep's pass (see sweeper.Start).
func (l *Limiter) sweepPass() { l.Sweep() }

func init() {
	testhook.InFlightTwin = func(c any) any {
		cfg := c.(Config)
		cfg.twin = true
		return cfg
	}
	testhook.InFlightSpread = func(c any) any {
		cfg := c.(Config)
		cfg.spread = true
		return cfg
	}
	testhook.InFlightSpreadKeys = func(l any) int { return l.(*Limiter).spreadKeys() }
	testhook.InFlightInUse = func(l any) int { return l.(*Limiter).inUse() }
	testhook.InFlightEvictIdle = func(l any) int { return l.(*Limiter).evictIdle() }
	testhook.InFlightSpreadKey = func(a any, key string) {
		if l := a.(*Limiter); l.twin == nil && (l.spreadAll || l.spreadsAt(l.limit.Load())) {
			l.spread(l.hasher.ID(key))
		}
	}
	testhook.InFlightSpreadCounts = func(a any) (int, int) {
		l := a.(*Limiter)
		return int(l.spreading.Load()), int(l.unspreads.Load())
	}
}

// TryAcquire takes one of key's slots if one is free and no waiter is
// queued for the key, and reports whether it did. It never waits, and
// allocates nothing for a key already held.
func (l *Limiter) TryAcquire(key string) (Slot, bool) {
	s, r := l.acquire(l.hasher.ID(key))
	return s, r == granted
}

// acquire is TryAcquire for key id, with the reason of a refusal.
func (l *Limiter) acquire(id flat.ID) (Slot, refusal) {
	if l.twin != nil {
		return l.twin.acquire(id)
	}
	g := l.global
	if g != nil && !g.take() {
		return Slot{}, globalFull
	}
	s, r := l.take(id)
	if r != granted {
		if g != nil {
			g.n.Add(-1)
		}
		return Slot{}, r
	}
	if s.t != nil {
		return s, granted // lent by the key's lane
	}
	return l.issue(id), granted
}

// Acquire takes one of key's slots, waiting for one if they are all held
// and the key's queue has room: waiters are served in the order they came,
// and none is overtaken by a later Acquire or TryAcquire. It returns the
// context's error, and no slot, if ctx is done before a slot is taken
// (already done: at once, even if a slot is free); ErrFull if the queue is
// full; ErrGlobal, ErrKeys or ErrClosed (see each). A waiter that gives up
// takes no slot and leaves no gap in the queue.
func (l *Limiter) Acquire(ctx context.Context, key string) (Slot, error) {
	if err := ctx.Err(); err != nil {
		return Slot{}, err
	}
	id := l.hasher.ID(key)
	s, r := l.acquire(id)
	switch {
	case r == granted:
		return s, nil
	case r != keyFull:
		return Slot{}, r.err()
	case l.queue == 0:
		return Slot{}, ErrFull
	case l.twin != nil:
		return l.twin.wait(ctx, id)
	}
	return l.wait(ctx, id)
}

// err is the error Acquire returns for a refusal.
func (r refusal) err() error {
	switch r {
	case keyFull:
		return ErrFull
	case keysFull:
		return ErrKeys
	case globalFull:
		return ErrGlobal
	}
	return nil
}

// release gives back a slot of key id: to the first waiter, if one is
// queued, or to the key (and the global cap). p is the caller's P (pid),
// for a spread key's lane.
func (l *Limiter) release(id flat.ID, p int) {
	if l.twin != nil {
		l.twin.release(id)
		return
	}
	for !l.putBack(id, p) {
		if l.handOff(id) {
			return
		}
		// The waiter left meanwhile: put it back after all.
	}
	if g := l.global; g != nil {
		g.n.Add(-1)
	}
}

// Held returns the slots of key held now.
func (l *Limiter) Held(key string) int {
	h, _ := l.count(l.hasher.ID(key))
	return h
}

// Waiting returns the waiters queued for key now.
func (l *Limiter) Waiting(key string) int {
	_, w := l.count(l.hasher.ID(key))
	return w
}

// count returns what key id holds now: slots and waiters.
func (l *Limiter) count(id flat.ID) (int, int) {
	if l.twin != nil {
		return l.twin.count(id)
	}
	t, i := l.flat.Find(id)
	if i < 0 {
		return 0, 0
	}
	v := t.Word(i).Load()
	if word.IsMark(v) {
		return 0, 0
	}
	h := held(v)
	if v&spreadBit != 0 {
		if sp := spreadOf(t, i); sp != nil { // nil if removed since v
			h -= min(h, sp.parked())
		}
	}
	return int(h), int(waiting(v))
}

// inUse returns the slots held over all keys together, when Config.Global
// is set; otherwise 0.
func (l *Limiter) inUse() int {
	if l.twin != nil {
		return l.twin.inUseNow()
	}
	if l.global == nil {
		return 0
	}
	return int(l.global.n.Load())
}

// Limit returns the limit of every key: Config.Limit, or the latest
// SetLimit's.
func (l *Limiter) Limit() int { return int(l.limit.Load()) }

// Len returns the number of keys held now. With MaxKeys it never exceeds
// MaxKeys.
func (l *Limiter) Len() int {
	if l.twin != nil {
		return l.twin.len()
	}
	return l.flat.Len()
}

// evictIdle removes every key that holds no slot and no waiter, and
// returns how many it removed. It changes no decision: such a key comes
// back, on its next acquisition, exactly as it was.
func (l *Limiter) evictIdle() int {
	if l.twin != nil {
		return l.twin.evictIdle(false)
	}
	return l.flat.DeleteIf(l.retireIdle)
}

// Sweep removes the keys that hold nothing and were not acquired since
// the previous Sweep, and returns how many it removed: called every T, it
// removes a key within 2T of its last use. It is the pass that the
// sweeper of Config.IdleTTL makes, for a caller that sweeps many
// Limiters from one goroutine of its own. A spread key that stays, but
// took no slot from its lanes since the previous Sweep, loses its lanes
// (it spreads again if cores fight over it again).
func (l *Limiter) Sweep() int {
	if l.twin != nil {
		return l.twin.evictIdle(true)
	}
	var calm []flat.ID
	n := l.flat.DeleteIf(func(t *flat.Table, i int) bool { return l.retireUntouched(t, i, &calm) })
	for _, id := range calm {
		l.flat.Update(id, l.unspread)
	}
	return n
}

// checkLimit refuses a Limit out of range.
func checkLimit(limit int) error {
	if limit < 1 || limit > MaxLimit {
		return fmt.Errorf("inflight: Limit must be 1 to %d slots per key, got %d", MaxLimit, limit)
	}
	return nil
}

// SetLimit changes the limit of every key while the Limiter serves: 1 to
// MaxLimit, or an error. A higher limit serves at once the waiters it
// makes room for, in their order. Under a lower one, a key that holds
// more than the new limit keeps its slots until they are released, and
// takes no new one, nor serves a waiter, until it holds fewer.
func (l *Limiter) SetLimit(limit int) error {
	if err := checkLimit(limit); err != nil {
		return err
	}
	old := l.limit.Swap(uint64(limit))
	if l.twin != nil {
		l.twin.setLimit(uint64(limit))
		return nil
	}
	if uint64(limit) < old && l.spreads {
		// Parked slots count as held: give them back, so that a key
		// within the new limit is not refused for them.
		l.flat.DeleteIf(func(t *flat.Table, i int) bool {
			if v := t.Word(i).Load(); v&spreadBit != 0 && !word.IsMark(v) {
				settle(t, i, false)
			}
			return false
		})
	}
	l.serveRoom()
	return nil
}

// Close stops the sweeper, if any, and wakes every waiter with ErrClosed.
// Later, an Acquire that would have to wait returns ErrClosed; one that
// finds a slot free takes it, and TryAcquire and Release work as before,
// so that the work in flight ends normally. Close is idempotent and
// returns nil.
func (l *Limiter) Close() error {
	l.stopOnce.Do(func() {
		if l.twin != nil {
			l.twin.close()
		} else {
			l.closeQueues()
		}
		if l.stop != nil {
			close(l.stop)
			<-l.swept
		}
	})
	return nil
}
