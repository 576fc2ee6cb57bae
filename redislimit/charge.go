package redislimit

import (
	"context"
	"fmt"
	"math"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/storekit"
)

// maxCharge is the largest cost one forced call takes (see args.lua).
const maxCharge = 1 << 52

// Charge takes each ask's N from its key on Redis whatever the key holds,
// so that the key may owe, as floodgate.Settler's Charge says: in one
// round trip, one script, all or nothing (the multi-policy script for
// several keys, whose keys must share a slot on Cluster, as Decide's).
// Every replica then sees the debt, and refuses the key until it is paid
// back: at the rule's rate (the buckets), at the window's end (the fixed
// window), as the charge ages out (the sliding counter and log).
//
// What a key can owe: a bucket's arrival time stays within 2^52 µs of
// Redis's clock (142 years, whatever the rule); a window's count within
// 2^50 (a sliding counter's, the count times its window in µs within
// 2^52); a log's window within 2^32 − 1. A charge past it returns an error
// wrapping floodgate.ErrDebtBound, and charges no ask.
//
// In lease mode what the keys' leases hold pays first (those units were
// taken from Redis ahead): a charge they cover makes no round trip, and
// one they do not empties them and sends the rest to Redis, so that a
// key in debt is admitted from no lease.
//
// When Redis cannot answer, the FailureMode answers: FailLocal charges
// its in-process limiters as Redis would have (a key there owes, and
// refuses until it has paid), FailOpen and FailClosed answer each ask as
// they would a request of N (Allowed false when it refuses), and
// FailError fails the call; the charge is lost to Redis. A
// caller that gives up first gets ctx's error, and the charge is given
// back, as Decide's is.
func (s *Store) Charge(ctx context.Context, asks []floodgate.Ask, each []floodgate.Decision) (floodgate.Decision, error) {
	if len(asks) == 0 || len(asks) > maxPolicies {
		return floodgate.Decision{}, fmt.Errorf("redislimit: Charge takes 1 to %d asks, got %d", maxPolicies, len(asks))
	}
	for i := range asks {
		if asks[i].N < 1 {
			return floodgate.Decision{}, fmt.Errorf("redislimit: Charge: ask %d has a cost of %d; a cost must be at least 1", i, asks[i].N)
		}
	}
	var ps [maxPolicies]*policy
	var of [maxPolicies]int
	var cost [maxPolicies]int64
	if err := s.merge("Charge", asks, &ps, &of, &cost); err != nil {
		return floodgate.Decision{}, err
	}
	for i := range asks {
		if of[i] == i && cost[i] > maxCharge {
			// The scripts take no cost past 2^52; no key can owe it.
			return floodgate.Decision{}, fmt.Errorf("redislimit: Charge: ask %d: a charge of %d: %w", i, cost[i], floodgate.ErrDebtBound)
		}
	}
	var ms [maxPolicies]*policy
	var keys [maxPolicies]string
	var ns [maxPolicies]int64
	var at [maxPolicies]int
	m := 0
	for i := range asks {
		if of[i] == i {
			ms[m], keys[m], ns[m], at[m] = ps[i], asks[i].Key, cost[i], i
			m++
		}
	}
	var live [maxPolicies]floodgate.Decision
	var drawn [maxPolicies]drawing
	if s.lease != nil {
		// What the keys' leases hold pays first: those units were taken
		// from Redis ahead. A lease that pays part of a charge is left
		// empty, so that a key in debt is not admitted from it.
		covered := 0
		for k := range m {
			if drawn[k] = ms[k].draw(keys[k], ns[k]); drawn[k].total == ns[k] {
				live[k] = drawn[k].answer()
				covered++
			}
		}
		if covered == m {
			s.results.Inc(int(resAllowed))
			return s.charged(asks, each, of[:], at[:], live[:m])
		}
		// The keys' next charges find a lease.
		defer s.askLeases(ms[:m], keys[:m], 1<<m-1)
	}
	// The rest goes to Redis: each key's cost less what its lease paid.
	var rm [maxPolicies]*policy
	var rkeys [maxPolicies]string
	var rns [maxPolicies]int64
	var rat [maxPolicies]int // the index in ms of each
	r := 0
	for k := range m {
		if rest := ns[k] - drawn[k].total; rest > 0 {
			rm[r], rkeys[r], rns[r], rat[r] = ms[k], keys[k], rest, k
			r++
		}
	}
	var rlive [maxPolicies]floodgate.Decision
	bound := -1
	var err error
	if r == 1 {
		p := rm[0]
		var rp reply
		rp, err = p.decide(ctx, p.redisKey(rkeys[0]), rkeys[0], call{n: rns[0], force: true})
		s.results.Inc(int(rp.res))
		if rp.bound {
			bound = 0
		}
		rlive[0] = rp.d
	} else {
		var shadow [maxPolicies]bool
		var res result
		bound, res, err = s.chargeMany(ctx, rm[:r], rkeys[:r], rns[:r], shadow[:r], rlive[:r])
		s.results.Inc(int(res))
	}
	if err != nil || bound >= 0 {
		for k := range m {
			drawn[k].putBack()
		}
	}
	if err != nil {
		return floodgate.Decision{Limit: ms[0].rs().capacity}, err
	}
	if bound >= 0 {
		i := at[rat[bound]]
		return floodgate.Decision{}, fmt.Errorf("redislimit: Charge: ask %d: %w: a charge of %d on a key that holds %+v", i, floodgate.ErrDebtBound, cost[i], rlive[bound])
	}
	for k := range m {
		if drawn[k].total == ns[k] {
			live[k] = drawn[k].answer()
		}
	}
	for j := range r {
		live[rat[j]] = rlive[j]
	}
	return s.charged(asks, each, of[:], at[:], live[:m])
}

// merge reads asks for op (Charge, Settle): ps[i] is ask i's policy,
// of[i] the first ask of its policy and key, which answers for it, and
// cost[of[i]] the sum of their costs. An ask of another Store's policy,
// or costs whose sum overflows, is an error.
func (s *Store) merge(op string, asks []floodgate.Ask, ps *[maxPolicies]*policy, of *[maxPolicies]int, cost *[maxPolicies]int64) error {
	for i := range asks {
		p, ok := asks[i].Policy.(*policy)
		if !ok || p.s != s {
			return errNotMine
		}
		ps[i], of[i] = p, i
		for j := range i {
			if of[j] == j && ps[j] == p && asks[j].Key == asks[i].Key {
				of[i] = j
				break
			}
		}
		f := of[i]
		if cost[f] > math.MaxInt64-asks[i].N {
			return fmt.Errorf("redislimit: %s: the costs of ask %d's policy and key overflow an int64: %w", op, i, floodgate.ErrDebtBound)
		}
		cost[f] += asks[i].N
	}
	return nil
}

// charged is Charge's answer: live[k] is the answer of the ask at[k],
// which answers for every ask of[i] names.
func (s *Store) charged(asks []floodgate.Ask, each []floodgate.Decision, of, at []int, live []floodgate.Decision) (floodgate.Decision, error) {
	var buf [maxPolicies]floodgate.Decision
	all := buf[:len(asks)]
	for k := range live {
		all[at[k]] = live[k]
	}
	for i := range all {
		all[i] = all[of[i]]
	}
	copy(each, all)
	return all[storekit.Owing(asks, all)], nil
}

// chargeMany is Charge's round trip for several keys: the multi-policy
// script's forced charges, under the breaker, or the FailureMode's
// answer. It returns the index of the ask past its bound, or -1.
func (s *Store) chargeMany(ctx context.Context, ps []*policy, keys []string, ns []int64, shadow []bool, all []floodgate.Decision) (int, result, error) {
	var refused int
	o, err := s.guarded(ctx, s.set.timeout, func() (err error) {
		refused, err = s.runMany(ctx, ps, keys, ns, shadow, nil, nil, all, nil, true)
		return err
	})
	switch o {
	case tripAnswered:
		return refused, decided(true), nil
	case tripAbandoned:
		s.abandoned.Add(1)
		return -1, resAbandoned, err
	}
	switch s.set.mode {
	case FailError:
		s.fallbacks.Add(1)
		return -1, resFailError, s.unreachedErr(err)
	case FailLocal:
		// The in-process limiters take the charges, as Redis would have
		// (see chargeLocal).
		var asks [maxPolicies]floodgate.Ask
		for i, p := range ps {
			t, err := p.local()
			if err != nil {
				return -1, resFailLocal, err
			}
			asks[i] = floodgate.Ask{Policy: t.pol, Key: keys[i], N: ns[i]}
		}
		s.fallbacks.Add(1)
		if _, err := s.localStore().Charge(ctx, asks[:len(ps)], all); err != nil {
			for i, p := range ps {
				all[i] = floodgate.Decision{Limit: p.rs().capacity, RetryAfter: floodgate.Never}
			}
		}
		return -1, resFailLocal, nil
	}
	for i, p := range ps {
		all[i] = p.fallback(keys[i], ns[i], false)
	}
	return -1, s.failResult(), nil
}
