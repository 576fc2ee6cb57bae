// Package floodgate limits the rate of requests per client: Allow(key) on
// every request, from any number of goroutines, in nanoseconds, without a
// global lock and without allocating for a key it has seen.
//
// A Limiter keeps one state per key in a sharded concurrent map. The default
// algorithm, "token_bucket", gives each key a bucket of Burst tokens (Limit
// when Burst is 0) that refills continuously at Limit per Period; a new key
// starts full. AllowN(key, n) is allowed if and only if the bucket holds at
// least n tokens at that instant, and then takes exactly n; a denial takes
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
//   - for a key already present, Allow and AllowN allocate nothing, and
//     requests for different keys share no lock and write no common cache
//     line.
package floodgate

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/atomicbucket"
	"github.com/floodgate-go/floodgate/registry"
	"golang.org/x/sys/cpu"
)

// Config configures a Limiter. Only Rule is required.
type Config struct {
	Algorithm string        // registered name; "" means "token_bucket"
	Rule      Rule          // the limit per key
	Global    *Rule         // optional cap over all keys together (a token bucket)
	Clock     Clock         // nil means SystemClock()
	IdleTTL   time.Duration // > 0: a background sweeper evicts keys idle this long; Close stops it
}

// Limiter applies one rule to every key. It is safe for concurrent use; the
// zero value is not usable: call New.
type Limiter struct {
	alg    Algorithm
	clock  Clock // nil for SystemClock, read without an interface call
	states *registry.Registry[State]
	global atomic.Pointer[atomicbucket.Bucket] // nil without Config.Global

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
// IdleTTL.
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
	l := &Limiter{alg: alg, states: registry.New[State](0)}
	l.evictedAt.Store(math.MinInt64)
	if _, system := cfg.Clock.(systemClock); cfg.Clock != nil && !system {
		l.clock = cfg.Clock
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

func (l *Limiter) now() int64 {
	if l.clock == nil {
		return int64(time.Since(base))
	}
	return l.clock.Now()
}

// Allow reports whether one request for key may pass now, and if so
// consumes it. It is AllowN(key, 1).Allowed, without the cost of computing
// the rest of the Decision.
func (l *Limiter) Allow(key string) bool {
	now := l.now()
	s := l.state(key, now)
	allowed, live := s.Take(now, 1)
	for !live {
		s = l.successor(key, s, now)
		allowed, live = s.Take(now, 1)
	}
	if g := l.global.Load(); g != nil && allowed {
		gAllowed, live := g.Take(now, 1)
		for !live {
			g = l.nextGlobal(g, now)
			gAllowed, live = g.Take(now, 1)
		}
		if !gAllowed {
			refund(s, now, 1)
		}
		return gAllowed
	}
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
	s := l.state(key, now)
	d, live := s.AllowN(now, n)
	for !live {
		s = l.successor(key, s, now)
		d, live = s.AllowN(now, n)
	}
	if g := l.global.Load(); g != nil && d.Allowed {
		gd, live := g.AllowN(now, n)
		for !live {
			g = l.nextGlobal(g, now)
			gd, live = g.AllowN(now, n)
		}
		if !gd.Allowed {
			refund(s, now, n)
			return fromCore(gd)
		}
		d.Remaining = min(d.Remaining, gd.Remaining)
	}
	return d
}

// state returns key's state, creating it on first use.
func (l *Limiter) state(key string, now int64) State {
	if s, ok := l.states.Load(key); ok {
		return s
	}
	return l.states.LoadOrCreate(key, func() State { return l.newState(now) })
}

// successor moves key on from a retired state to the one that replaces it.
func (l *Limiter) successor(key string, s State, now int64) State {
	return l.states.Replace(key, s, s.Successor(now))
}

// newState makes the state of a key not held now: full at now, unless an
// eviction since then may have removed it, in which case full only from the
// eviction's instant on.
func (l *Limiter) newState(now int64) State {
	return l.alg.NewState(max(now, l.evictedAt.Load()))
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
	s, ok := l.states.Load(key)
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

// Reset makes key start fresh, as if never seen.
func (l *Limiter) Reset(key string) {
	l.states.Remove(key, State.Retire)
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
	return l.states.DeleteIf(func(_ string, s State) bool { return s.RetireIdle(now) })
}

// Len returns the number of keys held now.
func (l *Limiter) Len() int { return l.states.Len() }

// Close stops the background sweeper, if any, and waits for it. The Limiter
// stays usable. Close is idempotent and returns nil.
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
