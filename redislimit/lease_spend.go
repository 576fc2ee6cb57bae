package redislimit

import (
	"context"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/flat"
	"github.com/puzpuzpuz/xsync/v4"
)

// mapKey is the lease map's key of a key of p whose identity is id: the
// identity's low half, mixed with the policy's seed. Two states whose
// map keys meet are told apart by their identity and policy (see state).
func (p *policy) mapKey(id flat.ID) uint64 { return id.Lo ^ p.seed }

// state returns key's lease state under p, or nil if it holds none.
func (p *policy) state(key string) *leaseState {
	id := p.s.hasher.ID(key)
	st, ok := p.s.lease.states.Load(p.mapKey(id))
	if !ok || st.p != p || st.id != id {
		return nil
	}
	return st
}

// newState finds or makes key's lease state under p, taking a place
// under the bound before it is made, so that racing goroutines cannot
// pass the bound between them. It returns nil past the bound, after
// Close, or when another key's state holds the place (two identities
// whose map keys meet: the later goes by round trips).
func (p *policy) newState(key string, id flat.ID) *leaseState {
	ls := p.s.lease
	if ls.closed.Load() || p.closed.Load() || ls.size.Add(1) > ls.bound {
		ls.size.Add(-1)
		return nil
	}
	st := &leaseState{p: p, id: id, rkey: p.redisKey(key)}
	cur, loaded := ls.states.LoadOrStore(p.mapKey(id), st)
	if loaded {
		ls.size.Add(-1)
		if cur.p != p || cur.id != id {
			return nil
		}
		return cur
	}
	p.states.Add(1)
	ls.track(st)
	return st
}

// usable returns how many of g's units may be spent at now, given u
// held, on a host whose wall clock now stands skew ahead of the
// monotonic one: none once g's time is up, or once the host has been
// suspended since g was taken (the wall clock gained on the monotonic
// one, which stopped while Redis's clock ran on).
func (ls *leases) usable(g *grant, u, now, skew int64) int64 {
	if now >= g.until || u <= 0 || skew-g.skew > int64(suspendSlack) {
		return 0
	}
	if g.step > 0 {
		if g.top <= now {
			return 0
		}
		if c := (g.top - now) / g.step; c < u {
			return c
		}
	}
	return u
}

// spend takes n units from g at now, if it holds them, and says how many
// are left.
func (ls *leases) spend(g *grant, n, now, skew int64) (int64, bool) {
	for {
		u := g.units.Load()
		c := ls.usable(g, u, now, skew)
		if c < n {
			return 0, false
		}
		if g.units.CompareAndSwap(u, c-n) {
			if c < u {
				g.decayed.Add(u - c) // rare: only as a batch outlives its debt
			}
			return c - n, true
		}
	}
}

// take serves a request of cost n at now from the key's lease, or from
// the batch renewed ahead, which then becomes the lease; and asks for the
// next batch ahead when the lease runs low. A batch leased under another
// rule than rs serves nothing.
func (p *policy) take(st *leaseState, n, now, skew int64, rs *rules) (*grant, int64, bool) {
	ls := p.s.lease
	g := st.g.Load()
	for range 2 {
		if g != nil && g.gen == rs.gen {
			if rest, ok := ls.spend(g, n, now, skew); ok {
				if (rest < g.low || now >= g.renewAt) && !g.asked.Load() && g.asked.CompareAndSwap(false, true) {
					ls.askRenewal(st, rs, now)
				}
				return g, rest, true
			}
		}
		nx := st.next.Load()
		if nx == nil || nx == g || !st.g.CompareAndSwap(g, nx) {
			return nil, 0, false
		}
		st.next.CompareAndSwap(nx, nil)
		if g != nil {
			ls.retire(st, g, now)
		}
		g = nx
	}
	return nil, 0, false
}

// putBack puts n units, spent from g for a request that was then
// refused, back where they are spent or returned: into g while it holds
// its units, else to Redis, as g's retirement returns its own.
func (ls *leases) putBack(st *leaseState, g *grant, n int64) {
	for {
		u := g.units.Load()
		if u < 0 {
			now, _ := ls.s.leaseNow()
			ls.retireUnits(st, g, n, now)
			return
		}
		if g.units.CompareAndSwap(u, u+n) {
			return
		}
	}
}

// fromLease is the decision for a request served from g at now, which
// left rest units in it: Remaining is what Redis had left at the grant and
// what g holds.
func fromLease(g *grant, rest, now int64) floodgate.Decision {
	return floodgate.Decision{Allowed: true, Limit: g.limit, Remaining: g.remaining + rest,
		ResetAfter: time.Duration(max(0, g.resetAt-now))}
}

// cachedDenial answers a request of cost n from the key's last denial
// while it holds, under the rule it was made under. Owed is what the key
// owed at the denial, on which a check refuses as Redis's answer would:
// while the denial holds, the key cannot pass a request of 1, so at most
// its last unit's time may pass in which it owes nothing more and is
// still refused (stricter, never looser).
func (st *leaseState) cachedDenial(n, now int64, rs *rules) (floodgate.Decision, bool) {
	until := st.deniedUntil.Load()
	if now >= until || n < st.deniedCost.Load() || st.deniedGen.Load() != rs.gen {
		return floodgate.Decision{}, false
	}
	return floodgate.Decision{Limit: rs.capacity, RetryAfter: time.Duration(max(1, st.deniedRetry.Load()-now)),
		ResetAfter: time.Duration(max(0, st.deniedReset.Load()-now)), Owed: st.deniedOwed.Load()}, true
}

// leaseAllow decides a request of cost n from key under rs in lease
// mode: from the key's lease when it holds n units, from a cached
// denial, or by a refill. It returns the decision's result too, for
// AppendCounts.
func (p *policy) leaseAllow(ctx context.Context, key string, n int64, rs *rules) (floodgate.Decision, result, error) {
	now, skew := p.s.leaseNow()
	id := p.s.hasher.ID(key)
	st, ok := p.s.lease.states.Load(p.mapKey(id))
	if ok && st.p == p && st.id == id {
		if g, rest, ok := p.take(st, n, now, skew, rs); ok {
			return fromLease(g, rest, now), resAllowed, nil // lastUsed is for keys with no lease: it is not written here
		}
		if d, ok := st.cachedDenial(n, now, rs); ok {
			return d, resDenied, nil
		}
	} else if st = p.newState(key, id); st == nil {
		r, err := p.decide(ctx, p.redisKey(key), key, call{n: n, rs: rs})
		return r.d, r.res, err
	}
	st.lastUsed.Store(now)
	return p.refill(ctx, key, st, n, false)
}

// forget drops key's lease state under p (Reset): its units are spent
// no more, and Redis's key is about to go.
func (ls *leases) forget(p *policy, key string) {
	st := p.state(key)
	if st == nil || !ls.drop(st) {
		return
	}
	for _, g := range []*grant{st.g.Swap(nil), st.next.Swap(nil)} {
		if g != nil {
			g.units.Store(retiredUnits)
		}
	}
	st.deniedUntil.Store(0)
}

// drop removes st from the map, if it is still there, and marks it dead:
// a caller that holds it looks its key up again.
func (ls *leases) drop(st *leaseState) bool {
	deleted := false
	ls.states.Compute(st.p.mapKey(st.id), func(cur *leaseState, loaded bool) (*leaseState, xsync.ComputeOp) {
		if loaded && cur == st {
			deleted = true
			return nil, xsync.DeleteOp
		}
		return cur, xsync.CancelOp
	})
	if deleted {
		st.dead.Store(true)
		ls.size.Add(-1)
		st.p.states.Add(-1)
	}
	return deleted
}

// stateOK is state's answer with a found flag, for the tests.
func (p *policy) stateOK(key string) (*leaseState, bool) {
	st := p.state(key)
	return st, st != nil
}
