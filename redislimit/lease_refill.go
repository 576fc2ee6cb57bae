package redislimit

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/floodgate-go/floodgate"
)

// errLeaseWait is the wait for another goroutine's refill running out of
// Timeout.
var errLeaseWait = errors.New("redislimit: the key's refill outlasted Timeout")

// refill decides a request of cost n that the key's lease cannot serve:
// one goroutine per key at a time (the leader) takes the next batch in the
// round trip that decides its request; the others wait for it, within
// Timeout, and try the new batch.
//
// With peek, the request is a check (Peek's, n 1) that takes nothing: its
// unit joins the batch the round trip took, as an abandoned request's
// does, and the key's next requests and checks find a lease.
func (p *policy) refill(ctx context.Context, key string, st *leaseState, n int64, peek bool) (floodgate.Decision, result, error) {
	s := p.s
	ls := s.lease
	var deadline time.Time
	for {
		if st.dead.Load() {
			switch {
			case deadline.IsZero() && peek:
				r, err := p.decide(ctx, p.redisKey(key), key, call{n: 1, dry: true})
				return r.d, r.res, err
			case deadline.IsZero():
				return p.leaseAllow(ctx, key, n, p.rs())
			}
			// Dropped while this caller waited: what is left of its
			// Timeout decides it on Redis, with no lease.
			budget := time.Until(deadline)
			if budget <= 0 {
				return p.unreached(key, n, peek, errLeaseWait)
			}
			r, err := p.decide(ctx, p.redisKey(key), key, call{n: n, dry: peek, budget: budget})
			return r.d, r.res, err
		}
		f := st.flight.Load()
		if f == nil {
			f = &flight{done: make(chan struct{})}
			if st.flight.CompareAndSwap(nil, f) {
				budget := s.set.timeout // a caller that waited has what is left of it
				if !deadline.IsZero() {
					budget = time.Until(deadline)
				}
				var d floodgate.Decision
				var res result
				var err error
				if budget > 0 {
					// Close waits for the refill, and returns what it took.
					tracked := ls.enter()
					p.flights.Add(1)
					d, res, err = p.lead(ctx, key, st, n, budget, peek)
					p.flights.Add(-1)
					if tracked {
						ls.exit()
					}
				} else {
					d, res, err = p.unreached(key, n, peek, errLeaseWait)
				}
				st.flight.Store(nil)
				close(f.done)
				return d, res, err
			}
			continue
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(s.set.timeout)
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return p.unreached(key, n, peek, errLeaseWait)
		}
		timer := time.NewTimer(wait)
		st.waiting.Add(n)
		select {
		case <-f.done:
			timer.Stop()
			st.waiting.Add(-n)
		case <-ctx.Done():
			timer.Stop()
			st.waiting.Add(-n)
			return p.abandon(), resAbandoned, ctx.Err()
		case <-timer.C:
			st.waiting.Add(-n)
			if s.set.onError != nil {
				s.set.onError(errLeaseWait)
			}
			return p.unreached(key, n, peek, errLeaseWait)
		}
		now, skew := s.leaseNow()
		rs := p.rs()
		if d, ok := p.fromHeld(st, n, now, skew, rs, peek); ok {
			return d, resAllowed, nil
		}
		if d, ok := st.cachedDenial(n, now, rs); ok {
			return d, resDenied, nil
		}
	}
}

// fromHeld serves a request of cost n from the key's lease, or with peek
// answers its check (n 1, taking nothing) from it: false when the lease
// cannot.
func (p *policy) fromHeld(st *leaseState, n, now, skew int64, rs *rules, peek bool) (floodgate.Decision, bool) {
	if peek {
		if d, ok := p.peekLease(st, now, skew, rs); ok {
			return peeked(d), true
		}
		return floodgate.Decision{}, false
	}
	if g, rest, ok := p.take(st, n, now, skew, rs); ok {
		return fromLease(g, rest, now), true
	}
	return floodgate.Decision{}, false
}

// peeked is peekLease's answer as Peek gives it: Remaining after the
// peeked request.
func peeked(d floodgate.Decision) floodgate.Decision {
	if d.Allowed {
		d.Remaining--
	}
	return d
}

// lead is the refill itself, run by the key's one leader: it takes the
// key's lease out of reach, keeps what of it may still be spent toward
// this request, asks Redis for the rest and the next batch in one round
// trip, and installs the new batch.
func (p *policy) lead(ctx context.Context, key string, st *leaseState, n int64, budget time.Duration, peek bool) (d floodgate.Decision, res result, err error) {
	s := p.s
	ls := s.lease
	now, skew := s.leaseNow()
	rs := p.rs() // the rule of this round trip, and of the batch it takes
	if d, ok := p.fromHeld(st, n, now, skew, rs, peek); ok {
		return d, resAllowed, nil // a refill that ended just now served it
	}
	if d, ok := st.cachedDenial(n, now, rs); ok {
		return d, resDenied, nil
	}
	old := st.g.Swap(nil)
	if old != nil && old.gen != rs.gen {
		ls.lapse(old) // leased under a rule changed since (SetRule raced it)
		old = nil
	}
	var held, give, gk, spent int64
	if old != nil {
		u := max(0, old.units.Swap(retiredUnits))
		decayed := old.decayed.Swap(0)
		ls.lapsed.Add(decayed)
		spent = old.taken - u - decayed
		held = ls.usable(old, u, now, skew)
		switch {
		case held >= n && peek:
			old.units.Store(held)
			p.install(st, old, now)
			return fromLease(old, held-1, now), resAllowed, nil
		case held >= n: // a spend that lost a race to this refill
			old.units.Store(held - n)
			p.install(st, old, now)
			return fromLease(old, held-n, now), resAllowed, nil
		case held > 0:
			ls.lapsed.Add(u - held)
		case u > 0: // its time is up: what Redis has not taken back goes back
			old.units.Store(u)
			b := ls.drain(st, old, now)
			give, gk = b.units, b.k
		}
	}
	// The request takes the units held first and the rest from Redis, with
	// the next batch, in one round trip.
	want := int64(0)
	if !ls.closed.Load() && !p.closed.Load() {
		want = ls.want(rs, st, old, spent+n, now)
		if nx := st.next.Load(); nx != nil {
			want = max(0, min(want, ls.max-max(0, nx.units.Load()))) // Max bounds the two batches together
		}
	}
	// The round trip is the key's, not only this caller's: it runs to its
	// own budget whatever the caller's deadline, so that a caller who
	// sends a deadline too short for it cannot make the batch it took be
	// lost (on a key shared by many clients, a way to drain their
	// allowance). A caller that gave up meanwhile is still abandoned, and
	// what its request took goes back into the new batch (or to Redis).
	ls.refills.Add(1)
	r, err := p.decide(context.WithoutCancel(ctx), st.rkey, key, call{n: n - held, want: want, give: give, gk: gk, budget: budget, rs: rs, look: peek})
	st.pending.Store(st.waiting.Load()) // the next batch serves those who queued meanwhile
	if r.redis {
		ls.returned.Add(give)
	} else {
		ls.lapsed.Add(give)
	}
	cerr := ctx.Err()
	if !r.redis || !r.d.Allowed {
		if held > 0 {
			// The request did not pass: what was held is held again.
			old.units.Store(held)
			p.install(st, old, now)
		}
		if r.redis && r.d.RetryAfter > 0 {
			// The denial holds here until RetryAfter, or for a TTL if that
			// is sooner: what Redis lacked may be leased to other replicas,
			// and within a TTL each lease is spent or given back, where
			// the next round trip finds it.
			retry := int64(r.d.RetryAfter)
			st.deniedReset.Store(now + int64(r.d.ResetAfter))
			st.deniedOwed.Store(r.d.Owed)
			st.deniedRetry.Store(now + retry)
			st.deniedCost.Store(n)
			st.deniedGen.Store(rs.gen)
			st.deniedUntil.Store(now + min(retry, ls.ttl))
		}
		if cerr != nil && err == nil {
			return p.abandon(), resAbandoned, cerr
		}
		return r.d, r.res, err
	}
	st.deniedUntil.Store(0)
	d = r.d
	var g *grant
	if r.extra > 0 {
		ls.leased.Add(r.extra)
		st.batch.Store(r.extra)
		g = ls.newGrant(p.kind, r, now, skew)
		p.install(st, g, now)
		d.Remaining += r.extra
	}
	if cerr != nil || peek {
		// Its caller left, or it was a check: the request keeps no charge. What it took from
		// Redis joins the batch it took, whose slots it precedes (the
		// buckets) or whose window it shares (the windows); the log's,
		// stamped before the batch's, goes back to Redis. What it took of
		// the old lease is held there again.
		if g != nil && p.kind != kindLog {
			ls.putBack(st, g, n-held)
		} else {
			ls.queueBack(giveBack{p: p, rkey: st.rkey, units: n - held, k: chargedAt(p.kind, r.k, r.horizon), gen: rs.gen})
		}
		if held > 0 {
			old.units.Store(held)
			p.install(st, old, now)
		}
		if cerr != nil {
			return p.abandon(), resAbandoned, cerr
		}
	}
	return d, r.res, nil
}

// install makes g the key's lease, or its next batch if another was
// promoted meanwhile (or gives g back if both places are taken); and if
// Close has begun, or the key's state was dropped meanwhile (by Reset, or
// by the bookkeeper while the key was idle), it gives g's units back
// instead.
func (p *policy) install(st *leaseState, g *grant, now int64) {
	ls := p.s.lease
	if !st.g.CompareAndSwap(nil, g) && !st.next.CompareAndSwap(nil, g) {
		ls.giveBackNow(st, g, now)
		return
	}
	// The rule is read after g is in place: either a SetRule, which
	// changes the rule first, makes g unusable, or this finds the new rule.
	if !ls.closed.Load() && !st.dead.Load() && g.gen == p.rs().gen {
		return
	}
	if st.g.CompareAndSwap(g, nil) || st.next.CompareAndSwap(g, nil) {
		ls.giveBackNow(st, g, now) // sendBack lets a stale rule's units lapse
	}
}

// want is the size of the key's next batch: what the key spent since its
// last batch was taken, scaled to the target period, grown at most
// leaseGrowth times over the last batch, and at most Max.
// The requests that queued behind the last refill are served whole. rs
// is the rule the batch is taken under.
func (ls *leases) want(rs *rules, st *leaseState, old *grant, spent, now int64) int64 {
	w := max(1, st.batch.Load())
	if old != nil {
		w = spent * leaseGrowth
		if elapsed := now - old.at; elapsed > 0 && elapsed >= rs.target/leaseGrowth {
			w = min(w, spent*rs.target/elapsed)
		}
		w = max(1, min(w, leaseGrowth*max(1, old.taken)))
		// Far from the limit, a batch may outgrow the key's demand: a
		// sliver of what Redis had left is nothing to the other replicas,
		// and it saves a quiet key its round trips. Near the limit the
		// sliver is small, and Redis grants at most an eighth anyway.
		w = max(w, old.remaining/leaseSpare)
	}
	if rs.step > 0 {
		// A bucket's unit lasts while the debt it made is unpaid: from a
		// full bucket, a batch of k lasts k steps, however few of them the
		// key spends. So a bucket's batch is at least enough to last the
		// target period; what the key does not spend lapses, and Redis has
		// it back by then. (Redis grants at most an eighth of what
		// remains, so this never crowds out the other replicas near the
		// limit, where a batch lasts long anyway: its slots lie behind the
		// debt already there.)
		w = max(w, rs.target/rs.step)
	}
	return min(ls.max, max(w, st.pending.Load()), maxWant)
}

// newGrant is the batch of reply r, to a call of a policy of kind sent
// at now (lease ns), on a host whose wall clock then stood skew ahead of
// the monotonic one. Its time counts from the sending, in the whole µs
// that Redis's clock counts: Redis ran the call later, so the lease ends
// no later than Redis's count does.
func (ls *leases) newGrant(kind scriptKind, r reply, now, skew int64) *grant {
	sent := now / 1000 * 1000
	g := &grant{id: ls.grants.Add(1), at: now, skew: skew, taken: r.extra, remaining: r.d.Remaining, k: r.k, gen: r.rs.gen, limit: r.rs.capacity, step: r.rs.step,
		until: now + min(ls.ttl, math.MaxInt64-now), resetAt: now + int64(r.d.ResetAfter)}
	if g.step > 0 {
		g.top = sent + r.horizon*1000
		g.k = r.k + r.horizon // the TAT on Redis's clock
	} else {
		g.until = min(g.until, sent+r.horizon*1000)
	}
	g.units.Store(r.extra)
	// Renew ahead once three quarters of the batch, or of its time, is
	// gone.
	g.low = max(1, r.extra/4)
	end := g.until
	if g.step > 0 {
		end = min(end, g.top)
	}
	g.renewAt = now + (end-now)/4*3
	if kind != kindLog && g.step == 0 && g.until-now < ls.ttl {
		// A window's batch that ends with its window: a batch renewed
		// ahead in time would end with it too, so only running low
		// renews it.
		g.renewAt = math.MaxInt64
		g.windowEnd = kind == kindFixedWindow
	}
	return g
}

// fromLeases decides a request from the policies' leases for their keys,
// with no round trip, when each policy can answer from its own: units of
// its lease, or a denial it holds for the key. It charges all or
// nothing, as the script does: units taken for a request that another
// policy refuses go back to the lease they came from (Redis counted them
// leased, and still does). ok is false when some policy cannot answer
// without Redis; then nothing is charged, and need marks (bit i for
// policy i) the policies that could not, which askLeases then renews.
// For Reserve, checks marks the asks that are checks (see peekLease;
// nil for none), and got receives the grant that each charged ask was
// taken from (nil when none).
func (s *Store) fromLeases(ps []*policy, keys []string, ns []int64, shadow, checks []bool, all []floodgate.Decision, got []*grant) (refused int, ok bool, need uint16) {
	ls := s.lease
	var taken [maxPolicies]*grant
	var sts [maxPolicies]*leaseState
	giveBack := func(keep func(int) bool) {
		for i, g := range taken[:len(ps)] {
			if g != nil && !keep(i) {
				ls.putBack(sts[i], g, ns[i])
				taken[i] = nil
			}
		}
	}
	// miss gives back what was taken, and marks policy i and each after
	// it that could not answer either.
	miss := func(i int) (int, bool, uint16) {
		giveBack(func(int) bool { return false })
		need := uint16(1) << i
		for j := i + 1; j < len(ps); j++ {
			if !ps[j].couldServe(keys[j], ns[j]) {
				need |= 1 << j
			}
		}
		return 0, false, need
	}
	enforced, sh := -1, -1
	now, skew := s.leaseNow()
	for i, p := range ps {
		st := p.state(keys[i])
		if st == nil {
			return miss(i)
		}
		sts[i] = st
		rs := p.rs()
		if checks != nil && checks[i] {
			d, ok := p.peekLease(st, now, skew, rs)
			if !ok {
				return miss(i)
			}
			if all[i] = d; d.Allowed {
				continue
			}
		} else if g, rest, ok := p.take(st, ns[i], now, skew, rs); ok {
			taken[i] = g
			all[i] = fromLease(g, rest, now)
			continue
		} else if d, ok := st.cachedDenial(ns[i], now, rs); ok {
			all[i] = d
		} else {
			return miss(i)
		}
		if shadow[i] {
			if sh < 0 {
				sh = i
			}
		} else if enforced < 0 {
			enforced = i
		}
	}
	switch {
	case enforced >= 0:
		giveBack(func(int) bool { return false })
		return enforced, true, 0
	case sh >= 0:
		giveBack(func(i int) bool { return !shadow[i] })
		copy(got, taken[:len(ps)])
		return sh, true, 0
	}
	copy(got, taken[:len(ps)])
	return -1, true, 0
}

// peekLease answers a check (a request of 1 that takes nothing) for st's
// key from its lease, or its batch taken ahead, when one holds a unit it
// could spend now (Remaining what the key holds: Redis's at the grant and
// the lease's), or from a denial it holds; ok is false when neither can
// answer.
func (p *policy) peekLease(st *leaseState, now, skew int64, rs *rules) (floodgate.Decision, bool) {
	for _, g := range []*grant{st.g.Load(), st.next.Load()} {
		if g == nil || g.gen != rs.gen {
			continue
		}
		if c := p.s.lease.usable(g, g.units.Load(), now, skew); c >= 1 {
			return fromLease(g, c, now), true
		}
	}
	return st.cachedDenial(1, now, rs)
}

// drawing is what a charge took from a key's lease and its batch taken
// ahead (see policy.draw).
type drawing struct {
	st    *leaseState
	gs    [2]*grant
	took  [2]int64
	total int64
	now   int64
}

// draw takes up to n units from key's lease and its batch taken ahead, as
// many as they can spend now.
func (p *policy) draw(key string, n int64) drawing {
	var d drawing
	st := p.state(key)
	if st == nil {
		return d
	}
	ls, rs := p.s.lease, p.rs()
	now, skew := p.s.leaseNow()
	d.st, d.now = st, now
	// As take does: a lease that can spend nothing gives way to the batch
	// taken ahead, which is then the one renewed.
	if g := st.g.Load(); g == nil || g.gen != rs.gen || ls.usable(g, g.units.Load(), now, skew) == 0 {
		if nx := st.next.Load(); nx != nil && nx != g && st.g.CompareAndSwap(g, nx) {
			st.next.CompareAndSwap(nx, nil)
			if g != nil {
				ls.retire(st, g, now)
			}
		}
	}
	for k, g := range []*grant{st.g.Load(), st.next.Load()} {
		if g == nil || g.gen != rs.gen || d.total == n {
			continue
		}
		for {
			u := g.units.Load()
			c := ls.usable(g, u, now, skew)
			t := min(c, n-d.total)
			if t <= 0 {
				break
			}
			if g.units.CompareAndSwap(u, c-t) {
				if c < u {
					g.decayed.Add(u - c) // rare: only as a batch outlives its debt
				}
				d.gs[k], d.took[k] = g, t
				d.total += t
				if k == 0 && (c-t < g.low || now >= g.renewAt) && !g.asked.Load() && g.asked.CompareAndSwap(false, true) {
					ls.askRenewal(st, rs, now)
				}
				break
			}
		}
	}
	return d
}

// answer is the decision for a charge that d paid whole: Redis's
// remaining at its last grant, and what that grant still holds.
func (d *drawing) answer() floodgate.Decision {
	g := d.gs[1]
	if g == nil {
		g = d.gs[0]
	}
	return fromLease(g, max(0, g.units.Load()), d.now)
}

// putBack puts what d took back, for a charge that failed.
func (d *drawing) putBack() {
	for k, g := range d.gs {
		if g != nil {
			d.st.p.s.lease.putBack(d.st, g, d.took[k])
		}
	}
	*d = drawing{}
}

// couldServe reports whether key's lease, or its batch taken ahead, holds
// n units it could spend now, or a denial that answers n: a look, which
// takes nothing.
func (p *policy) couldServe(key string, n int64) bool {
	st := p.state(key)
	if st == nil {
		return false
	}
	now, skew := p.s.leaseNow()
	rs := p.rs()
	for _, g := range []*grant{st.g.Load(), st.next.Load()} {
		if g != nil && g.gen == rs.gen && p.s.lease.usable(g, g.units.Load(), now, skew) >= n {
			return true
		}
	}
	_, ok := st.cachedDenial(n, now, rs)
	return ok
}

// askLeases has each policy that need marks (bit i for policy i) take a
// lease for its key ahead, by the bookkeeper, after a request that went
// to Redis because it held none that could answer and whose round trip
// took none (it was refused, or Redis had too little left): the key's
// next requests then find one. The others' leases answered, or were
// taken in the round trip, and are renewed as they run low.
func (s *Store) askLeases(ps []*policy, keys []string, need uint16) {
	ls := s.lease
	for i, p := range ps {
		if need&(1<<i) == 0 || ls.closed.Load() {
			continue
		}
		id := s.hasher.ID(keys[i])
		st := p.state(keys[i])
		if st == nil {
			if st = p.newState(keys[i], id); st == nil {
				continue
			}
		}
		now, skew := s.leaseNow()
		st.lastUsed.Store(now)
		rs := p.rs()
		if nx := st.next.Load(); nx != nil {
			if nx.gen == rs.gen && ls.usable(nx, nx.units.Load(), now, skew) > 0 {
				continue
			}
			// The batch taken ahead can serve nothing: a window's batch
			// taken near its end, which ended with it. It goes back, and
			// the key asks for one that serves.
			if st.next.CompareAndSwap(nx, nil) {
				ls.retire(st, nx, now)
			}
		}
		if g := st.g.Load(); g != nil && !g.asked.CompareAndSwap(false, true) {
			// Its renewal was asked for already. But a lease that can serve
			// nothing is not renewed otherwise: a request of one policy
			// would take a batch in its own round trip (a refill), and this
			// one went to the script. So it is asked for again, once.
			if ls.usable(g, g.units.Load(), now, skew) > 0 || !g.reasked.CompareAndSwap(false, true) {
				continue
			}
		}
		ls.askRenewal(st, rs, now)
	}
}
