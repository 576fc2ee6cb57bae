package floodgate

import (
	"cmp"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/floodgate-go/floodgate/internal/bucket"
	"github.com/floodgate-go/floodgate/internal/flat"
	"github.com/floodgate-go/floodgate/internal/keystate"
	"github.com/floodgate-go/floodgate/internal/tally"
	"github.com/puzpuzpuz/xsync/v4"
	"golang.org/x/sys/cpu"
)

// Config configures a Limiter. Only Rule is required.
type Config struct {
	Algorithm string // one of the five algorithms' names; "" means TokenBucket
	Rule      Rule   // the limit per key
	Global    *Rule  // optional cap over all keys together (a token bucket)
	Clock     Clock  // nil means SystemClock()

	// IdleTTL is how long a key's state must have answered as a new
	// key's would before a background sweep forgets it (twice an
	// IdleTTL; Close stops it). 0, the default, is one minute; Never
	// is no sweep; negative is an error. Any value keeps every
	// decision exact: a state forgotten was a new one. The default is
	// on because ids a client rotates leave states behind that nothing
	// else removes. The sweep holds the Limiter weakly: one that is
	// dropped without Close is collected, and its sweep ends.
	IdleTTL time.Duration

	// MaxKeys bounds the keys held: Len never exceeds it, at any
	// instant. A new key at the bound takes the place of a key held,
	// chosen by sampling (the one that would be fresh soonest, an idle
	// one first), and what the evicted key held is remembered in a
	// fixed-size sketch (8 bytes per key of MaxKeys, made at the first
	// eviction, and 8 more once a key that owes has been evicted), so
	// that it comes back with no more than it left with, owing what it
	// owed.
	//
	// 0, the default, is a bound that keeps the Limiter within 64 MiB:
	// 1,048,576 keys of a bucket or a window; fewer of a sliding log,
	// which keeps an entry per request in its window, and never fewer
	// than 1,024. The default bounds memory because a flood of new ids
	// (a client that rotates its id) would otherwise grow it by a key
	// per id until IdleTTL passes. Unbounded holds every key; negative
	// is an error.
	MaxKeys int

	// Stats counts Allowed, Denied and DeniedByGlobal (see Stats). The
	// other counts are kept always. Off by default: counting is an add to
	// a counter of the core's own (no two cores write one line), a few
	// nanoseconds on every request, which the hot path does not pay
	// unless asked.
	Stats bool

	twins bool // Algorithm may name a mutex twin: set only through testhook.Twins
}

// kind says where a Limiter's states live.
type kind uint8

const (
	objects     kind = iota // out of line: a keystate.State per key
	bucketWords             // inline: a bucket word per slot (internal/bucket)
	windowWords             // inline: a window word per slot (internal/window)
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
	traits               // the algorithm's: where states live, their form, whether they reserve
	clock   Clock        // nil for SystemClock, read without an interface call
	coarse  *CoarseClock // set when clock is a ticking CoarseClock: read without an interface call
	flat    flat.Flat    // held by value: one load fewer per request
	hasher  *flat.Hasher
	name    string                        // the algorithm's name
	factory factory                       // its factory, for SetRule
	sketch  lazySketch                    // with MaxKeys
	count   *tally.Counts                 // with Config.Stats: Allowed, Denied, DeniedByGlobal
	global  atomic.Pointer[bucket.Bucket] // nil without Config.Global

	evicted, evictedAtBound, evictedFresh *xsync.Counter

	// rules is the rule in force: the one a key created now gets, and
	// the one Peek, WaitN and a denial with Never answer with. Every
	// table of the registry carries the rule its states were made under
	// (flat.Table's Aux), and a request reads the rule from the table
	// its state is in, so a state is never read with another rule's
	// parameters (see SetRule). setMu orders the changes.
	rules atomic.Pointer[ruleSet]
	setMu sync.Mutex

	// serials makes the table keep its keys' serials, once, before the
	// first grant that is held across a request (see holdable).
	serials sync.Once

	stopOnce sync.Once
	stop     chan struct{}
	swept    <-chan struct{} // closed when the sweeper has exited

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
// IdleTTL or MaxKeys.
func New(cfg Config) (*Limiter, error) {
	name := cmp.Or(cfg.Algorithm, TokenBucket)
	factory, err := lookup(name, cfg.twins)
	if err != nil {
		return nil, err
	}
	alg, err := build(name, factory, cfg.Rule)
	if err != nil {
		return nil, err
	}
	if cfg.IdleTTL < 0 {
		return nil, fmt.Errorf("floodgate: IdleTTL must be 0 (a minute), positive or Never, got %v", cfg.IdleTTL)
	}
	if cfg.MaxKeys < 0 {
		return nil, fmt.Errorf("floodgate: MaxKeys must be 0 (the default bound), positive or Unbounded, got %d", cfg.MaxKeys)
	}
	maxKeys := cfg.MaxKeys
	_, bounded := alg.(builtin)
	switch {
	case maxKeys == Unbounded || maxKeys == 0 && !bounded:
		maxKeys = 0 // the table's none
	case !bounded:
		return nil, errUnboundable(name)
	case maxKeys == 0:
		maxKeys = defaultMaxKeys(name, traitsOf(alg).kind, cfg.Rule)
	}
	l := &Limiter{traits: traitsOf(alg), name: name, factory: factory, hasher: flat.NewHasher(),
		evicted: xsync.NewCounter(), evictedAtBound: xsync.NewCounter(), evictedFresh: xsync.NewCounter()}
	l.rules.Store(newRuleSet(cfg.Rule, alg))
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
		p, err := bucket.NewParams(g.Limit, g.Period, g.Burst)
		if err != nil {
			return nil, fmt.Errorf("floodgate: Global rule %+v: %w", *g, err)
		}
		l.global.Store(bucket.New(p, l.now()))
	}
	l.newTable(maxKeys)
	if ttl := cmp.Or(cfg.IdleTTL, defaultIdleTTL); ttl != Never {
		l.startSweep(ttl, nil, nil)
	}
	return l, nil
}

// errUnboundable is the error of a bound on the keys of the registered
// algorithm name.
func errUnboundable(name string) error {
	return fmt.Errorf("floodgate: algorithm %q is registered, and MaxKeys cannot bound it: it cannot remember what an evicted key held; set MaxKeys to 0 or Unbounded and bound the keys with IdleTTL", name)
}

// newTable makes the flat table, with the state inline for the word
// algorithms, bounded by maxKeys if it is above 0.
func (l *Limiter) newTable(maxKeys int) {
	rs := l.rules.Load()
	fc := flat.FlatConfig{MaxKeys: maxKeys, Pointers: l.kind == objects, Aux: unsafe.Pointer(rs)}
	switch l.kind {
	case objects:
		fc.Hooks = flat.Hooks{Spent: l.objectSpent, Evict: l.evictObject}
	default:
		fc.Origin = l.origin(rs, l.now())
		fc.Hooks = flat.Hooks{Spent: l.wordSpent, Evict: l.evictWord, Rebase: l.rebaseWord}
	}
	l.flat = flat.NewFlat(fc)
	l.sketch.maxKeys = maxKeys
}

// Allow reports whether one request for key may pass now, and if so
// consumes it. It is AllowN(key, 1).Allowed, without the cost of computing
// the rest of the Decision.
func (l *Limiter) Allow(key string) bool {
	id := l.hasher.ID(key)
	// The clock is read after the hash: the monotonic clock's ordered read
	// waits for every earlier load, so reading it first would hold the
	// key's bytes back until the previous request's CAS had completed (4
	// to 15% at a million keys).
	now := l.now()
	var allowed bool
	if l.kind == objects {
		var s keystate.State
		allowed, s = l.takeObject(id, now)
		if allowed && l.refusedByGlobal(now) { // counted there
			l.returnObject(s, now, 1)
			return false
		}
	} else {
		var t *flat.Table
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
	var d Decision
	l.allowAt(key, now, n, nil, &d)
	return d
}

// allowAt is AllowAt, its answer written to *d field by field: a
// Decision's five fields keep it out of registers, so that every whole
// copy of one just written goes through memory and waits for the
// narrower writes before it (measured: about 5 ns a copy in a
// middleware's chain of four). If out is not nil, an admitted request's
// grant is written there, so that Limits can give it back. Nothing is
// recorded otherwise, so that AllowN pays for no bookkeeping it does not
// use.
func (l *Limiter) allowAt(key string, now int64, n int64, out *grant, d *Decision) {
	var a answer // read field by field below: see answer
	var s keystate.State
	var t *flat.Table
	i := -1
	id := l.hasher.ID(key)
	if l.kind == objects {
		op := opAllow
		if out != nil && l.form != boxed {
			op = opGrant // a log: name the entry, so that a refund of part of it is exact
		}
		_, s = l.onObject(id, now, op, n, &a)
	} else {
		_, t, i = l.onWord(id, now, opAllow, n, &a)
	}
	var asked *bucket.Bucket
	if g := l.global.Load(); g != nil && a.d.Allowed {
		gd, g := l.allowGlobal(g, now, n)
		if !gd.Allowed {
			l.refundKey(&grant{s: s, id: id, t: t, i: i, now: now, n: n})
			*d = fromCore(gd) // counted by allowGlobal
			return
		}
		asked = g
		a.d.Remaining = min(a.d.Remaining, gd.Remaining)
	}
	l.decided(a.d.Allowed)
	if out != nil && a.d.Allowed {
		*out = grant{s: s, id: id, t: t, i: i, g: asked, now: now, n: n, lg: a.lg}
	}
	d.Allowed, d.Limit, d.Remaining = a.d.Allowed, a.d.Limit, a.d.Remaining
	d.RetryAfter, d.ResetAfter, d.Owed = a.d.RetryAfter, a.d.ResetAfter, a.d.Owed
}

// Peek returns what the key's own state would answer to AllowN(key, 1) now,
// ignoring the global cap. It consumes nothing and creates no key.
func (l *Limiter) Peek(key string) Decision {
	return l.peekID(l.hasher.ID(key), l.now())
}

// peekID is Peek for key id at now.
func (l *Limiter) peekID(id flat.ID, now int64) Decision {
	if l.kind == objects {
		return l.peekObject(id, now)
	}
	return l.peekWord(id, now)
}

// Reset makes key start fresh, as if never seen.
func (l *Limiter) Reset(key string) {
	if l.kind == objects {
		l.resetObject(l.hasher.ID(key))
		return
	}
	l.resetWord(l.hasher.ID(key))
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
func (l *Limiter) Len() int { return l.flat.Len() }

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
