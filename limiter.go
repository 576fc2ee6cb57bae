// Package floodgate limits the rate of requests per client: Allow(key) on
// every request, from any number of goroutines, in nanoseconds, without a
// global lock and without allocating for a key it has seen.
//
// A Limiter keeps one state per key in a flat, sharded open-addressing
// table. A key is identified by a 128-bit keyed hash, and the state of
// the word algorithms (token and leaky bucket, fixed window, sliding
// counter) lives beside that identity in the slot: finding a key and
// deciding its request touch one cache line. The default algorithm,
// "token_bucket", gives each key a bucket of Burst tokens (Limit when Burst
// is 0) that refills continuously at Limit per Period; a new key starts
// full. AllowN(key, n) is allowed if and only if the bucket holds at least
// n tokens at that instant, and then takes exactly n; a denial takes
// nothing. The bucket is one atomic word (a GCRA theoretical arrival time)
// changed by a CAS loop, in exact integer arithmetic: where Period/Limit is
// a whole number of nanoseconds, every decision equals exact rational
// arithmetic at every nanosecond (see atomicbucket for the other cases).
//
// Guarantees, under any number of goroutines:
//   - a key never passes more than Burst + Limit × elapsed / Period, not by
//     one request, with eviction running and with callers whose clock
//     readings reach the bucket out of order;
//   - with Config.Global, all keys together never pass more than the global
//     rule allows, and a key refused by the global cap gets its own grant
//     back;
//   - with Config.MaxKeys, Len never exceeds the bound, and a key evicted
//     to make room comes back with no more than it left with;
//   - for a key already present, Allow and AllowN allocate nothing, take no
//     lock, and write nothing but the key's own state word (which shares
//     its cache line with two other keys' words: see the README).
package floodgate

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/floodgate-go/floodgate/atomicbucket"
	"github.com/floodgate-go/floodgate/internal/hook"
	"github.com/floodgate-go/floodgate/internal/word"
	"github.com/floodgate-go/floodgate/registry"
	"github.com/floodgate-go/floodgate/shardedlog"
	"github.com/puzpuzpuz/xsync/v4"
	"golang.org/x/sys/cpu"
)

// Config configures a Limiter. Only Rule is required.
type Config struct {
	Algorithm string        // registered name; "" means "token_bucket"
	Rule      Rule          // the limit per key
	Global    *Rule         // optional cap over all keys together (a token bucket)
	Clock     Clock         // nil means SystemClock()
	IdleTTL   time.Duration // > 0: a background sweeper evicts keys idle this long; Close stops it

	// MaxKeys > 0 bounds the keys held: Len never exceeds it, at any
	// instant. A new key at the bound takes the place of a key held, chosen
	// by sampling (the one that would be fresh soonest, an idle one first),
	// and what the evicted key held is remembered in a fixed-size sketch
	// (8 bytes per key of MaxKeys), so that it comes back with no more
	// than it left with. 0, the default, means unbounded: a client that
	// rotates its id then grows the limiter's memory by one slot per id
	// until IdleTTL passes (see the README's "Memory bound"). Negative is
	// an error. Every built-in algorithm supports it; a registered one must
	// too (see Register).
	MaxKeys int

	// Stats counts Allowed, Denied and DeniedByGlobal (see Stats). The
	// other counts are kept always. Off by default: a striped add on every
	// request costs more than the 3% of a hot-key Allow that this library
	// allows itself for bookkeeping (see results/).
	Stats bool

	// Set only through internal/hook, by tests and bench/.
	reference bool                         // keep keys in the reference registry
	ids       func(key string) registry.ID // identify keys by this instead of the keyed hash
}

func init() {
	hook.Reference = func(c any) any {
		cfg := c.(Config)
		cfg.reference = true
		return cfg
	}
	hook.IDs = func(c any, id func(string) (uint64, uint64)) any {
		cfg := c.(Config)
		cfg.ids = func(key string) registry.ID {
			hi, lo := id(key)
			return registry.ID{Hi: hi, Lo: lo}
		}
		return cfg
	}
}

// kind says where a Limiter's states live.
type kind uint8

const (
	objects     kind = iota // out of line: a State per key
	bucketWords             // inline: an atomicbucket word per slot
	windowWords             // inline: a shardedlog window word per slot
)

// Limiter applies one rule to every key. It is safe for concurrent use; the
// zero value is not usable: call New.
type Limiter struct {
	kind     kind
	bucket   atomicbucket.Params // for bucketWords
	window   shardedlog.Params   // for windowWords
	capacity int64
	clock    Clock         // nil for SystemClock, read without an interface call
	coarse   *CoarseClock  // set when clock is a ticking CoarseClock: read without an interface call
	flat     registry.Flat // held by value: one load fewer per request
	hasher   *registry.Hasher
	ids      func(string) registry.ID  // nil: hasher.ID
	ref      *registry.Registry[State] // the reference registry, when chosen
	alg      Algorithm
	name     string                              // the algorithm's registered name
	reserves bool                                // the algorithm's states can reserve (WaitN)
	sketch   *sketch                             // with MaxKeys
	count    *counters                           // with Config.Stats
	global   atomic.Pointer[atomicbucket.Bucket] // nil without Config.Global

	evicted, evictedAtBound *xsync.Counter

	stopOnce sync.Once
	stop     chan struct{}
	swept    chan struct{} // closed when the sweeper has exited

	// evictedAt is the latest instant at which an eviction found keys
	// idle. A key created again after an eviction is full from then on,
	// not before: a request whose clock reading is older than the eviction
	// must find what the evicted state would have answered. Written only
	// by evictions, so it sits on a cache line of its own.
	_         cpu.CacheLinePad
	evictedAt atomic.Int64
}

// New validates cfg and returns a Limiter. It returns an error, and never a
// Limiter that silently does something else, for: a Rule with Limit ≤ 0,
// Period ≤ 0 or Burst < 0; a rule outside the algorithm's supported range
// (see Rule); an unknown algorithm; an invalid Global rule; a negative
// IdleTTL or MaxKeys; MaxKeys with an algorithm that cannot be bounded.
func New(cfg Config) (*Limiter, error) {
	name := cfg.Algorithm
	if name == "" {
		name = TokenBucket
	}
	if err := cfg.Rule.Validate(); err != nil {
		return nil, fmt.Errorf("floodgate: %w", err)
	}
	factory, err := lookup(name)
	if err != nil {
		return nil, err
	}
	alg, err := factory(cfg.Rule)
	if err != nil {
		return nil, fmt.Errorf("floodgate: algorithm %q cannot hold rule %+v: %w", name, cfg.Rule, err)
	}
	if alg == nil {
		return nil, fmt.Errorf("floodgate: algorithm %q returned no Algorithm", name)
	}
	if cfg.IdleTTL < 0 {
		return nil, fmt.Errorf("floodgate: IdleTTL must be 0 (no sweeper) or positive, got %v", cfg.IdleTTL)
	}
	if cfg.MaxKeys < 0 {
		return nil, fmt.Errorf("floodgate: MaxKeys must be 0 (unbounded) or positive, got %d", cfg.MaxKeys)
	}
	if _, ok := alg.(spentAlgorithm); cfg.MaxKeys > 0 && !ok && !inline(alg) {
		return nil, fmt.Errorf("floodgate: algorithm %q cannot be bounded by MaxKeys: it cannot make a state that remembers an evicted one", name)
	}
	if cfg.MaxKeys > 0 && cfg.reference {
		return nil, fmt.Errorf("floodgate: the reference registry has no MaxKeys")
	}
	l := &Limiter{alg: alg, name: name, capacity: cfg.Rule.Capacity(), hasher: registry.NewHasher(), ids: cfg.ids,
		evicted: xsync.NewCounter(), evictedAtBound: xsync.NewCounter()}
	switch alg.(type) {
	case lockFreeBucket, mutexBucket, leakyMeter:
		l.reserves = true // their states reserve: WaitN
	}
	l.evictedAt.Store(math.MinInt64)
	if _, system := cfg.Clock.(systemClock); cfg.Clock != nil && !system {
		l.clock = cfg.Clock
		if c, ok := cfg.Clock.(*CoarseClock); ok && c.read == nil {
			l.coarse = c
		}
	}
	if cfg.Stats {
		l.count = newCounters()
	}
	if g := cfg.Global; g != nil {
		if err := g.Validate(); err != nil {
			return nil, fmt.Errorf("floodgate: Global: %w", err)
		}
		p, err := atomicbucket.NewParams(g.Limit, g.Period, g.Burst)
		if err != nil {
			return nil, fmt.Errorf("floodgate: Global rule %+v: %w", *g, err)
		}
		l.global.Store(atomicbucket.New(p, l.now()))
	}
	l.build(cfg)
	if cfg.IdleTTL > 0 {
		l.stop = make(chan struct{})
		l.swept = make(chan struct{})
		ticker := time.NewTicker(max(cfg.IdleTTL/2, time.Millisecond))
		go func() {
			defer ticker.Stop()
			l.sweep(cfg.IdleTTL, ticker.C, nil)
		}()
	}
	return l, nil
}

// inline reports whether alg's state lives in the flat table's word, where
// MaxKeys evicts and remembers it without a state object.
func inline(alg Algorithm) bool {
	switch alg.(type) {
	case lockFreeBucket, lockFreeWindows:
		return true
	}
	return false
}

// build makes the registry: the flat table, with the state inline for the
// word algorithms, or the reference registry.
func (l *Limiter) build(cfg Config) {
	if cfg.reference {
		l.ref = registry.New[State](0)
		return
	}
	switch a := l.alg.(type) {
	case lockFreeBucket:
		l.kind, l.bucket = bucketWords, atomicbucket.Params(a)
	case lockFreeWindows:
		l.kind, l.window = windowWords, shardedlog.Params(a)
	}
	fc := registry.FlatConfig{MaxKeys: cfg.MaxKeys, Pointers: l.kind == objects}
	switch l.kind {
	case objects:
		fc.Hooks = registry.Hooks{Spent: l.objectSpent, Evict: l.evictObject}
	case bucketWords:
		fc.Origin = l.origin(l.now())
		fc.Hooks = registry.Hooks{Spent: l.wordSpent, Evict: l.evictWord, Rebase: l.bucket.RebaseWord}
	case windowWords:
		fc.Origin = l.origin(l.now())
		fc.Hooks = registry.Hooks{Spent: l.wordSpent, Evict: l.evictWord, Rebase: l.window.RebaseWord}
	}
	l.flat = registry.NewFlat(fc)
	if cfg.MaxKeys > 0 {
		l.sketch = newSketch(cfg.MaxKeys)
	}
}

// now reads the limiter's clock. It is small enough to inline into every
// request: a ticking CoarseClock is one load, and other clocks are one call.
func (l *Limiter) now() int64 {
	if c := l.coarse; c != nil {
		return c.now.Load()
	}
	return l.readClock()
}

func (l *Limiter) readClock() int64 {
	if l.clock == nil {
		return int64(time.Since(base))
	}
	return l.clock.Now()
}

// id is the key's identity: one call into the Hasher, unless a test hook
// names identities itself.
func (l *Limiter) id(key string) registry.ID {
	if l.ids == nil {
		return l.hasher.ID(key)
	}
	return l.ids(key)
}

// Allow reports whether one request for key may pass now, and if so
// consumes it. It is AllowN(key, 1).Allowed, without the cost of computing
// the rest of the Decision.
func (l *Limiter) Allow(key string) bool {
	if l.kind == objects {
		return l.allowObject(key, l.now())
	}
	var id registry.ID
	if l.ids == nil { // l.id, inlined by hand: the request's hottest call
		id = l.hasher.ID(key)
	} else {
		id = l.ids(key)
	}
	// The clock is read after the hash: the monotonic clock's ordered read
	// waits for every earlier load, so reading it first would hold the
	// key's bytes back until the previous request's CAS had completed
	// (results/: 4-15% at 1M keys).
	now := l.now()
	allowed, t, i := l.takeWord(id, now, 1)
	if allowed && l.refusedByGlobal(now) {
		l.refundWord(id, t, i, now, 1)
		allowed = false
	}
	l.decided(allowed)
	return allowed
}

// refusedByGlobal takes one unit from the global cap, if there is one, and
// reports whether the cap refused it: the caller then refunds the key's own
// grant. The check for a cap inlines into the request; the cap itself is a
// call.
func (l *Limiter) refusedByGlobal(now int64) bool {
	g := l.global.Load()
	return g != nil && l.refusedBy(g, now)
}

func (l *Limiter) refusedBy(g *atomicbucket.Bucket, now int64) bool {
	allowed, live := g.Take(now, 1)
	for !live {
		g = l.nextGlobal(g, now)
		allowed, live = g.Take(now, 1)
	}
	if !allowed && l.count != nil {
		l.count.deniedByGlobal.Inc()
	}
	return !allowed
}

// decided counts a decision, with Config.Stats.
func (l *Limiter) decided(allowed bool) {
	if l.count != nil {
		l.count.decided(allowed)
	}
}

func (l *Limiter) allowObject(key string, now int64) bool {
	id := l.objectID(key)
	s := l.state(key, id, now)
	allowed, live := s.Take(now, 1)
	for !live {
		s = l.successor(key, id, s, now)
		allowed, live = s.Take(now, 1)
	}
	if allowed && l.refusedByGlobal(now) {
		refund(s, now, 1)
		allowed = false
	}
	l.decided(allowed)
	return allowed
}

// objectID is the key's identity in the flat table; the reference
// registry hashes the key itself.
func (l *Limiter) objectID(key string) registry.ID {
	if l.ref != nil {
		return registry.ID{}
	}
	return l.id(key)
}

// AllowN asks for n units for key now: admitted if and only if the key's
// state (and the global cap, if any) holds n at this instant, and then n
// are taken. A denial takes nothing. n < 1 or above the capacity is a
// denial with RetryAfter == Never.
func (l *Limiter) AllowN(key string, n int64) Decision {
	return l.AllowAt(key, l.now(), n)
}

// AllowAt is AllowN at an explicit time now, on the Clock's scale, for
// callers that already hold the time. Readings may arrive out of order:
// an earlier now than the key has seen finds fewer tokens, never more.
//
// With a global cap, the cap is asked after the key's own state; when the
// cap refuses, the key's grant is refunded, so the key is not punished
// twice, and the cap's answer is returned (its Limit, RetryAfter and
// ResetAfter). When both allow, Remaining is the smaller of the two.
func (l *Limiter) AllowAt(key string, now int64, n int64) Decision {
	return l.allowAt(key, now, n, nil)
}

// grant is what one admitted request took from a Limiter, so that it can
// be given back whole (see Limits): the key's state, found again by its
// identity if it moved, and the global cap's state if the cap was asked.
type grant struct {
	s      State // for states held as objects
	id     registry.ID
	t      *registry.Table // for inline words: the slot the grant landed in
	i      int
	g      *atomicbucket.Bucket
	now, n int64
}

// allowAt is AllowAt; if out is not nil, an admitted request's grant is
// written there. Nothing is recorded otherwise, so that AllowN pays for
// no bookkeeping it does not use.
func (l *Limiter) allowAt(key string, now int64, n int64, out *grant) Decision {
	var d Decision
	var s State
	var id registry.ID
	var t *registry.Table
	i := -1
	if l.kind == objects {
		id = l.objectID(key)
		s = l.state(key, id, now)
		var live bool
		d, live = s.AllowN(now, n)
		for !live {
			s = l.successor(key, id, s, now)
			d, live = s.AllowN(now, n)
		}
	} else {
		id = l.id(key)
		d, t, i = l.allowWord(id, now, n)
	}
	var asked *atomicbucket.Bucket
	if g := l.global.Load(); g != nil && d.Allowed {
		gd, live := g.AllowN(now, n)
		for !live {
			g = l.nextGlobal(g, now)
			gd, live = g.AllowN(now, n)
		}
		if !gd.Allowed {
			l.refundKey(&grant{s: s, id: id, t: t, i: i, now: now, n: n})
			if l.count != nil {
				l.count.deniedByGlobal.Inc()
			}
			l.decided(false)
			return fromCore(gd)
		}
		asked = g
		d.Remaining = min(d.Remaining, gd.Remaining)
	}
	l.decided(d.Allowed)
	if out != nil && d.Allowed {
		*out = grant{s: s, id: id, t: t, i: i, g: asked, now: now, n: n}
	}
	return d
}

// refundKey gives the key's own state back what gr took from it.
func (l *Limiter) refundKey(gr *grant) {
	if gr.s != nil {
		refund(gr.s, gr.now, gr.n)
	} else {
		l.refundWord(gr.id, gr.t, gr.i, gr.now, gr.n)
	}
}

// giveBack returns all that an admitted request took, the global cap's
// share included: a later check refused the request. The decision then
// counts as a denial in Stats.
func (l *Limiter) giveBack(gr *grant) {
	l.refundKey(gr)
	if g := gr.g; g != nil {
		for !g.Refund(gr.n) {
			g = l.nextGlobal(g, gr.now)
		}
	}
	if l.count != nil {
		l.count.allowed.Add(-1)
		l.count.denied.Inc()
	}
}

// --- states inline in the flat table ---

// takeWord is Take on key id's word: it finds the slot, creating it on
// first use, and follows the table's marks. It returns the slot the grant
// landed in, for a refund.
func (l *Limiter) takeWord(id registry.ID, now, n int64) (bool, *registry.Table, int) {
	t := l.flat.Current(id)
	i := t.Lookup(id)
	for {
		if i < 0 {
			if t, i = l.create(id, now); i < 0 {
				return false, t, -1
			}
		}
		var allowed bool
		var st word.Status
		if l.kind == bucketWords {
			allowed, st = l.bucket.TakeWord(t.Word(i), t.Origin, now, n)
		} else {
			allowed, st = l.window.TakeWord(t.Word(i), t.Origin, now, n)
		}
		switch st {
		case word.Live:
			return allowed, t, i
		case word.Gone:
			i = -1 // moved or removed: find it again under the shard's lock
		case word.Rebase:
			t, i = l.rebase(id, t, now)
		}
	}
}

// allowWord is takeWord with the whole Decision.
func (l *Limiter) allowWord(id registry.ID, now, n int64) (Decision, *registry.Table, int) {
	t, i := l.flat.Lookup(id)
	for {
		if i < 0 {
			if t, i = l.create(id, now); i < 0 {
				return Decision{Limit: l.capacity, RetryAfter: Never}, t, -1
			}
		}
		var d Decision
		var st word.Status
		if l.kind == bucketWords {
			var cd atomicbucket.Decision
			cd, st = l.bucket.AllowWord(t.Word(i), t.Origin, now, n)
			d = fromCore(cd)
		} else {
			var cd shardedlog.Decision
			cd, st = l.window.AllowWord(t.Word(i), t.Origin, now, n)
			d = fromCore(cd)
		}
		switch st {
		case word.Live:
			return d, t, i
		case word.Gone:
			i = -1
		case word.Rebase:
			t, i = l.rebase(id, t, now)
		}
	}
}

// create finds or creates id's word under its shard's lock, moving the
// table's origin first if the reading lies past its range. The slot is -1
// when the reading is too early for the table: the request is denied with
// Never.
func (l *Limiter) create(id registry.ID, now int64) (*registry.Table, int) {
	for {
		t, i, st := l.insertWord(id, now)
		if st != word.Rebase {
			return t, i
		}
		if t, i = l.rebase(id, t, now); i >= 0 {
			return t, i
		}
	}
}

// rebase moves the origin of id's table to now's and finds id again.
func (l *Limiter) rebase(id registry.ID, t *registry.Table, now int64) (*registry.Table, int) {
	l.flat.Rebase(id, t, l.origin(now))
	return l.flat.Find(id)
}

// insertWord finds id under its shard's lock, creating its word if absent.
// The status says why nothing could be created: a reading too early for
// the table, or one past its range (move the origin first).
func (l *Limiter) insertWord(id registry.ID, now int64) (*registry.Table, int, word.Status) {
	var st word.Status
	t, i := l.flat.Insert(id, now, func(t *registry.Table) (uint64, unsafe.Pointer, bool) {
		var w uint64
		w, st = l.newWord(id, t.Origin, now)
		return w, nil, st == word.Live
	})
	return t, i, st
}

// newWord is the word of key id created at now relative to origin: full
// from now, from the latest eviction's instant, or from what the sketch
// remembers of the key, whichever is latest.
func (l *Limiter) newWord(id registry.ID, origin, now int64) (uint64, word.Status) {
	at := max(now, l.evictedAt.Load())
	spent := l.sketch.spent(id)
	if l.kind == bucketWords {
		return l.bucket.NewWord(origin, now, max(at, spent))
	}
	return l.window.NewWord(origin, now, at, spent)
}

// origin is the origin a table moved for a reading at now gets.
func (l *Limiter) origin(now int64) int64 {
	if l.kind == windowWords {
		return l.window.Origin(now)
	}
	return now
}

// refundWord gives back a grant that the global cap then refused, following
// the word to its new slot if it moved meanwhile. A refund to a key removed
// meanwhile is dropped: the key is charged for it, never the reverse.
func (l *Limiter) refundWord(id registry.ID, t *registry.Table, i int, now, n int64) {
	for i >= 0 {
		var st word.Status
		if l.kind == bucketWords {
			st = l.bucket.RefundWord(t.Word(i), n)
		} else {
			st = l.window.RefundWord(t.Word(i), t.Origin, now, n)
		}
		if st == word.Live || t.Word(i).Load() != word.Moved {
			return
		}
		t, i = l.flat.Find(id)
	}
}

// wordSpent is the flat table's Spent hook for inline words.
func (l *Limiter) wordSpent(t *registry.Table, i int, _ int64) int64 {
	v := t.Word(i).Load()
	switch {
	case word.IsMark(v):
		return math.MinInt64
	case l.kind == bucketWords:
		return l.bucket.SpentValue(v, t.Origin)
	}
	return l.window.SpentValue(v, t.Origin)
}

// evictWord is the flat table's Evict hook for inline words. What the key
// held is remembered even when it lies before now: a request whose reading
// is older than the eviction's must still find it.
func (l *Limiter) evictWord(t *registry.Table, i int, _ int64) {
	var at int64
	if l.kind == bucketWords {
		at = l.bucket.EvictWord(t.Word(i), t.Origin)
	} else {
		at = l.window.EvictWord(t.Word(i), t.Origin)
	}
	l.evictedAtBound.Inc()
	if at != math.MinInt64 {
		l.sketch.record(t.ID(i), at)
	}
}

// --- states out of line ---

// box holds a State in the flat table: a slot's pointer must name a type.
type box struct{ s State }

// state returns key's state, creating it on first use.
func (l *Limiter) state(key string, id registry.ID, now int64) State {
	if l.ref != nil {
		if s, ok := l.ref.Load(key); ok {
			return s
		}
		return l.ref.LoadOrCreate(key, func() State { return l.newState(now) })
	}
	for {
		t, i := l.flat.Find(id)
		if i < 0 {
			t, i = l.flat.Insert(id, now, func(*registry.Table) (uint64, unsafe.Pointer, bool) {
				return 0, unsafe.Pointer(&box{l.newObject(id, now)}), true
			})
		}
		if b := (*box)(t.Ptr(i)); b != nil {
			return b.s
		}
		// Removed between finding and reading: look again.
	}
}

// newObject makes the state of key id, not held now: as newState, or, if
// the sketch remembers the key as spent until later, as restrictive as that.
func (l *Limiter) newObject(id registry.ID, now int64) State {
	at := max(now, l.evictedAt.Load())
	if spent := l.sketch.spent(id); spent > at {
		return l.alg.(spentAlgorithm).newSpent(at, spent)
	}
	return l.alg.NewState(at)
}

// successor moves key on from a retired state to the one that replaces it.
// In the flat table a key that is no longer held is created anew (the
// sketch and the latest eviction's instant make it no looser than what
// was evicted); one still held by the retired state gets its successor.
func (l *Limiter) successor(key string, id registry.ID, s State, now int64) State {
	if l.ref != nil {
		return l.ref.Replace(key, s, s.Successor(now))
	}
	p := l.flat.Replace(id, func(cur unsafe.Pointer) unsafe.Pointer {
		if (*box)(cur).s == s {
			return unsafe.Pointer(&box{s.Successor(now)})
		}
		return cur
	})
	if p == nil {
		return l.state(key, id, now)
	}
	return (*box)(p).s
}

// newState makes the state of a key not held now: full at now, unless an
// eviction since then may have removed it, in which case full only from the
// eviction's instant on.
func (l *Limiter) newState(now int64) State {
	return l.alg.NewState(max(now, l.evictedAt.Load()))
}

// objectSpent is the flat table's Spent hook for states out of line: the
// instant a Peek says the state is full again.
func (l *Limiter) objectSpent(t *registry.Table, i int, now int64) int64 {
	b := (*box)(t.Ptr(i))
	if b == nil {
		return math.MinInt64
	}
	d, live := b.s.Peek(now)
	if !live || d.ResetAfter <= 0 {
		return math.MinInt64
	}
	return now + int64(min(d.ResetAfter, time.Duration(math.MaxInt64-max(now, 0))))
}

// evictObject is the flat table's Evict hook for states out of line.
func (l *Limiter) evictObject(t *registry.Table, i int, now int64) {
	l.evictedAtBound.Inc()
	if at := (*box)(t.Ptr(i)).s.(spentState).Evict(now); at != math.MinInt64 {
		l.sketch.record(t.ID(i), at)
	}
}

// spentAlgorithm is an Algorithm whose states can be evicted at MaxKeys:
// it makes a state that is new only from a given instant on.
type spentAlgorithm interface {
	newSpent(now, spent int64) State
}

// spentState is a State that can be evicted at MaxKeys: Evict retires it
// for good (its successor is new) and returns, in the same atomic step,
// the instant from which it would have answered as a new state, or
// math.MinInt64 if it already did at now.
type spentState interface {
	Evict(now int64) int64
}

// nextGlobal replaces a retired global bucket (it retires only to move its
// time origin) with its successor.
func (l *Limiter) nextGlobal(g *atomicbucket.Bucket, now int64) *atomicbucket.Bucket {
	l.global.CompareAndSwap(g, g.Successor(now))
	return l.global.Load()
}

// refund gives a key back a grant that the global cap then refused, along
// the line of successors if the state retired meanwhile.
func refund(s State, now, n int64) {
	for !s.Refund(now, n) {
		s = s.Successor(now)
	}
}

// Peek returns what the key's own state would answer to AllowN(key, 1) now,
// ignoring the global cap. It consumes nothing and creates no key.
func (l *Limiter) Peek(key string) Decision {
	now := l.now()
	if l.kind != objects {
		return l.peekWord(l.id(key), now)
	}
	var s State
	var ok bool
	if l.ref != nil {
		s, ok = l.ref.Load(key)
	} else {
		id := l.id(key)
		if t, i := l.flat.Find(id); i >= 0 {
			if b := (*box)(t.Ptr(i)); b != nil {
				s, ok = b.s, true
			}
		}
		if !ok {
			s, ok = l.newObject(id, now), true
		}
	}
	if !ok {
		s = l.newState(now)
	}
	d, live := s.Peek(now)
	for !live {
		s = s.Successor(now)
		d, live = s.Peek(now)
	}
	return d
}

func (l *Limiter) peekWord(id registry.ID, now int64) Decision {
	t, i := l.flat.Find(id)
	origin := t.Origin
	var v uint64
	held := false
	if i >= 0 {
		v = t.Word(i).Load()
		held = !word.IsMark(v)
	}
	if !held {
		// What the key would be made as now, relative to the table's
		// origin, or to one of its own if the reading lies past the range.
		var st word.Status
		v, st = l.newWord(id, origin, now)
		if st == word.Rebase {
			origin = l.origin(now)
			v, st = l.newWord(id, origin, now)
		}
		if st != word.Live {
			return Decision{Limit: l.capacity, RetryAfter: Never}
		}
	}
	if l.kind == bucketWords {
		return fromCore(l.bucket.PeekValue(v, origin, now))
	}
	return fromCore(l.window.PeekValue(v, origin, now))
}

// Reset makes key start fresh, as if never seen.
func (l *Limiter) Reset(key string) {
	switch {
	case l.ref != nil:
		l.ref.Remove(key, State.Retire)
	case l.kind == objects:
		l.flat.Remove(l.id(key), func(t *registry.Table, i int) { (*box)(t.Ptr(i)).s.Retire() })
	default:
		l.flat.Remove(l.id(key), func(t *registry.Table, i int) { t.Word(i).Store(word.Dead) })
	}
}

// EvictIdle removes every key whose state answers as a fresh one would now,
// and returns how many it removed. Evicting such a key changes no future
// decision; a request racing the eviction either lands before it (and the
// key is then not idle) or moves on to a fresh state.
func (l *Limiter) EvictIdle() int {
	return l.evictIdleAt(l.now())
}

func (l *Limiter) evictIdleAt(now int64) int {
	// Publish the instant before any key disappears, so that whoever finds
	// a key missing also finds the instant.
	for {
		old := l.evictedAt.Load()
		if old >= now || l.evictedAt.CompareAndSwap(old, now) {
			break
		}
	}
	var n int
	switch {
	case l.ref != nil:
		n = l.ref.DeleteIf(func(_ string, s State) bool { return s.RetireIdle(now) })
	case l.kind == objects:
		n = l.flat.DeleteIf(func(t *registry.Table, i int) bool { return (*box)(t.Ptr(i)).s.RetireIdle(now) })
	case l.kind == bucketWords:
		n = l.flat.DeleteIf(func(t *registry.Table, i int) bool { return l.bucket.RetireIdleWord(t.Word(i), t.Origin, now) })
	default:
		n = l.flat.DeleteIf(func(t *registry.Table, i int) bool { return l.window.RetireIdleWord(t.Word(i), t.Origin, now) })
	}
	l.evicted.Add(int64(n))
	return n
}

// Len returns the number of keys held now. With MaxKeys it never exceeds
// MaxKeys.
func (l *Limiter) Len() int {
	if l.ref != nil {
		return l.ref.Len()
	}
	return l.flat.Len()
}

// Stats returns the counts kept since New (see Stats). It can be called at
// any time, from any goroutine, without stopping requests.
func (l *Limiter) Stats() Stats {
	s := Stats{Keys: l.Len(), Evicted: l.evicted.Value(), EvictedAtBound: l.evictedAtBound.Value()}
	if c := l.count; c != nil {
		s.Allowed, s.Denied, s.DeniedByGlobal = c.allowed.Value(), c.denied.Value(), c.deniedByGlobal.Value()
	}
	return s
}

// Close stops the background sweeper, if any, and waits for it. The Limiter
// stays usable: after Close it decides exactly as before, and only the
// background sweep is gone (EvictIdle and MaxKeys still evict). Close is
// idempotent, safe to call from several goroutines, and returns nil.
func (l *Limiter) Close() error {
	l.stopOnce.Do(func() {
		if l.stop != nil {
			close(l.stop)
			<-l.swept
		}
	})
	return nil
}

// sweep evicts, on every tick, keys that have been idle for ttl: a state
// that answers as fresh at now − ttl has taken nothing since then. done, if
// not nil, receives each sweep's count (for tests).
func (l *Limiter) sweep(ttl time.Duration, tick <-chan time.Time, done chan<- int) {
	defer close(l.swept)
	for {
		select {
		case <-l.stop:
			return
		case <-tick:
			now := l.now()
			if now < math.MinInt64+int64(ttl) {
				continue // nothing can have been idle since before the clock's range
			}
			n := l.evictIdleAt(now - int64(ttl))
			if done != nil {
				done <- n
			}
		}
	}
}
