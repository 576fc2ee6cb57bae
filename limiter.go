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
	"github.com/floodgate-go/floodgate/internal/tally"
	"github.com/floodgate-go/floodgate/registry"
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
	// other counts are kept always. Off by default: counting is an add to
	// a counter of the core's own (no two cores write one line), a few
	// nanoseconds on every request, which the hot path does not pay
	// unless asked (results/ has the figure).
	Stats bool

	// Set only through internal/hook, by tests and bench/.
	reference bool                         // keep keys in the reference registry
	ids       func(key string) registry.ID // identify keys by this instead of the keyed hash
	twins     bool                         // Algorithm may name a mutex twin
}

func init() {
	hook.Reference = func(c any) any {
		cfg := c.(Config)
		cfg.reference = true
		return cfg
	}
	hook.Twins = func(c any) any {
		cfg := c.(Config)
		cfg.twins = true
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
	windowWords             // inline: an atomicwindow word per slot
)

// A Limiter applies one Rule to every key: each key (a client's address,
// an API key, a user) has a state of its own, made on its first request,
// and the keys share nothing but the optional global cap. With the
// default algorithm, a key's state is a bucket of Burst tokens (Limit when
// Burst is 0), full at first, that refills at Limit per Period.
//
// A Limiter has three main methods, and a caller most likely wants the
// first:
//   - Allow, on every request: it reports whether one request passes now,
//     and if so takes it. It allocates nothing for a key already held.
//   - AllowN, for a request that costs n units or whose answer goes into
//     response headers: its Decision has Remaining, RetryAfter and
//     ResetAfter.
//   - Wait, to block until the request may pass rather than refuse it
//     (the token and leaky buckets only).
//
// Peek answers without taking anything; Reset forgets a key; SetRule
// changes the rule of every key without giving any key allowance. Keys are
// held until EvictIdle, IdleTTL or MaxKeys removes them: set one of the
// latter two for keys a client can choose (see Config).
//
// A Limiter is safe for concurrent use by any number of goroutines. The
// zero value is not usable: call New.
type Limiter struct {
	kind     kind
	form     form          // what the slots point at, with objects
	clock    Clock         // nil for SystemClock, read without an interface call
	coarse   *CoarseClock  // set when clock is a ticking CoarseClock: read without an interface call
	flat     registry.Flat // held by value: one load fewer per request
	hasher   *registry.Hasher
	ids      func(string) registry.ID            // nil: hasher.ID
	ref      *registry.Registry[State]           // the reference registry, when chosen
	name     string                              // the algorithm's registered name
	twins    bool                                // name may be a mutex twin's, for SetRule's lookup
	reserves bool                                // the algorithm's states can reserve (WaitN)
	sketch   lazySketch                          // with MaxKeys
	count    *tally.Counts                       // with Config.Stats: Allowed, Denied, DeniedByGlobal
	global   atomic.Pointer[atomicbucket.Bucket] // nil without Config.Global

	evicted, evictedAtBound, evictedFresh *xsync.Counter

	// rules is the rule in force: the one a key created now gets, and
	// the one Peek, WaitN and a denial with Never answer with. Every
	// table of the registry carries the rule its states were made under
	// (registry.Table's Aux), and a request reads the rule from the table
	// its state is in, so a state is never read with another rule's
	// parameters (see SetRule). setMu orders the changes.
	rules atomic.Pointer[ruleSet]
	setMu sync.Mutex

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
	factory, err := lookup(name, cfg.twins)
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
	l := &Limiter{name: name, twins: cfg.twins, hasher: registry.NewHasher(), ids: cfg.ids,
		evicted: xsync.NewCounter(), evictedAtBound: xsync.NewCounter(), evictedFresh: xsync.NewCounter()}
	l.rules.Store(newRuleSet(cfg.Rule, alg))
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
		l.count = newCounts()
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
	rs := l.rules.Load()
	switch rs.alg.(type) {
	case lockFreeBucket:
		l.kind = bucketWords
	case lockFreeWindows:
		l.kind = windowWords
	}
	l.form = formOf(rs.alg)
	fc := registry.FlatConfig{MaxKeys: cfg.MaxKeys, Pointers: l.kind == objects, Aux: unsafe.Pointer(rs)}
	switch l.kind {
	case objects:
		fc.Hooks = registry.Hooks{Spent: l.objectSpent, Evict: l.evictObject}
	default:
		fc.Origin = l.origin(rs, l.now())
		fc.Hooks = registry.Hooks{Spent: l.wordSpent, Evict: l.evictWord, Rebase: l.rebaseWord}
	}
	l.flat = registry.NewFlat(fc)
	if cfg.MaxKeys > 0 {
		l.sketch.maxKeys = cfg.MaxKeys
	}
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
//
// Its path is written down where each engine begins: words.go for the
// token and leaky bucket, the fixed window and the sliding counter, whose
// state is a word in the table (onWord), and objects.go for the rest
// (takeObject).
func (l *Limiter) Allow(key string) bool {
	var allowed bool
	if l.kind == objects {
		now := l.now()
		var s State
		allowed, s = l.takeObject(key, now)
		if allowed && l.refusedByGlobal(now) { // counted there
			l.returnObject(s, now, 1)
			return false
		}
	} else {
		var id registry.ID
		if l.ids == nil { // l.id, inlined by hand: the request's hottest call
			id = l.hasher.ID(key)
		} else {
			id = l.ids(key)
		}
		// The clock is read after the hash: the monotonic clock's ordered
		// read waits for every earlier load, so reading it first would
		// hold the key's bytes back until the previous request's CAS had
		// completed (results/: 4-15% at 1M keys).
		now := l.now()
		var t *registry.Table
		var i int
		allowed, t, i = l.onWord(id, now, opTake, 1, nil)
		if allowed && l.refusedByGlobal(now) { // counted there
			l.returnWord(id, t, i, now, 1, false, 0)
			return false
		}
	}
	l.decided(allowed)
	return allowed
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

// allowAt is AllowAt; if out is not nil, an admitted request's grant is
// written there, so that Limits can give it back. Nothing is recorded
// otherwise, so that AllowN pays for no bookkeeping it does not use.
func (l *Limiter) allowAt(key string, now int64, n int64, out *grant) Decision {
	var a answer // read field by field below: see answer
	var s State
	var id registry.ID
	var t *registry.Table
	i := -1
	if l.kind == objects {
		_, s, id = l.onObject(key, now, opAllow, n, &a)
	} else {
		id = l.id(key)
		_, t, i = l.onWord(id, now, opAllow, n, &a)
	}
	var asked *atomicbucket.Bucket
	if g := l.global.Load(); g != nil && a.d.Allowed {
		gd, g := l.allowGlobal(g, now, n)
		if !gd.Allowed {
			l.refundKey(&grant{s: s, id: id, t: t, i: i, now: now, n: n})
			return fromCore(gd) // counted by allowGlobal

		}
		asked = g
		a.d.Remaining = min(a.d.Remaining, gd.Remaining)
	}
	l.decided(a.d.Allowed)
	if out != nil && a.d.Allowed {
		*out = grant{s: s, id: id, t: t, i: i, g: asked, now: now, n: n}
	}
	return Decision{Allowed: a.d.Allowed, Limit: a.d.Limit, Remaining: a.d.Remaining, RetryAfter: a.d.RetryAfter, ResetAfter: a.d.ResetAfter}
}

// Peek returns what the key's own state would answer to AllowN(key, 1) now,
// ignoring the global cap. It consumes nothing and creates no key.
func (l *Limiter) Peek(key string) Decision {
	now := l.now()
	if l.kind == objects {
		return l.peekObject(key, now)
	}
	return l.peekWord(l.id(key), now)
}

// Reset makes key start fresh, as if never seen.
func (l *Limiter) Reset(key string) {
	if l.kind == objects {
		l.resetObject(key)
		return
	}
	l.resetWord(l.id(key))
}

// EvictIdle removes every key whose state answers as a fresh one would now,
// and returns how many it removed. Evicting such a key changes no future
// decision; a request racing the eviction either lands before it (and the
// key is then not idle) or moves on to a fresh state.
func (l *Limiter) EvictIdle() int {
	return l.evictIdleAt(l.now())
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
	s := Stats{Keys: l.Len(), MaxKeys: l.sketch.maxKeys,
		Evicted: l.evicted.Value(), EvictedAtBound: l.evictedAtBound.Value(), EvictedFresh: l.evictedFresh.Value()}
	if c := l.count; c != nil {
		s.DeniedByGlobal = c.Value(countDeniedByGlobal)
		s.Allowed, s.Denied = c.Value(countAllowed), c.Value(countDenied)+s.DeniedByGlobal
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
