// Package kitstore is a floodgate.Store written as a backend outside
// floodgate's module would write one: it imports floodgate, storekit and
// inflight, no internal package, and its test runs storetest's suite.
// It holds each policy's state in a floodgate.Limiter in this process,
// and decides every request under one mutex: storekit's Plan prepares
// the asks, each live ask reserves its cost from its Limiter, and a
// refusal gives back what the others reserved (a Reservation settled to
// 0 is as if never taken); storekit's Verdict picks the answer.
//
// It is a SlotStore too, each in-flight policy an inflight.Limiter whose
// slots it hands out through storekit.HeldSlot. It is not a Settler: a
// Settler's Charge is all or nothing, and a Limiter's Charge cannot be
// taken back once a later ask's fails.
package kitstore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/storekit"
)

// Store is a floodgate.Store and floodgate.SlotStore in this process.
// Its zero value is not usable: make one with New.
type Store struct {
	clock floodgate.Clock
	mu    sync.Mutex          // every decision, Peek, SetRule and name
	names map[string]struct{} // the live policies' names, of both kinds
}

// New returns a Store whose Limiters read clock (nil: the system's).
func New(clock floodgate.Clock) *Store {
	return &Store{clock: clock, names: map[string]struct{}{}}
}

// errNotMine is Decide's error for an ask of a policy that another Store
// made, or no Store of this kind.
var errNotMine = errors.New("kitstore: an ask's policy is not one of this Store's")

// policy is one rate policy: a Limiter, and its rule's capacity.
type policy struct {
	s        *Store
	name     string
	l        *floodgate.Limiter
	capacity int64 // under s.mu
	closed   bool  // under s.mu
}

// CheckRule reports whether Policy would take algorithm and rule.
func (s *Store) CheckRule(algorithm string, rule floodgate.Rule) error {
	return floodgate.CheckRule(algorithm, rule)
}

// Policy returns a new policy named name, a Limiter of algorithm and
// rule.
func (s *Store) Policy(name, algorithm string, rule floodgate.Rule) (floodgate.StorePolicy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.names[name]; ok {
		return nil, fmt.Errorf("kitstore: a live policy is named %q already", name)
	}
	l, err := floodgate.New(floodgate.Config{Algorithm: algorithm, Rule: rule, Clock: s.clock})
	if err != nil {
		return nil, err
	}
	s.names[name] = struct{}{}
	return &policy{s: s, name: name, l: l, capacity: rule.Capacity()}, nil
}

// Peek answers what one request for key would be answered now.
func (p *policy) Peek(ctx context.Context, key string) (floodgate.Decision, error) {
	if err := ctx.Err(); err != nil {
		return floodgate.Decision{RetryAfter: floodgate.Never}, err
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	return p.l.Peek(key), nil
}

// SetRule is the Limiter's SetRule, between two decisions.
func (p *policy) SetRule(r floodgate.Rule) error {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if err := p.l.SetRule(r); err != nil {
		return err
	}
	p.capacity = r.Capacity()
	return nil
}

// AppendCounts appends the Limiter's counts.
func (p *policy) AppendCounts(dst []counts.Sample) []counts.Sample { return p.l.AppendCounts(dst) }

// Close frees the policy's name; its clients' state goes with it.
func (p *policy) Close() error {
	p.s.mu.Lock()
	if !p.closed {
		p.closed = true
		delete(p.s.names, p.name)
	}
	p.s.mu.Unlock()
	return p.l.Close()
}

// AppendCounts appends nothing: the Store's policies count for
// themselves.
func (s *Store) AppendCounts(dst []counts.Sample) []counts.Sample { return dst }

// Decide decides asks together, all or nothing, as floodgate.Store's
// Decide says.
func (s *Store) Decide(ctx context.Context, asks []floodgate.Ask, each []floodgate.Decision) (floodgate.Decision, int, error) {
	refusal := floodgate.Decision{RetryAfter: floodgate.Never}
	if len(asks) == 0 || len(asks) > floodgate.MaxPolicies {
		return refusal, 0, fmt.Errorf("kitstore: Decide takes 1 to %d asks, got %d", floodgate.MaxPolicies, len(asks))
	}
	var ps [floodgate.MaxPolicies]*policy
	for i := range asks {
		p, ok := asks[i].Policy.(*policy)
		if !ok || p.s != s {
			return refusal, 0, errNotMine
		}
		ps[i] = p
	}
	if err := ctx.Err(); err != nil {
		return refusal, 0, err // the caller gave up: nothing decided
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var plan storekit.Plan
	err := plan.Prepare(len(asks),
		func(i, j int) bool { return ps[i] == ps[j] && asks[i].Key == asks[j].Key },
		func(i int) bool { return asks[i].Shadow },
		func(i int) int64 { return asks[i].N },
		func(i int) int64 { return ps[i].capacity })
	if err != nil {
		return refusal, 0, fmt.Errorf("kitstore: %w", err)
	}
	var buf [floodgate.MaxPolicies]floodgate.Decision
	all := buf[:len(asks)]
	live := -1 // the index in plan.Live of the ask that refused
	if plan.Refused >= 0 {
		for _, i := range plan.Live[:plan.NLive] {
			all[i] = ps[i].l.Peek(asks[i].Key) // refused before any charge
		}
	} else {
		live = decideLive(&plan, ps[:len(asks)], asks, all)
	}
	for i := range all {
		if f := int(plan.Of[i]); f != i {
			all[i] = all[f] // a repeat answers as the ask it repeats
		} else if plan.Bad[i] {
			all[i] = floodgate.Decision{Limit: ps[i].capacity, RetryAfter: floodgate.Never}
		}
	}
	refused := plan.Refusal(live)
	copy(each, all)
	return all[storekit.Verdict(asks, all, refused)], refused, nil
}

// decideLive decides plan's live asks, the enforced ones and then, if
// they all admitted and no shadow was Bad, the shadows: each group's
// asks reserve their cost in order, and the first that refuses ends its
// group, whose earlier asks give back what they reserved. It writes
// each live ask's answer to all (a Peek's for the asks that charged
// nothing and did not refuse) and returns the index in plan.Live of
// the ask that refused, or -1.
func decideLive(plan *storekit.Plan, ps []*policy, asks []floodgate.Ask, all []floodgate.Decision) int {
	var held [floodgate.MaxPolicies]floodgate.Reservation
	refused := -1
	for _, shadows := range [2]bool{false, true} {
		var group, at [floodgate.MaxPolicies]int // the group's asks, and their places in plan.Live
		m := 0
		for k, i := range plan.Live[:plan.NLive] {
			if plan.Shadow[i] == shadows {
				group[m], at[m] = int(i), k
				m++
			}
		}
		if refused >= 0 || shadows && plan.ShadowsRefused {
			for _, i := range group[:m] {
				all[i] = ps[i].l.Peek(asks[i].Key) // charged nothing
			}
			continue
		}
		for j, i := range group[:m] {
			held[i] = ps[i].l.Reserve(asks[i].Key, plan.Cost[i])
			all[i] = held[i].Decision()
			if all[i].Allowed {
				continue
			}
			for g := j - 1; g >= 0; g-- { // as if never taken
				if _, err := held[group[g]].Settle(0); err != nil {
					panic(fmt.Sprintf("kitstore: giving back a reservation: %v", err)) // an admitted one, settled once
				}
			}
			for g, o := range group[:m] {
				if g != j {
					all[o] = ps[o].l.Peek(asks[o].Key)
				}
			}
			refused = at[j]
			break
		}
	}
	return refused
}
