package policy

import (
	"context"
	"errors"

	"github.com/floodgate-go/floodgate"
)

// This file decides a request whose cost is known after the work (a Set
// with After policies): Set.Reserve charges each After policy's Estimate
// at admission, and Set.Settle what the request cost when it ends.

// After reports whether a policy of s is After: its requests must be
// decided by Reserve, and settled by Settle when they end.
func (s *Set) After() bool { return s.settler != nil }

// Reserve is Decide for a Set with After policies: each reserves its
// Estimate and every other policy takes n, as the Store's Reserve
// decides them (see floodgate.Settler), and h records what they took.
// A request it serves must be settled with Settle when it ends (one that
// is not keeps what Reserve took). It counts as Decide counts.
func (s *Set) Reserve(ctx context.Context, key string, n int64, each []floodgate.Decision, refusal *floodgate.Decision, h *floodgate.Hold) (serve bool) {
	var d floodgate.Decision
	var j int
	var err error
	if s.local != nil {
		var asks [floodgate.MaxPolicies]floodgate.Ask
		d, j, err = s.local.Reserve(ctx, s.fillAfter(asks[:], key, n, nil), each, h)
	} else {
		sc := scratches.Get().(*scratch)
		all := sc.each[:min(len(each), len(sc.each))]
		d, j, err = s.settler.Reserve(ctx, s.fillAfter(sc.asks[:], key, n, nil), all, h)
		copy(each, all)
		scratches.Put(sc)
	}
	serve = err == nil && s.verdict(j)
	if !serve {
		*refusal = d
	}
	return serve
}

// Settle settles a request that Reserve served (h) to what it cost:
// costs[i] for After policy i (below 0: not known, and its Estimate
// stands), n for every other policy, as the Store's Settle does. ctx
// should outlive the request's caller: a client that leaves still pays.
//
// A cost that would leave its key owing more than its state can hold is
// charged as far as it can owe: Settle halves the costs until the Store
// takes them (a few tries, for a cost of millions of periods' worth,
// after which the key is refused for as long as its state can say), so
// that no cost, however large, leaves only the estimate charged. costs
// then holds what was charged. Another error (a Store that could not be
// reached, which counts it) leaves the estimates charged.
func (s *Set) Settle(ctx context.Context, key string, n int64, costs []int64, h *floodgate.Hold) error {
	for {
		err := s.settle(ctx, key, n, costs, h)
		if !errors.Is(err, floodgate.ErrDebtBound) {
			return err
		}
		more := false
		for i := range costs {
			if s.Specs[i].After && costs[i] > 0 {
				costs[i] /= 2
				more = true
			}
		}
		if !more {
			return err
		}
	}
}

// settle is one Settle, at costs.
func (s *Set) settle(ctx context.Context, key string, n int64, costs []int64, h *floodgate.Hold) error {
	var err error
	if s.local != nil {
		var asks [floodgate.MaxPolicies]floodgate.Ask
		_, err = s.local.Settle(ctx, s.fillAfter(asks[:], key, n, costs), nil, h)
	} else {
		sc := scratches.Get().(*scratch)
		_, err = s.settler.Settle(ctx, s.fillAfter(sc.asks[:], key, n, costs), nil, h)
		scratches.Put(sc)
	}
	return err
}

// fillAfter is fill for Reserve (costs nil: each After policy asks its
// Estimate) and Settle (costs[i], or the Estimate where it is below 0).
func (s *Set) fillAfter(buf []floodgate.Ask, key string, n int64, costs []int64) []floodgate.Ask {
	asks := s.fill(buf, key, n)
	for i := range asks {
		if sp := &s.Specs[i]; sp.After {
			asks[i].N = sp.Estimate
			if costs != nil && costs[i] >= 0 {
				asks[i].N = costs[i]
			}
		}
	}
	return asks
}
