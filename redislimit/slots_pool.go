package redislimit

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
)

// Lease mode's slots ahead (Lease.Slots). A replica keeps a client's
// released slots, still held on Redis and renewed, in the client's pool,
// and hands one to the client's next request with no round trip. A slot
// is handed out only while Redis is known to hold it: until SlotTTL (less
// a µs, for Redis's whole µs) after the sending of the latest round trip
// that found it there, its acquisition or a renewal, timed on this
// machine's monotonic clock, which runs with Redis's; and not once the
// host has been suspended since (the wall clock, which counts a
// suspension, gained on the monotonic one, as lease mode's batches).
// Redis's expiry of the member is at least that late, since Redis ran
// the command after it was sent; the instant the answer came would not
// do, as a slow answer may come after Redis has let the member go. So a
// replica stopped past SlotTTL (SIGSTOP, a long pause) serves none of the
// slots that it held ahead, which another replica may have taken
// meanwhile, and a renewal that finds a member gone drops its slot (see
// holding.lose). A busy client's pool gives back each slot parked for a
// third of SlotTTL, as a quiet one's.

// slotPool is lease mode's slots of one client held ahead: on Redis, and
// renewed, but not in use.
type slotPool struct {
	mu      sync.Mutex
	free    []*redisSlot // in the order they were parked
	lastUse int64        // slotNow of the latest take or put
	dead    bool         // out of the policy's pools: it parks nothing more
}

// pool returns rkey's pool, made on first use; nil once the policy is
// closed.
func (p *slotPolicy) pool(rkey string) *slotPool {
	if v, ok := p.pools.Load(rkey); ok {
		return v.(*slotPool)
	}
	p.poolsMu.Lock()
	defer p.poolsMu.Unlock()
	if p.closed {
		return nil
	}
	v, _ := p.pools.LoadOrStore(rkey, new(slotPool))
	return v.(*slotPool)
}

// take returns a slot held ahead that Redis is known to hold, the latest
// parked first, or nil (sp nil included). One it may not serve stays for
// the renewer, which gives it back (see giveBack).
func (sp *slotPool) take(s *Store) *redisSlot {
	if sp == nil {
		return nil
	}
	now, skew := s.slotNow()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.lastUse = now
	for i := len(sp.free) - 1; i >= 0; i-- {
		if h := sp.free[i]; h.usable(now, skew) {
			sp.free = slices.Delete(sp.free, i, i+1)
			return h
		}
	}
	return nil
}

// put keeps h ahead, and reports whether it did: the pool holds at most
// Lease.Slots, only slots that Redis is known to hold, and nothing once
// it is out of the policy's pools.
func (sp *slotPool) put(h *redisSlot, s *Store) bool {
	now, skew := s.slotNow()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.lastUse = now
	// lost is read under mu, which holding.lose takes after setting it:
	// a slot that a renewal found gone is parked by no put after lose.
	if sp.dead || len(sp.free) >= h.p.ahead || !h.usable(now, skew) {
		return false
	}
	h.parkedAt = now
	sp.free = append(sp.free, h)
	return true
}

// park keeps the slots ahead that Redis granted with an acquisition sent
// at sent (slot ns, with the skew then), members of rkey, in pool; those
// it has no room for go back to Redis, in a round trip of their own.
func (p *slotPolicy) park(pool *slotPool, rkey string, members []any, sent, skew int64) {
	s := p.s
	var back []any
	for _, m := range members {
		h := &redisSlot{p: p, rkey: rkey, member: m.(string)}
		h.confirm(sent, skew)
		s.holding.add(h)
		if !pool.put(h, s) { // another request filled it meanwhile
			h.released.Store(true)
			s.holding.remove(h)
			back = append(back, m)
		}
	}
	if len(back) > 0 {
		go p.remove(rkey, back...)
	}
}

// giveBack takes out of the policy's pools every slot parked since before
// idleSince (slot ns), or that may not be served at now, and forgets
// the pools left empty and unused since before idleSince: with idleSince
// math.MaxInt64 (Close), every slot and every pool. It returns the
// commands that release them on Redis, one per client; the slots are no
// longer renewed.
func (p *slotPolicy) giveBack(idleSince, now, skew int64) [][]any {
	var back [][]any
	p.pools.Range(func(k, v any) bool {
		sp := v.(*slotPool)
		var out []*redisSlot
		sp.mu.Lock()
		sp.free = slices.DeleteFunc(sp.free, func(h *redisSlot) bool {
			if h.parkedAt < idleSince || !h.usable(now, skew) {
				out = append(out, h)
				return true
			}
			return false
		})
		if len(sp.free) == 0 && (sp.lastUse < idleSince || idleSince == math.MaxInt64) {
			sp.dead = true // a request that found it before it goes parks nothing in it
			p.pools.CompareAndDelete(k, sp)
		}
		sp.mu.Unlock()
		if len(out) == 0 {
			return true
		}
		members := make([]any, len(out))
		for i, h := range out {
			h.released.Store(true)
			p.s.holding.remove(h)
			members[i] = h.member
		}
		back = append(back, p.s.slotArgs(k.(string), slotRelease, members))
		return true
	})
	return back
}

// sendReleases sends the release commands back in one pipeline (one
// round trip per Redis node), within Timeout: a release that fails
// leaves its slots to expire within SlotTTL.
func (s *Store) sendReleases(back [][]any) {
	if len(back) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.set.timeout)
	defer cancel()
	for _, c := range s.pipelineEval(ctx, back, slotsScript.src) {
		if err := c.Err(); err != nil && s.set.onError != nil {
			s.set.onError(err)
			return
		}
	}
}

// confirm records that Redis held h when a round trip sent at sent (slot
// ns, when the wall clock stood skew ahead of the monotonic one) found it,
// and so holds it until SlotTTL after that at least. A later sending
// only moves until forward. (A reader that sees one of the two fields
// new and the other old sees an earlier until or an earlier skew: stricter.)
func (h *redisSlot) confirm(sent, skew int64) {
	until := sent + int64(h.p.s.set.slotTTL) - 1000
	h.skew.Store(skew)
	for u := h.until.Load(); until > u && !h.until.CompareAndSwap(u, until); u = h.until.Load() {
	}
}

// usable reports whether h may be served at now (slot ns, with the skew
// then): Redis is known to hold it, and the host has not been suspended
// since that was learnt.
func (h *redisSlot) usable(now, skew int64) bool {
	return now < h.until.Load() && skew-h.skew.Load() <= int64(suspendSlack) && !h.lost.Load()
}

// slotNow is the slots' clock, in ns ("slot ns"): the monotonic time since
// the Store began, and the wall clock less it, or the tests' stand-ins
// (see Store.clocks).
func (s *Store) slotNow() (now, skew int64) { return s.clocks(s.slotBase) }

// leasedSlot is a slot of lease mode: its release keeps it ahead for the
// client's next request, or gives it back to Redis when the client has
// Lease.Slots ahead already, or Redis is not known to hold it.
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
