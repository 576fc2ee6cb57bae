package redislimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/storekit"
)

// maxPolicies is the most asks one Decide takes.
const maxPolicies = floodgate.MaxPolicies

// Decide decides asks together, all or nothing, as floodgate.Store's
// Decide says, in at most one round trip (see Store): each ask with a
// key and a cost of its own, as Envoy's rate-limit service decides a
// request's descriptors, or one key by every policy of a route, as the
// middlewares do.
//
// Several asks go to Redis in one script, which runs each ask's policy
// dry and charges them all only if they all admit, at one instant of
// Redis's clock: a refusal charges nothing, at no moment. On Redis
// Cluster their keys must then share a slot: give the Store a HashTag
// under which they do (a request whose keys do not fails with Redis's
// CROSSSLOT error, answered by the FailureMode). One ask is its policy's
// own script. In lease mode, a request whose every ask's policy holds a
// lease for the ask's key is decided from the leases, all or nothing,
// with no round trip; any other goes to the one script, and the policies
// that held none take one ahead.
//
// A request whose ctx ends before Redis answers is refused with ctx's
// error, and keeps no charge: a call still queued is not sent, and one
// that Redis had already run is given back, in a round trip of its own,
// as a lease's unspent units are (Stats.Refunded counts them). The
// buckets and the windows take the units back exactly; a sliding log
// takes them back unless a later request of the key was charged at the
// same instant (then the refund lapses, which under-admits). Only when
// Redis does not answer within Timeout is whether the call ran unknown;
// its caller had left, so no request was served on it.
func (s *Store) Decide(ctx context.Context, asks []floodgate.Ask, each []floodgate.Decision) (floodgate.Decision, int, error) {
	return s.decideAsks(ctx, asks, each, nil)
}

// decideAsks is Decide's, and with rv Reserve's: its asks whose N is 0
// are checks (see reserving), and what each charged ask took goes to
// rv.parts.
func (s *Store) decideAsks(ctx context.Context, asks []floodgate.Ask, each []floodgate.Decision, rv *reserving) (floodgate.Decision, int, error) {
	refusal := floodgate.Decision{RetryAfter: floodgate.Never}
	if len(asks) > maxPolicies {
		return refusal, 0, fmt.Errorf("redislimit: Decide takes 1 to %d asks, got %d", maxPolicies, len(asks))
	}
	var ps [maxPolicies]*policy
	for i := range asks {
		p, ok := asks[i].Policy.(*policy)
		if !ok || p.s != s {
			return refusal, 0, errNotMine
		}
		ps[i] = p
	}
	check := func(i int) bool { return rv != nil && asks[i].N == 0 }
	var pl storekit.Plan
	err := pl.Prepare(len(asks),
		func(i, j int) bool { return ps[i] == ps[j] && asks[i].Key == asks[j].Key && !check(i) && !check(j) },
		func(i int) bool { return asks[i].Shadow },
		func(i int) int64 {
			if check(i) {
				return 1 // a check refuses as a request of 1 would
			}
			return asks[i].N
		},
		func(i int) int64 { return ps[i].rs().capacity })
	if err != nil {
		return refusal, 0, fmt.Errorf("redislimit: Decide: %w", err)
	}
	var dec [maxPolicies]floodgate.Decision
	all := dec[:len(asks)]
	if rv != nil {
		for i := range asks {
			rv.check[i] = check(i)
		}
	}
	refused, res, err := s.decidePlan(ctx, &pl, ps[:len(asks)], asks, all, rv)
	s.results.Inc(int(res))
	if err != nil {
		if res == resFailError {
			return s.refusedUnreached(ps[0].rs().capacity), 0, err
		}
		return floodgate.Decision{Limit: ps[0].rs().capacity}, 0, err
	}
	for i := range all {
		if f := int(pl.Of[i]); f != i {
			all[i] = all[f]
		} else if pl.Bad[i] {
			all[i] = floodgate.Decision{Limit: ps[i].rs().capacity, RetryAfter: floodgate.Never}
		}
	}
	copy(each, all)
	return all[storekit.Verdict(asks, all, refused)], refused, nil
}

// decidePlan decides pl's asks, writing each live ask's answer to all,
// and returns the ask that refused (-1 for none), the decision's result
// and the caller's context's error, if it gave up first. With rv, it
// decides as Reserve does (see reserving).
func (s *Store) decidePlan(ctx context.Context, pl *storekit.Plan, ps []*policy, asks []floodgate.Ask, all []floodgate.Decision, rv *reserving) (int, result, error) {
	var ms [maxPolicies]*policy
	var keys [maxPolicies]string
	var ns [maxPolicies]int64
	var sh, chk [maxPolicies]bool
	var at [maxPolicies]int8 // the ask each decides
	m := 0
	for _, i := range pl.Live[:pl.NLive] {
		if pl.Refused >= 0 || pl.Shadow[i] && pl.ShadowsRefused {
			// Refused before the Store was asked: what it would answer.
			d, err := ps[i].Peek(ctx, asks[i].Key)
			if err != nil {
				return 0, errResult(err), err
			}
			all[i] = d
			continue
		}
		ms[m], keys[m], ns[m], sh[m], at[m] = ps[i], asks[i].Key, pl.Cost[i], pl.Shadow[i], i
		if rv != nil {
			chk[m] = rv.check[i]
		}
		m++
	}
	if pl.Refused >= 0 {
		return pl.Refused, resDenied, nil
	}
	r, res := -1, resAllowed
	var live [maxPolicies]floodgate.Decision
	var parts [maxPolicies]floodgate.HoldPart
	var err error
	switch {
	case m == 0:
	case rv != nil:
		r, res, err = s.reserveLive(ctx, ms[:m], keys[:m], ns[:m], sh[:m], chk[:m], live[:m], parts[:m])
	case m == 1:
		live[0], res, err = s.decideOne(ctx, ms[0], keys[0], ns[0])
		if !live[0].Allowed {
			r = 0
		}
	default:
		r, res, err = s.decideMany(ctx, ms[:m], keys[:m], ns[:m], sh[:m], live[:m])
	}
	if err != nil {
		return 0, res, err
	}
	for k := range m {
		all[at[k]] = live[k]
		if rv != nil {
			rv.parts[at[k]] = parts[k]
		}
	}
	if r >= 0 {
		for k, i := range pl.Live[:pl.NLive] {
			if i == at[r] {
				r = k
				break
			}
		}
	}
	refused := pl.Refusal(r)
	if refused >= 0 && !pl.Shadow[refused] && res == resAllowed {
		res = resDenied
	}
	return refused, res, nil
}

// decideMany decides several policies' asks together, all or nothing
// (see Decide): from their leases when each holds one, else by the
// multi-policy script, or by the FailureMode. The costs are within each
// policy's capacity (see decidePlan). Each ask not charged answers as a
// look (see asLook). In lease mode, the script's round trip also takes
// a batch for each policy whose lease could not answer, if it charges
// the request, so that the client's next requests find one.
func (s *Store) decideMany(ctx context.Context, ps []*policy, keys []string, ns []int64, shadow []bool, all []floodgate.Decision) (int, result, error) {
	var lz leasing
	if s.lease != nil {
		refused, ok, missed := s.fromLeases(ps, keys, ns, shadow, nil, all, nil)
		if ok {
			looks(ps, ns, shadow, refused, all)
			return refused, decided(refused < 0 || shadow[refused]), nil
		}
		lz.prepare(s, ps, keys, missed)
		defer lz.done()
	}
	var refused int
	var replies [maxPolicies]reply
	o, err := s.guarded(ctx, s.set.timeout, func() (err error) {
		refused, err = s.runMany(ctx, ps, keys, ns, shadow, nil, lz.wants[:len(ps)], all, replies[:len(ps)], false)
		return err
	})
	switch o {
	case tripAnswered:
		if s.lease != nil {
			lz.install(ps, replies[:len(ps)], all)
			s.askLeases(ps, keys, lz.still)
		}
		looks(ps, ns, shadow, refused, all)
		return refused, decided(refused < 0 || shadow[refused]), nil
	case tripAbandoned:
		return 0, resAbandoned, s.abandonMany(ps, all, err)
	}
	return s.fallbackMany(ctx, ps, keys, ns, shadow, all, err)
}

// errResult is the result of a decision that failed with err (a Peek's,
// say): FailError's, or an abandoned caller's.
func errResult(err error) result {
	if errors.Is(err, floodgate.ErrUnreached) {
		return resFailError
	}
	return resAbandoned
}

// abandonMany answers the asks of a multi-policy call whose caller left
// first (see abandon), and returns the caller's error.
func (s *Store) abandonMany(ps []*policy, all []floodgate.Decision, callerErr error) error {
	for i, p := range ps {
		all[i] = floodgate.Decision{Limit: p.rs().capacity}
	}
	s.abandoned.Add(1)
	return callerErr
}

// leasing is what a multi-policy round trip leases: a batch for each
// policy whose lease could not answer (missed, bit i for policy i), of
// wants[i] units beyond the request's cost, for its key's state sts[i],
// timed from now and skew; still marks the policies that take none in
// it, and ask for one ahead after (see askLeases).
type leasing struct {
	ls       *leases
	sts      [maxPolicies]*leaseState
	wants    [maxPolicies]int64
	now      int64
	skew     int64
	still    uint16
	tracked  bool
	holders  [maxPolicies]*policy
	nholders int
}

// prepare sizes the batches of the policies missed marks, as a renewal
// ahead would, and counts the round trip among lease mode's, which Close
// waits for.
func (lz *leasing) prepare(s *Store, ps []*policy, keys []string, missed uint16) {
	ls := s.lease
	lz.ls, lz.still = ls, missed
	if missed == 0 || ls.closed.Load() {
		return
	}
	lz.now, lz.skew = s.leaseNow()
	for i, p := range ps {
		if missed&(1<<i) == 0 || p.closed.Load() {
			continue
		}
		st := p.state(keys[i])
		if st == nil {
			if st = p.newState(keys[i], s.hasher.ID(keys[i])); st == nil {
				continue
			}
		}
		st.lastUsed.Store(lz.now)
		if nx := st.next.Load(); nx != nil || st.dead.Load() {
			continue // a batch taken ahead, which askLeases looks at
		}
		rs := p.rs()
		g := st.g.Load()
		spent, held := int64(0), int64(0)
		if g != nil && g.gen == rs.gen {
			u := max(0, g.units.Load())
			spent = g.taken - u - g.decayed.Load()
			held = ls.usable(g, u, lz.now, lz.skew)
		} else {
			g = nil
		}
		if want := min(ls.want(rs, st, g, spent, lz.now), ls.max-held); want > 0 {
			lz.sts[i], lz.wants[i] = st, want
			lz.still &^= 1 << i
			lz.holders[lz.nholders] = p
			lz.nholders++
			p.flights.Add(1) // its Close waits for the batch, and returns it
		}
	}
	if lz.nholders > 0 {
		lz.tracked = ls.enter()
	}
}

// install makes each batch that the round trip took its key's lease, or
// its next one, and adds its units to the policy's answer; a policy that
// wanted one and took none (the request was refused, or Redis had too
// little left) is asked for one ahead.
func (lz *leasing) install(ps []*policy, replies []reply, all []floodgate.Decision) {
	ls := lz.ls
	for i, p := range ps {
		st := lz.sts[i]
		if st == nil {
			continue
		}
		r := replies[i]
		if r.extra <= 0 {
			lz.still |= 1 << i
			continue
		}
		ls.leased.Add(r.extra)
		st.batch.Store(r.extra)
		p.install(st, ls.newGrant(p.kind, r, lz.now, lz.skew), lz.now)
		all[i].Remaining += r.extra
	}
}

// done ends the round trip's count among lease mode's.
func (lz *leasing) done() {
	for _, p := range lz.holders[:lz.nholders] {
		p.flights.Add(-1)
	}
	if lz.tracked {
		lz.ls.exit()
	}
}

// looks turns the answers of the asks that a decision did not charge
// into looks (see asLook): every ask but the refusing one when an
// enforced ask refused, every shadow but the refusing one when a shadow
// did.
func looks(ps []*policy, ns []int64, shadow []bool, refused int, all []floodgate.Decision) {
	if refused < 0 {
		return
	}
	for k := range all {
		if k != refused && (shadow[k] || !shadow[refused]) {
			all[k] = asLook(all[k], ns[k], ps[k])
		}
	}
}

// asLook turns the answer of an ask of cost n of p that was not charged
// (a dry run, or units taken and given back) into what a look (one
// request) says: exact when the cost would pass; a refusal with none
// left when it would not.
func asLook(d floodgate.Decision, n int64, p *policy) floodgate.Decision {
	if !d.Allowed {
		return floodgate.Decision{Unreached: d.Unreached, Limit: d.Limit, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter}
	}
	d.Remaining += n - 1
	if p.kind == kindBucket {
		// A bucket is full again n-1 steps sooner after one unit than
		// after n; a window's end, and a log's entry, do not move.
		d.ResetAfter -= time.Duration((n-1)*p.rs().interval) * time.Microsecond
	}
	return d
}

// fallbackMany is the FailureMode's answer for several policies' asks
// that Redis did not decide, for the reason cause (see guarded), all or
// nothing as the script's: FailOpen admits, FailClosed refuses (by the
// first enforced policy), FailError refuses with its error, and
// FailLocal decides by the policies' in-process limiters, on the Store's
// LocalStore, as floodgate decides asks there.
func (s *Store) fallbackMany(ctx context.Context, ps []*policy, keys []string, ns []int64, shadow []bool, all []floodgate.Decision, cause error) (int, result, error) {
	s.fallbacks.Add(1)
	switch s.set.mode {
	case FailOpen:
		for i, p := range ps {
			c := p.rs().capacity
			all[i] = floodgate.Decision{Allowed: true, Unreached: true, Limit: c, Remaining: c - ns[i]}
		}
		return -1, resFailOpen, nil
	case FailClosed, FailError:
		refused := 0
		for i := range ps {
			if !shadow[i] {
				refused = i
				break
			}
		}
		for i, p := range ps {
			all[i] = s.refusedUnreached(p.rs().capacity)
		}
		if s.set.mode == FailError {
			return refused, resFailError, s.unreachedErr(cause)
		}
		return refused, resFailClosed, nil
	}
	var asks [maxPolicies]floodgate.Ask
	for i, p := range ps {
		t, err := p.local()
		if err != nil { // CheckRule took the rule: not reached
			return 0, resFailLocal, err
		}
		asks[i] = floodgate.Ask{Policy: t.pol, Key: keys[i], N: ns[i], Shadow: shadow[i]}
	}
	_, refused, err := s.localStore().Decide(ctx, asks[:len(ps)], all)
	return refused, resFailLocal, err
}
