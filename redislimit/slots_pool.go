package redislimit

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// slotPool is lease mode's slots of one client held ahead: on Redis, and
// renewed, but not in use.
type slotPool struct {
	mu      sync.Mutex
	free    []*redisSlot
	lastUse int64 // slotNow of the latest take or put
}

// pool returns rkey's pool, made on first use.
func (p *slotPolicy) pool(rkey string) *slotPool {
	if v, ok := p.pools.Load(rkey); ok {
		return v.(*slotPool)
	}
	v, _ := p.pools.LoadOrStore(rkey, new(slotPool))
	return v.(*slotPool)
}

// take returns a slot held ahead, or nil.
func (sp *slotPool) take(s *Store) *redisSlot {
	now := s.slotNow()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.lastUse = now
	if n := len(sp.free); n > 0 {
		h := sp.free[n-1]
		sp.free = sp.free[:n-1]
		return h
	}
	return nil
}

// put keeps h ahead, and reports whether it did: the pool holds at most
// Lease.Slots.
func (sp *slotPool) put(h *redisSlot, s *Store) bool {
	now := s.slotNow()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.lastUse = now
	if len(sp.free) >= h.p.ahead {
		return false
	}
	sp.free = append(sp.free, h)
	return true
}

// giveBack releases, on Redis, the slots held ahead of every client
// whose pool has not been used since before idleSince (slotNow), and
// forgets the empty pools.
func (p *slotPolicy) giveBack(idleSince int64) {
	p.pools.Range(func(k, v any) bool {
		sp := v.(*slotPool)
		sp.mu.Lock()
		if sp.lastUse >= idleSince && idleSince != math.MaxInt64 {
			sp.mu.Unlock()
			return true
		}
		free := sp.free
		sp.free = nil
		if len(free) == 0 {
			p.pools.Delete(k)
		}
		sp.mu.Unlock()
		if len(free) == 0 {
			return true
		}
		members := make([]any, len(free))
		for i, h := range free {
			h.released.Store(true)
			p.s.holding.remove(h)
			members[i] = h.member
		}
		p.remove(k.(string), members...)
		return true
	})
}

// leasedSlot is a slot of lease mode: its release keeps it ahead for the
// client's next request, or gives it back to Redis when the client has
// Lease.Slots ahead already.
type leasedSlot struct {
	h        *redisSlot
	pool     *slotPool
	released atomic.Bool
}

func (l *leasedSlot) Release() bool {
	if !l.released.CompareAndSwap(false, true) {
		return false
	}
	if !l.pool.put(l.h, l.h.p.s) {
		l.h.Release()
	}
	return true
}

// slotNow is lease mode's clock for slots ahead, in ns: the monotonic
// time since the Store began, or the test's stand-in for Redis's clock.
func (s *Store) slotNow() int64 {
	if s.redisClock != nil {
		return s.redisClock.Now()
	}
	return int64(time.Since(s.slotBase))
}
