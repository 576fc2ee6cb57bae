package floodgate

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/floodgate-go/floodgate/internal/plan"
)

// Settler is a Store that charges costs known only when a request ends,
// as Limiter's Charge and Reserve do, on every policy it makes.
// LocalStore and redislimit's Store are Settlers; the middlewares'
// policies whose cost the handler reports, and the rate-limit service's
// hits that are counted whatever they find, need one.
type Settler interface {
	Store

	// Charge takes each ask's N from its key whatever the key holds, so
	// that the key may owe (see Limiter.Charge): every ask is charged,
	// shadow or enforced, and none refuses. Asks of one policy and key
	// are charged one after the other. each, nil or up to len(asks) long,
	// receives each ask's state after its charge (Allowed true; Owed what
	// its key owes), and the Decision returned is the ask that owes most,
	// else the one with the fewest remaining, of the enforced asks (of
	// every ask, if all are shadows).
	//
	// Charge is all or nothing: an ask's N below 1, or a charge that
	// would leave its key owing more than its state can hold
	// (ErrDebtBound), returns an error and charges no ask. Its other
	// errors are Decide's.
	Charge(ctx context.Context, asks []Ask, each []Decision) (Decision, error)

	// Reserve decides asks as Decide does, and records in h what it
	// charged each ask, for Settle. An ask whose N is 0 is a check: it
	// charges nothing, and refuses when a request of 1 for its key would
	// be refused, as an ask would. A request admitted by Reserve must be
	// settled once with its costs; one that is not keeps what Reserve
	// charged.
	Reserve(ctx context.Context, asks []Ask, each []Decision, h *Hold) (d Decision, refused int, err error)

	// Settle charges each ask's N, the request's actual cost for it, in
	// place of what Reserve charged it (h): it gives back what that had
	// over N, as if never taken, or charges what N has over it, as Charge
	// does, so that the key may owe. The asks are Reserve's, in its
	// order, each with its actual cost (0 or more); an ask left at its
	// estimate changes nothing. A shadow ask is settled as an enforced
	// one: a shadow refuses nothing, and counts every cost. each and the
	// Decision returned are as Charge's.
	//
	// Settle returns ErrNotReserved for a Hold whose request Reserve
	// refused (or a zero Hold), ErrSettled for one settled already, and
	// an error for asks that are not Reserve's; an overrun past what a
	// key can owe (ErrDebtBound) returns an error and changes nothing,
	// and the Hold stays unsettled. A Hold is settled from one goroutine.
	Settle(ctx context.Context, asks []Ask, each []Decision, h *Hold) (Decision, error)
}

// A Hold is what a Settler's Reserve charged a request, until Settle
// corrects it to the request's cost. The zero Hold holds nothing. A
// Hold is one request's: Reserve fills it, and it must not be copied
// between the two. A LocalStore's Hold keeps its keys' identities, never
// the tables they were in: what it keeps does not grow with the ids that
// come and go while it is held.
type Hold struct {
	// Admitted says Reserve admitted the request; Settled, that it was
	// settled since.
	Admitted, Settled bool
	// N is the number of asks Reserve decided.
	N int
	// Parts says what Reserve charged each ask, as its Store records it:
	// for a Store's implementation, which a caller leaves alone.
	Parts [MaxPolicies]HoldPart

	local [MaxPolicies]grant // a LocalStore's grants, each held (see hold): no table of theirs
}

// HoldPart is what a Store's Reserve charged one ask, for its Settle: N
// units (0 for a check, an ask that was not charged, or one that repeats
// an earlier ask's policy and key and was charged with it), and where, in
// the terms of the Store (a bucket's arrival time, a window, a log's
// entry) and of the rule it was charged under (Gen); Ref is the Store's
// own reference to what holds them (redislimit's lease), 0 for none.
type HoldPart struct {
	N, At, Gen, Ref int64
}

// errHoldAsks is Settle's error for asks that are not the Hold's.
var errHoldAsks = errors.New("floodgate: Settle: the asks are not the ones Reserve decided with the Hold")

// checkSettle checks a Settle's arguments against h before anything is
// charged: ErrNotReserved, ErrSettled, a count of asks that is not
// Reserve's, or a negative cost. Package storekit gives it to the
// Settlers outside this module (see storelink).
func checkSettle(asks []Ask, h *Hold) error {
	switch {
	case h == nil || !h.Admitted:
		return ErrNotReserved
	case h.Settled:
		return ErrSettled
	case len(asks) != h.N:
		return errHoldAsks
	}
	for i := range asks {
		if asks[i].N < 0 {
			return fmt.Errorf("floodgate: Settle: ask %d has a cost of %d; a cost cannot be negative", i, asks[i].N)
		}
	}
	return nil
}

// owing returns the index of the Decision among all that a Charge or a
// Settle answers with (see plan.Owing): the ask that owes most, else the
// one with the fewest remaining, else the longest ResetAfter (the first
// of equals), among the asks that are not shadows (every ask, if all
// are). It is the order of Decide's most restrictive answer, with what a
// key owes before it.
func owing(asks []Ask, all []Decision) int {
	return plan.Owing(len(all), func(i int) bool { return asks[i].Shadow }, func(i int) plan.Answer {
		return plan.Answer{Owed: all[i].Owed, Remaining: all[i].Remaining, ResetAfter: all[i].ResetAfter}
	})
}

// policies returns the Limiters of asks, which must be this Store's.
func (s *LocalStore) limiters(asks []Ask, ls *[MaxPolicies]*Limiter) error {
	if len(asks) == 0 || len(asks) > MaxPolicies {
		return fmt.Errorf("floodgate: a Store takes 1 to %d asks, got %d", MaxPolicies, len(asks))
	}
	for i := range asks {
		p, ok := asks[i].Policy.(*localPolicy)
		if !ok || p.store != s {
			return errNotMine
		}
		ls[i] = p.l
	}
	return nil
}

// Charge charges asks together, as Settler's Charge says, in process.
func (s *LocalStore) Charge(_ context.Context, asks []Ask, each []Decision) (Decision, error) {
	var ls [MaxPolicies]*Limiter
	if err := s.limiters(asks, &ls); err != nil {
		return Decision{}, err
	}
	var buf [MaxPolicies]Decision
	var took [MaxPolicies]grant
	all := buf[:len(asks)]
	for i := range asks {
		l := ls[i]
		if err := l.chargeGrant(l.hasher.ID(asks[i].Key), l.now(), asks[i].N, &all[i], &took[i]); err != nil {
			for j := range i {
				ls[j].refundKey(&took[j])
				if took[j].g != nil {
					ls[j].returnGlobal(took[j].g, took[j].now, took[j].n)
				}
			}
			return Decision{}, fmt.Errorf("%w (ask %d)", err, i)
		}
	}
	copy(each, all)
	return all[owing(asks, all)], nil
}

// Reserve decides asks as Decide does, with checks for the asks whose N
// is 0, and records in h what each took, as Settler's Reserve says.
func (s *LocalStore) Reserve(ctx context.Context, asks []Ask, each []Decision, h *Hold) (Decision, int, error) {
	var ls [MaxPolicies]*Limiter
	*h = Hold{}
	if err := s.limiters(asks, &ls); err != nil {
		return Decision{RetryAfter: Never}, 0, err
	}
	var sub [MaxPolicies]Ask // the asks that charge
	var at [MaxPolicies]int  // the index in asks of each of sub
	var buf [MaxPolicies]Decision
	all := buf[:len(asks)]
	m := 0
	refused := -1
	for i := range asks {
		if asks[i].N != 0 {
			sub[m], at[m] = asks[i], i
			m++
			continue
		}
		l := ls[i]
		l.check(l.hasher.ID(asks[i].Key), l.now(), &all[i])
		if !all[i].Allowed && (refused < 0 || asks[refused].Shadow && !asks[i].Shadow) {
			refused = i
		}
	}
	if refused >= 0 && !asks[refused].Shadow || m == 0 {
		// An enforced check refused, or only checks: nothing is charged.
		for k := range m {
			i := at[k]
			all[i] = ls[i].Peek(asks[i].Key)
		}
	} else {
		var got [MaxPolicies]Decision
		var took [MaxPolicies]grant
		for k := range m {
			ls[at[k]].holdable()
		}
		_, r, err := s.decide(sub[:m], got[:m], &took)
		if err != nil {
			return Decision{RetryAfter: Never}, 0, err
		}
		for k := range m {
			i := at[k]
			all[i] = got[k]
			h.local[i] = took[k]
			ls[i].hold(&h.local[i])
			h.Parts[i].N = took[k].n
		}
		if r >= 0 && (refused < 0 || !sub[r].Shadow) {
			refused = at[r]
		}
	}
	copy(each, all)
	h.N = len(asks)
	h.Admitted = refused < 0 || asks[refused].Shadow
	if !h.Admitted {
		return all[refused], refused, nil
	}
	return all[owing(asks, all)], refused, nil
}

// Settle settles what Reserve charged the asks (h) to their actual
// costs, as Settler's Settle says, in process.
func (s *LocalStore) Settle(_ context.Context, asks []Ask, each []Decision, h *Hold) (Decision, error) {
	var ls [MaxPolicies]*Limiter
	if err := checkSettle(asks, h); err != nil {
		return Decision{}, err
	}
	if err := s.limiters(asks, &ls); err != nil {
		return Decision{}, err
	}
	// The asks of one policy and key were charged as one, by the first.
	var of [MaxPolicies]int
	var cost [MaxPolicies]int64
	for i := range asks {
		of[i] = i
		for j := range i {
			if of[j] == j && ls[j] == ls[i] && asks[j].Key == asks[i].Key {
				of[i] = j
				break
			}
		}
		f := of[i]
		if cost[f] > math.MaxInt64-asks[i].N {
			return Decision{}, fmt.Errorf("floodgate: Settle: the costs of ask %d's policy and key overflow an int64", i)
		}
		cost[f] += asks[i].N
	}
	// The overruns first, all or nothing, then what goes back, which
	// cannot fail.
	var buf [MaxPolicies]Decision
	var over [MaxPolicies]grant
	all := buf[:len(asks)]
	charged := func(i int) bool { return of[i] == i && cost[i] > h.Parts[i].N }
	for i := range asks {
		if !charged(i) {
			continue
		}
		l := ls[i]
		id := h.local[i].id
		if h.Parts[i].N == 0 {
			id = l.hasher.ID(asks[i].Key)
		}
		if err := l.chargeGrant(id, l.now(), cost[i]-h.Parts[i].N, &all[i], &over[i]); err != nil {
			for j := range i {
				if charged(j) {
					ls[j].refundKey(&over[j])
					if over[j].g != nil {
						ls[j].returnGlobal(over[j].g, over[j].now, over[j].n)
					}
				}
			}
			return Decision{}, fmt.Errorf("%w (ask %d)", err, i)
		}
	}
	for i := range asks {
		f := of[i]
		switch {
		case f != i:
			continue
		case cost[i] < h.Parts[i].N:
			_ = ls[i].settleGrant(&h.local[i], h.Parts[i].N, cost[i], &all[i]) // a give-back: no error
		case cost[i] == h.Parts[i].N:
			l := ls[i]
			all[i] = l.settled(l.hasher.ID(asks[i].Key), l.now())
		}
	}
	for i := range all {
		all[i] = all[of[i]]
	}
	h.Settled = true
	copy(each, all)
	return all[owing(asks, all)], nil
}
