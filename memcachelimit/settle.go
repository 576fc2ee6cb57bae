package memcachelimit

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/storekit"
)

// change is one key's step of a Charge or a Settle: ops applied to the
// state read, in order, each a charge of n or (refund) a give-back of n
// of the grant at at.
type change struct {
	n      [maxAsks]int64
	refund [maxAsks]bool
	at     [maxAsks]int64
	ask    [maxAsks]int // the ask each op answers
	ops    int
}

// apply runs ch on state at now: every op's answer to r.all, and the
// state after them (nil for no change). Its error is a debt past what
// the key can owe (floodgate.ErrDebtBound: the caller's), or a state
// that could not be read (a keyError).
func apply(r *request, i int, ch *change, state []byte, now int64) ([]byte, error) {
	m := r.rl[i].m
	var out []byte
	for k := range ch.ops {
		cur := state
		if out != nil {
			cur = out
		}
		var d floodgate.Decision
		var nx []byte
		var err error
		if ch.refund[k] {
			d, nx, err = m.Refund(cur, now, ch.at[k], ch.n[k], nil)
		} else {
			d, nx, err = m.Charge(cur, now, ch.n[k], nil)
		}
		if err != nil {
			if errors.Is(err, floodgate.ErrDebtBound) {
				return nil, fmt.Errorf("%w (ask %d)", err, ch.ask[k])
			}
			return nil, &keyError{err}
		}
		r.all[ch.ask[k]] = d
		if nx != nil {
			out = nx
		}
	}
	return out, nil
}

// change runs every key's change of r (chs, for the asks that lead a
// policy and key) in one read and a compare-and-swap a key: all or
// nothing, as far as memcached lets (see Charge). bound is the caller's
// error, a debt past a key's bound, with nothing written.
func (s *Store) change(ctx context.Context, r *request, chs *[maxAsks]change) (o outcome, bound, err error) {
	n := len(r.asks)
	o, err = s.guarded(ctx, func(t *trip) error {
		var l locks
		s.lock(&l, r.keys[:n])
		defer s.unlock(&l)
		if err := s.fetch(t, r.keys[:n], r.items[:n]); err != nil {
			return err
		}
		now := s.set.clock.Now()
		var next [maxAsks][]byte
		for i := range n {
			if r.keys[i] == "" {
				continue
			}
			nx, err := apply(r, i, &chs[i], stateOf(r.items[i]), now)
			if err != nil {
				var ke *keyError
				if errors.As(err, &ke) {
					return err
				}
				bound = err
				return nil
			}
			next[i] = nx
		}
		for i := range n {
			for next[i] != nil {
				rl := r.rl[i]
				fresh, err := rl.m.Fresh(next[i])
				if err != nil {
					return &keyError{err}
				}
				now := s.set.clock.Now()
				ok, err := s.store(t, r.keys[i], r.items[i], next[i], expiry(fresh, now))
				if err != nil {
					return err
				}
				if ok {
					break
				}
				if r.items[i], err = s.reread(t, r.keys[i]); err != nil {
					return err
				}
				if next[i], err = apply(r, i, &chs[i], stateOf(r.items[i]), s.set.clock.Now()); err != nil {
					var ke *keyError
					if errors.As(err, &ke) {
						return err
					}
					bound = err // another replica's charge came first: the keys before stay charged
					return nil
				}
			}
		}
		return nil
	})
	return o, bound, err
}

// Charge takes each ask's N from its key whatever the key holds, so
// that the key may owe, as floodgate.Settler's Charge says: one read of
// every key, the charges decided in process, then a compare-and-swap a
// key. A cost below 1, or a debt past what a key can owe, is an error
// with nothing charged; so is, rarely, a debt bound that another
// replica's charge reached between the read and the write of a later
// key, after the keys before it were written (they keep their charge:
// stricter, never looser).
func (s *Store) Charge(ctx context.Context, asks []floodgate.Ask, each []floodgate.Decision) (floodgate.Decision, error) {
	var r request
	if err := s.resolve(&r, asks); err != nil {
		return floodgate.Decision{}, err
	}
	var chs [maxAsks]change
	for i := range asks {
		if asks[i].N < 1 {
			return floodgate.Decision{}, fmt.Errorf("memcachelimit: Charge: ask %d has a cost of %d; a charge is at least 1", i, asks[i].N)
		}
		f := r.lead(i)
		if f == i {
			r.keys[i] = r.ps[i].key(asks[i].Key)
		}
		c := &chs[f]
		c.n[c.ops], c.ask[c.ops] = asks[i].N, i
		c.ops++
	}
	o, bound, err := s.change(ctx, &r, &chs)
	all := r.all[:len(asks)]
	switch {
	case o == abandoned:
		s.results[resAbandoned].Add(1)
		return floodgate.Decision{}, err
	case o == unreached:
		return s.chargeFallback(ctx, &r, each, err)
	case bound != nil:
		return floodgate.Decision{}, bound
	}
	copy(each, all)
	return all[storekit.Owing(asks, all)], nil
}

// lead is the first ask of r of ask i's policy and key.
func (r *request) lead(i int) int {
	for j := range i {
		if r.ps[j] == r.ps[i] && r.asks[j].Key == r.asks[i].Key {
			return j
		}
	}
	return i
}

// chargeFallback is the FailureMode's answer to a Charge that memcached
// did not take: FailLocal's limiters take it in process; FailError
// fails it; FailOpen and FailClosed charge nothing and answer Unreached, each
// ask as a request of N (FailClosed: refused; FailOpen: admitted).
func (s *Store) chargeFallback(ctx context.Context, r *request, each []floodgate.Decision, cause error) (floodgate.Decision, error) {
	s.fallbacks.Add(1)
	n := len(r.asks)
	all := r.all[:n]
	switch s.set.mode {
	case FailError:
		return floodgate.Decision{}, s.unreachedErr(cause)
	case FailLocal:
		var asks [maxAsks]floodgate.Ask
		if err := s.localAsks(r, &asks); err != nil {
			return floodgate.Decision{}, err
		}
		d, err := s.localStore().Charge(ctx, asks[:n], each)
		if err != nil {
			return floodgate.Decision{}, err
		}
		return d, nil
	case FailOpen:
		for i := range n {
			c := r.rl[i].capacity
			all[i] = floodgate.Decision{Allowed: true, Unreached: true, Limit: c, Remaining: max(c-r.asks[i].N, 0)}
		}
	default:
		for i := range n {
			// As a request of N would be answered: refused, so that a
			// caller that reads Allowed (Envoy's rate-limit service
			// does) refuses what memcached could not count.
			all[i] = s.refusedUnreached(r.rl[i].capacity)
		}
	}
	copy(each, all)
	return all[storekit.Owing(r.asks, all)], nil
}

// Settle charges each ask's actual cost in place of what Reserve charged
// it (h), as floodgate.Settler's Settle says: what Reserve charged over
// the cost goes back (the Machine's Refund of the grant), what the cost
// has over it is charged, in one read of every key and a
// compare-and-swap a key. A Hold that FailLocal reserved is settled in
// process. When memcached cannot be reached, FailLocal charges the
// overruns in process, FailError fails the call (the Hold stays
// unsettled), and FailOpen and FailClosed settle nothing.
func (s *Store) Settle(ctx context.Context, asks []floodgate.Ask, each []floodgate.Decision, h *floodgate.Hold) (floodgate.Decision, error) {
	if err := storekit.CheckSettle(asks, h); err != nil {
		return floodgate.Decision{}, err
	}
	var r request
	if err := s.resolve(&r, asks); err != nil {
		return floodgate.Decision{}, err
	}
	if h.Parts[0].Ref == refLocal {
		var la [maxAsks]floodgate.Ask
		if err := s.localAsks(&r, &la); err != nil {
			return floodgate.Decision{}, err
		}
		return s.localStore().Settle(ctx, la[:len(asks)], each, h)
	}
	var cost [maxAsks]int64
	var of [maxAsks]int
	for i := range asks {
		f := r.lead(i)
		of[i] = f
		if cost[f] > math.MaxInt64-asks[i].N {
			return floodgate.Decision{}, fmt.Errorf("memcachelimit: Settle: the costs of ask %d's policy and key overflow an int64", i)
		}
		cost[f] += asks[i].N
	}
	var chs [maxAsks]change
	for i := range asks {
		if of[i] != i {
			continue
		}
		r.keys[i] = r.ps[i].key(asks[i].Key)
		held, c := h.Parts[i].N, &chs[i]
		c.ask[0], c.ops = i, 1
		switch {
		case cost[i] > held:
			c.n[0] = cost[i] - held
		default: // a give-back, or none (0): the key's state after it
			c.n[0], c.refund[0], c.at[0] = held-cost[i], true, h.Parts[i].At
		}
	}
	o, bound, err := s.change(ctx, &r, &chs)
	all := r.all[:len(asks)]
	switch {
	case o == abandoned:
		s.results[resAbandoned].Add(1)
		return floodgate.Decision{}, err
	case o == unreached:
		return s.settleFallback(ctx, &r, each, h, &cost, err)
	case bound != nil:
		return floodgate.Decision{}, bound
	}
	for i := range all {
		all[i] = all[of[i]]
	}
	h.Settled = true
	copy(each, all)
	return all[storekit.Owing(asks, all)], nil
}

// settleFallback is the FailureMode's answer to a Settle that memcached
// did not take (see Settle).
func (s *Store) settleFallback(ctx context.Context, r *request, each []floodgate.Decision, h *floodgate.Hold, cost *[maxAsks]int64, cause error) (floodgate.Decision, error) {
	if s.set.mode == FailError {
		s.fallbacks.Add(1)
		return floodgate.Decision{}, s.unreachedErr(cause)
	}
	// The overruns, as a Charge; what would go back is lost with
	// memcached's answer (the keys keep it: stricter).
	var over request
	over.asks = make([]floodgate.Ask, 0, maxAsks)
	for i := range r.asks {
		if r.keys[i] != "" && cost[i] > h.Parts[i].N {
			a := r.asks[i]
			a.N = cost[i] - h.Parts[i].N
			over.ps[len(over.asks)], over.rl[len(over.asks)] = r.ps[i], r.rl[i]
			over.asks = append(over.asks, a)
		}
	}
	h.Settled = true
	if len(over.asks) == 0 {
		s.fallbacks.Add(1)
		n := len(r.asks)
		for i := range n {
			r.all[i] = floodgate.Decision{Allowed: true, Unreached: true, Limit: r.rl[i].capacity, Remaining: r.rl[i].capacity}
		}
		copy(each, r.all[:n])
		return r.all[storekit.Owing(r.asks, r.all[:n])], nil
	}
	d, err := s.chargeFallback(ctx, &over, nil, cause)
	for i := range each {
		each[i] = d
	}
	return d, err
}
