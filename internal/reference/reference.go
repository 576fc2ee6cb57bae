// Package reference is the reference limiter that floodgate's tests hold
// the Limiter to, and that the benchmark harness times beside it: every
// key's state is an object of its own, kept in flat.Registry (sharded
// xsync maps) under the key itself, and found, created and replaced
// through the keystate.State protocol alone, with the global cap and idle
// eviction as the Limiter has them. The Limiter's flat table, its words inline and
// its keyed identities are nowhere here, so that the two can be compared.
// It has no MaxKeys, SetRule, Wait or Stats.
//
// Only tests and the benchmark harness import it.
package reference

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/bucket"
	"github.com/floodgate-go/floodgate/internal/flat"
	"github.com/floodgate-go/floodgate/internal/keystate"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// Limiter applies one rule to every key, as floodgate.Limiter does.
type Limiter struct {
	alg    keystate.Algorithm
	clock  floodgate.Clock
	keys   *flat.Registry[keystate.State]
	global atomic.Pointer[bucket.Bucket]

	// evictedAt is the latest instant at which an eviction found keys
	// idle: a key created again after it is full from then on, not
	// before, as in the Limiter.
	evictedAt atomic.Int64

	stopOnce    sync.Once
	stop, swept chan struct{}
}

// New returns the reference limiter of cfg: its Algorithm (a mutex
// twin's name included), Rule, Global, Clock and IdleTTL. It keeps every
// key: MaxKeys other than 0 or floodgate.Unbounded is an error, and
// IdleTTL 0, like floodgate.Never, is no sweep (the reference forgets
// nothing unless asked); Stats is ignored.
func New(cfg floodgate.Config) (*Limiter, error) {
	if cfg.MaxKeys != 0 && cfg.MaxKeys != floodgate.Unbounded {
		return nil, errors.New("reference: the reference limiter has no MaxKeys")
	}
	if cfg.IdleTTL < 0 {
		return nil, errors.New("reference: IdleTTL must be 0, positive or Never")
	}
	if cfg.IdleTTL == floodgate.Never {
		cfg.IdleTTL = 0
	}
	alg, err := testhook.Algorithm(testhook.Twins(cfg))
	if err != nil {
		return nil, err
	}
	l := &Limiter{alg: alg.(keystate.Algorithm), clock: cfg.Clock, keys: flat.New[keystate.State](0)}
	if l.clock == nil {
		l.clock = floodgate.SystemClock()
	}
	l.evictedAt.Store(math.MinInt64)
	if g := cfg.Global; g != nil {
		if err := g.Validate(); err != nil {
			return nil, err
		}
		p, err := bucket.NewParams(g.Limit, g.Period, g.Burst)
		if err != nil {
			return nil, err
		}
		l.global.Store(bucket.New(p, l.clock.Now()))
	}
	if cfg.IdleTTL > 0 {
		l.stop, l.swept = make(chan struct{}), make(chan struct{})
		go l.sweep(cfg.IdleTTL)
	}
	return l, nil
}

// state returns key's state, creating it on first use: full at now, or at
// the latest eviction if later.
func (l *Limiter) state(key string, now int64) keystate.State {
	if s, ok := l.keys.Load(key); ok {
		return s
	}
	return l.keys.LoadOrCreate(key, func() keystate.State { return l.newState(now) })
}

func (l *Limiter) newState(now int64) keystate.State {
	return l.alg.NewState(max(now, l.evictedAt.Load()))
}

// next replaces key's retired state s with its successor, or finds the
// state that replaced it already.
func (l *Limiter) next(key string, s keystate.State, now int64) keystate.State {
	return l.keys.Replace(key, s, s.Successor(now))
}

// Allow reports whether one request for key passes now, and takes it.
func (l *Limiter) Allow(key string) bool {
	now := l.clock.Now()
	s := l.state(key, now)
	allowed, live := s.Take(now, 1)
	for !live {
		s = l.next(key, s, now)
		allowed, live = s.Take(now, 1)
	}
	if allowed && l.global.Load() != nil {
		if gd := l.askGlobal(now, 1); !gd.Allowed {
			refund(s, now, 1)
			return false
		}
	}
	return allowed
}

// AllowN is AllowAt at the clock's now.
func (l *Limiter) AllowN(key string, n int64) floodgate.Decision {
	return l.AllowAt(key, l.clock.Now(), n)
}

// AllowAt asks for n units for key at now: the key's state, then the
// global cap, which on refusal gives the key its grant back.
func (l *Limiter) AllowAt(key string, now, n int64) floodgate.Decision {
	s := l.state(key, now)
	d, live := s.AllowN(now, n)
	for !live {
		s = l.next(key, s, now)
		d, live = s.AllowN(now, n)
	}
	if d.Allowed && l.global.Load() != nil {
		gd := l.askGlobal(now, n)
		if !gd.Allowed {
			refund(s, now, n)
			return floodgate.Decision{Limit: gd.Limit, Remaining: gd.Remaining, RetryAfter: gd.RetryAfter, ResetAfter: gd.ResetAfter}
		}
		d.Remaining = min(d.Remaining, gd.Remaining)
	}
	return floodgate.Decision(d)
}

// askGlobal takes n from the global cap, following its successors.
func (l *Limiter) askGlobal(now, n int64) bucket.Decision {
	g := l.global.Load()
	d, live := g.AllowN(now, n)
	for !live {
		l.global.CompareAndSwap(g, g.Successor(now))
		g = l.global.Load()
		d, live = g.AllowN(now, n)
	}
	return d
}

// refund gives s back n taken at now, along its successors.
func refund(s keystate.State, now, n int64) {
	for !s.Refund(now, n) {
		s = s.Successor(now)
	}
}

// Peek is what the key's state answers to one request now, taking
// nothing and creating no key.
func (l *Limiter) Peek(key string) floodgate.Decision {
	now := l.clock.Now()
	s, ok := l.keys.Load(key)
	if !ok {
		s = l.newState(now)
	}
	d, live := s.Peek(now)
	for !live {
		s = s.Successor(now)
		d, live = s.Peek(now)
	}
	return floodgate.Decision(d)
}

// Reset forgets key, retiring its state.
func (l *Limiter) Reset(key string) { l.keys.Remove(key, keystate.State.Retire) }

// EvictIdle removes every key whose state answers as a new one would now.
func (l *Limiter) EvictIdle() int { return l.evictIdleAt(l.clock.Now()) }

func (l *Limiter) evictIdleAt(now int64) int {
	for { // published before any key goes, as the Limiter does
		old := l.evictedAt.Load()
		if old >= now || l.evictedAt.CompareAndSwap(old, now) {
			break
		}
	}
	return l.keys.DeleteIf(func(_ string, s keystate.State) bool { return s.RetireIdle(now) })
}

// sweep evicts the keys idle for ttl, every ttl/2, until Close.
func (l *Limiter) sweep(ttl time.Duration) {
	defer close(l.swept)
	t := time.NewTicker(max(ttl/2, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			if now := l.clock.Now(); now >= math.MinInt64+int64(ttl) {
				l.evictIdleAt(now - int64(ttl))
			}
		}
	}
}

// Len is the number of keys held.
func (l *Limiter) Len() int { return l.keys.Len() }

// Close stops the sweeper, if any.
func (l *Limiter) Close() error {
	l.stopOnce.Do(func() {
		if l.stop != nil {
			close(l.stop)
			<-l.swept
		}
	})
	return nil
}
