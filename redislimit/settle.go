package redislimit

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/outage"
	"github.com/floodgate-go/floodgate/storekit"
)

// reserving is what Reserve adds to a decision (see decideAsks): check
// marks the asks that are checks (N 0: a dry run of a request of 1,
// which charges nothing), and parts receives what each charged ask took
// on Redis, by ask.
type reserving struct {
	check [maxPolicies]bool
	parts [maxPolicies]floodgate.HoldPart
}

// Reserve decides asks as Decide does, all or nothing, and records in h
// what each ask took and where, for Settle, as floodgate.Settler's
// Reserve says: an ask whose N is 0 is a check, which refuses as a
// request of 1 would and charges nothing. At most one round trip: its
// policy's script for one ask, the multi-policy script for several
// (their keys in one slot on Cluster, as Decide's).
//
// In lease mode a reservation whose every key's lease can answer is
// served from the leases, with no round trip, as Decide is: h records
// the lease each ask's units came from, and Settle gives units back to
// that lease while the key still holds it (to Redis, where the lease was
// charged, once it has gone). Any other reservation takes the round
// trip above, which leases nothing, and the policies whose lease could
// not answer take one ahead, by the bookkeeper, so that the key's next
// reservation finds it. When Redis cannot answer, the FailureMode
// answers as it does for Decide; what it admits took nothing on Redis
// (FailLocal's limiter keeps its estimate), and Settle then charges the
// whole cost to Redis.
func (s *Store) Reserve(ctx context.Context, asks []floodgate.Ask, each []floodgate.Decision, h *floodgate.Hold) (floodgate.Decision, int, error) {
	*h = floodgate.Hold{}
	var rv reserving
	d, refused, err := s.decideAsks(ctx, asks, each, &rv)
	if err != nil {
		return d, refused, err
	}
	h.N = len(asks)
	if refused < 0 || asks[refused].Shadow {
		h.Admitted, h.Parts = true, rv.parts
	}
	return d, refused, nil
}

// reserveLive decides Reserve's live asks (see decidePlan): from their
// keys' leases in lease mode when every one can answer (see fromLeases),
// else in one round trip, which leases nothing (the policies whose lease
// could not answer take one ahead, by the bookkeeper, as Decide's do).
// parts[i] is what ask i took.
func (s *Store) reserveLive(ctx context.Context, ps []*policy, keys []string, ns []int64, shadow, checks []bool,
	all []floodgate.Decision, parts []floodgate.HoldPart) (int, result, error) {
	if s.lease != nil {
		var got [maxPolicies]*grant
		refused, ok, need := s.fromLeases(ps, keys, ns, shadow, checks, all, got[:len(ps)])
		if ok {
			for i, g := range got[:len(ps)] {
				if g != nil {
					parts[i] = floodgate.HoldPart{N: ns[i], At: g.k, Gen: g.gen, Ref: g.id}
				}
			}
			looks(ps, ns, shadow, refused, all)
			return refused, decided(refused < 0 || shadow[refused]), nil
		}
		// The keys' next reservations find a lease.
		defer s.askLeases(ps, keys, need)
	}
	if len(ps) == 1 {
		d, res, part, err := s.reserveOne(ctx, ps[0], keys[0], ns[0], checks[0])
		all[0], parts[0] = d, part
		if !d.Allowed {
			return 0, res, err
		}
		return -1, res, err
	}
	return s.reserveMany(ctx, ps, keys, ns, shadow, checks, all, parts)
}

// reserveOne is Reserve's round trip for one ask: its policy's script,
// with no lease, or its dry run for a check; part is what it took.
func (s *Store) reserveOne(ctx context.Context, p *policy, key string, n int64, check bool) (floodgate.Decision, result, floodgate.HoldPart, error) {
	r, err := p.decide(ctx, p.redisKey(key), key, call{n: n, dry: check})
	var part floodgate.HoldPart
	switch {
	case err != nil || !r.d.Allowed:
	case check:
		r.d.Remaining++ // what the key holds: the dry run's is after a request of 1
	case r.redis:
		part = partOf(p, n, &r)
	}
	return r.d, r.res, part, err
}

// reserveMany is Reserve's round trip for several asks: the multi-policy
// script, with checks, and no lease; parts[i] is what ask i took.
func (s *Store) reserveMany(ctx context.Context, ps []*policy, keys []string, ns []int64, shadow, checks []bool,
	all []floodgate.Decision, parts []floodgate.HoldPart) (int, result, error) {
	var refused int
	var replies [maxPolicies]reply
	o, err := s.guarded(ctx, s.set.timeout, func() (err error) {
		refused, err = s.runMany(ctx, ps, keys, ns, shadow, checks, nil, all, replies[:len(ps)], false)
		return err
	})
	switch o {
	case tripAnswered:
		for i, p := range ps {
			if !checks[i] && (refused < 0 || shadow[refused] && !shadow[i]) {
				parts[i] = partOf(p, ns[i], &replies[i])
			}
		}
		looks(ps, ns, shadow, refused, all)
		for i := range ps {
			if checks[i] && all[i].Allowed {
				all[i].Remaining++ // what the key holds, as a check answers
			}
		}
		return refused, decided(refused < 0 || shadow[refused]), nil
	case tripAbandoned:
		return 0, resAbandoned, s.abandonMany(ps, all, err)
	}
	return s.fallbackMany(ctx, ps, keys, ns, shadow, all, err)
}

// partOf is the HoldPart of n units that p's script charged, by its
// reply r.
func partOf(p *policy, n int64, r *reply) floodgate.HoldPart {
	return floodgate.HoldPart{N: n, At: chargedAt(p.kind, r.k, r.horizon), Gen: r.rs.gen}
}

// Settle charges each ask's actual cost in place of what Reserve took
// for it (h), as floodgate.Settler's Settle says: it gives back what
// Reserve took over the cost, to where it was taken (to the lease it
// came from, while the key holds it, else on Redis as a refund: exact on
// the buckets and windows; on a sliding log, unless a later request of
// the key was charged at the same instant, when it lapses, which
// under-admits), and charges the overrun as Charge does, so that the key
// may owe, all or nothing past a key's bound. Asks of one policy and key
// are settled together.
//
// Round trips: one for the overruns (Charge's, none when the keys'
// leases cover them), then one pipeline for the give-backs to Redis and
// for the answers of the asks whose cost did not run over (a Peek, none
// for a key whose lease answers); so at most two. Units taken under a
// rule changed since Reserve are not given back to Redis (the key was
// converted), and units that could not reach Redis are lost: both
// under-admit. A caller that gives up before the overruns are charged
// gets ctx's error, and the Hold stays unsettled; the give-backs are
// sent whatever ctx says.
//
// A Settle waits on a Redis that does not answer once: when the
// overruns' round trip fails, or the breaker is open, the second is not
// waited for. The give-backs are then sent in the background, within
// Timeout, and the asks' answers are the FailureMode's (FailError's,
// FailClosed's); with FailError, a failed charge of the overruns is an
// error, and the Hold stays unsettled.
func (s *Store) Settle(ctx context.Context, asks []floodgate.Ask, each []floodgate.Decision, h *floodgate.Hold) (floodgate.Decision, error) {
	if err := storekit.CheckSettle(asks, h); err != nil {
		return floodgate.Decision{}, err
	}
	var ps [maxPolicies]*policy
	var of [maxPolicies]int
	var cost, took [maxPolicies]int64
	var part [maxPolicies]floodgate.HoldPart
	if err := s.merge("Settle", asks, &ps, &of, &cost); err != nil {
		return floodgate.Decision{}, err
	}
	for i := range asks {
		f := of[i]
		if hp := h.Parts[i]; hp.N > 0 {
			took[f] += hp.N
			part[f] = hp
		}
	}
	var buf [maxPolicies]floodgate.Decision
	all := buf[:len(asks)]
	var over [maxPolicies]floodgate.Ask
	var overAt [maxPolicies]int
	m := 0
	for i := range asks {
		if of[i] == i && cost[i] > took[i] {
			over[m], overAt[m] = floodgate.Ask{Policy: ps[i], Key: asks[i].Key, N: cost[i] - took[i]}, i
			m++
		}
	}
	if m > 0 {
		ctx = outage.With(ctx) // the second round trip learns whether the first found Redis failing
		var charged [maxPolicies]floodgate.Decision
		if _, err := s.Charge(ctx, over[:m], charged[:m]); err != nil {
			return floodgate.Decision{}, fmt.Errorf("redislimit: Settle: %w", err)
		}
		for k := range m {
			all[overAt[k]] = charged[k]
		}
	}
	h.Settled = true
	var rest [maxPolicies]pipeCall
	var restAt [maxPolicies]int
	n := 0
	for i := range asks {
		if of[i] != i || cost[i] > took[i] {
			continue
		}
		p := ps[i]
		rkey := p.redisKey(asks[i].Key)
		if back := took[i] - cost[i]; back > 0 && !p.backToLease(asks[i].Key, part[i], back) {
			if rs := p.rs(); part[i].Gen == rs.gen {
				rest[n], restAt[n] = pipeCall{p: p, rkey: rkey, c: call{give: back, gk: part[i].At, rs: rs}}, -1
				n++
			}
		}
		if d, ok := p.leaseHolds(asks[i].Key); ok {
			all[i] = d
			continue
		}
		rest[n], restAt[n] = pipeCall{p: p, rkey: rkey, key: asks[i].Key, c: call{n: 1, dry: true, rs: p.rs()}}, i
		n++
	}
	if n > 0 && (outage.From(ctx).Down() || s.breaker.openUntil.Load() != closed) {
		// Redis failed the overruns' round trip, or is failing: the
		// give-backs go in the background, and the FailureMode answers.
		var back []giveBack
		for k, pc := range rest[:n] {
			if restAt[k] >= 0 {
				all[restAt[k]] = stateOf(pc.p.fallback(pc.key, 1, true))
			} else {
				back = append(back, giveBack{p: pc.p, rkey: pc.rkey, units: pc.c.give, k: pc.c.gk, gen: pc.c.rs.gen})
			}
		}
		s.refundLater(back)
		n = 0
	}
	if n > 0 {
		// A give-back is the client's due, whether or not its caller waits.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.set.timeout)
		s.pipelined(bctx, rest[:n])
		cancel()
		for k, pc := range rest[:n] {
			switch {
			case restAt[k] >= 0 && pc.err == nil:
				all[restAt[k]] = stateOf(pc.r.d)
			case restAt[k] >= 0:
				all[restAt[k]] = stateOf(pc.p.fallback(pc.key, 1, true))
			case pc.err == nil:
				s.refunded.Add(pc.c.give)
			}
		}
	}
	for i := range all {
		all[i] = all[of[i]]
	}
	copy(each, all)
	return all[storekit.Owing(asks, all)], nil
}

// backToLease gives back units that Reserve took from a lease (part's
// Ref) to that lease, if it is still key's (or its batch taken ahead);
// false when it is gone, and Redis takes them back where the lease was
// charged (part's At).
func (p *policy) backToLease(key string, part floodgate.HoldPart, units int64) bool {
	if part.Ref == 0 || p.s.lease == nil {
		return false
	}
	st := p.state(key)
	if st == nil {
		return false
	}
	for _, g := range []*grant{st.g.Load(), st.next.Load()} {
		if g != nil && g.id == part.Ref {
			p.s.lease.putBack(st, g, units)
			return true
		}
	}
	return false
}

// leaseHolds is what key holds by its lease, in lease mode, as a charge
// answers: Redis's remaining at the grant and what the lease can spend
// now; false when it holds no lease that can spend a unit.
func (p *policy) leaseHolds(key string) (floodgate.Decision, bool) {
	if p.s.lease == nil {
		return floodgate.Decision{}, false
	}
	st := p.state(key)
	if st == nil {
		return floodgate.Decision{}, false
	}
	now, skew := p.s.leaseNow()
	d, ok := p.peekLease(st, now, skew, p.rs())
	if !ok || !d.Allowed {
		return floodgate.Decision{}, false
	}
	return d, true
}

// stateOf turns a Peek's answer (a request of 1, as if taken) into what
// a key holds, as a charge answers: Allowed, and Remaining with the
// peeked unit back.
func stateOf(d floodgate.Decision) floodgate.Decision {
	if d.Allowed {
		d.Remaining++
	}
	d.Allowed = true
	return d
}
