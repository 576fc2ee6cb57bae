package memcachelimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/storekit"
)

// errNotMine is the error of an ask whose policy another Store made.
var errNotMine = errors.New("memcachelimit: an ask's policy is not one of this Store's")

// request is one call's asks and what the engine learns of them, on the
// caller's stack.
type request struct {
	asks  []floodgate.Ask
	ps    [maxAsks]*policy
	rl    [maxAsks]*ruled
	keys  [maxAsks]string // the memcached key of each ask that reads its state, else ""
	items [maxAsks]*memcache.Item
	all   [maxAsks]floodgate.Decision
}

// resolve fills r's policies and rules from asks.
func (s *Store) resolve(r *request, asks []floodgate.Ask) error {
	if len(asks) == 0 || len(asks) > maxAsks {
		return fmt.Errorf("memcachelimit: a call takes 1 to %d asks, got %d", maxAsks, len(asks))
	}
	r.asks = asks
	for i := range asks {
		p, ok := asks[i].Policy.(*policy)
		if !ok || p.s != s {
			return errNotMine
		}
		r.ps[i], r.rl[i] = p, p.cur.Load()
	}
	return nil
}

// Decide decides the asks together, all or nothing, as floodgate.Store's
// Decide says.
//
// It reads every ask's state in one round trip (a get of their keys),
// decides them in process with their Machines, the enforced asks in
// order and then the shadows, and writes only when the request is
// admitted: each charged key with a compare-and-swap of what it read (an
// add for a key memcached did not hold), one round trip each. A refusal
// writes nothing, so no replica ever sees a refused request's charge. A
// write that another replica's beat is read and decided again; if the
// ask now refuses, the keys that the request had written are given back
// (their Machine's Refund, by compare-and-swap), so the request is
// refused and keeps no charge.
//
// A crash of this process, or memcached failing, between a request's
// first write and its give-back leaves the written charges in place: the
// keys are charged for a request that was refused, which is stricter,
// never looser. No request is ever admitted over the limit.
func (s *Store) Decide(ctx context.Context, asks []floodgate.Ask, each []floodgate.Decision) (floodgate.Decision, int, error) {
	return s.decide(ctx, asks, each, nil)
}

// Reserve decides asks as Decide does, with checks for the asks whose N
// is 0, and records in h what each charged, for Settle (see
// floodgate.Settler).
func (s *Store) Reserve(ctx context.Context, asks []floodgate.Ask, each []floodgate.Decision, h *floodgate.Hold) (floodgate.Decision, int, error) {
	if h == nil {
		return floodgate.Decision{RetryAfter: floodgate.Never}, 0, errors.New("memcachelimit: Reserve needs a Hold")
	}
	*h = floodgate.Hold{}
	return s.decide(ctx, asks, each, h)
}

// decide is Decide, or with h Reserve.
func (s *Store) decide(ctx context.Context, asks []floodgate.Ask, each []floodgate.Decision, h *floodgate.Hold) (floodgate.Decision, int, error) {
	refusal := floodgate.Decision{RetryAfter: floodgate.Never}
	var r request
	if err := s.resolve(&r, asks); err != nil {
		return refusal, 0, err
	}
	// The asks that charge (with h, those whose N is not 0: the others
	// are checks), indexed into asks.
	var sx [maxAsks]int
	m := 0
	for i := range asks {
		if h == nil || asks[i].N != 0 {
			sx[m] = i
			m++
		}
	}
	var plan storekit.Plan
	if m > 0 {
		err := plan.Prepare(m,
			func(a, b int) bool { return r.ps[sx[a]] == r.ps[sx[b]] && asks[sx[a]].Key == asks[sx[b]].Key },
			func(a int) bool { return asks[sx[a]].Shadow },
			func(a int) int64 { return asks[sx[a]].N },
			func(a int) int64 { return r.rl[sx[a]].capacity })
		if err != nil {
			return refusal, 0, fmt.Errorf("memcachelimit: %w", err)
		}
	}
	if len(asks) == 1 && m == 1 && plan.NLive == 1 {
		return s.decideOne(ctx, &r, each, h)
	}
	// Every check and every live ask reads its state.
	for i := range asks {
		if h != nil && asks[i].N == 0 {
			r.keys[i] = r.ps[i].key(asks[i].Key)
		}
	}
	for _, a := range plan.Live[:plan.NLive] {
		i := sx[a]
		r.keys[i] = r.ps[i].key(asks[i].Key)
	}
	refused := -1
	var parts [maxAsks]floodgate.HoldPart
	o, err := s.guarded(ctx, func(t *trip) error {
		var err error
		refused, err = s.run(t, &r, &plan, sx[:m], h != nil, &parts)
		return err
	})
	all := r.all[:len(asks)]
	res := resAllowed
	switch o {
	case abandoned:
		s.results[resAbandoned].Add(1)
		return floodgate.Decision{Limit: r.rl[0].capacity}, 0, err
	case unreached:
		var ferr error
		refused, res, ferr = s.fallbackMany(ctx, &r, err, h)
		s.results[res].Add(1)
		copy(each, all)
		if ferr != nil {
			return all[refused], refused, ferr
		}
		return all[storekit.Verdict(asks, all, refused)], refused, nil
	}
	for _, i := range sx[:m] {
		if f := sx[plan.Of[indexIn(sx[:m], i)]]; f != i {
			all[i] = all[f]
		}
	}
	copy(each, all)
	admitted := refused < 0 || asks[refused].Shadow
	if !admitted {
		res = resDenied
	}
	s.results[res].Add(1)
	if h == nil {
		return all[storekit.Verdict(asks, all, refused)], refused, nil
	}
	h.N, h.Admitted, h.Parts = len(asks), admitted, parts
	if !admitted {
		return all[refused], refused, nil
	}
	return all[storekit.Owing(asks, all)], refused, nil
}

// decideOne is decide for one ask that charges and whose cost its
// policy can hold: in a group with the other requests for its key (see
// decideGrouped).
func (s *Store) decideOne(ctx context.Context, r *request, each []floodgate.Decision, h *floodgate.Hold) (floodgate.Decision, int, error) {
	a, rl := r.asks[0], r.rl[0]
	d, at, o, err := s.decideGrouped(ctx, r.ps[0].key(a.Key), rl, a.N, false, nil)
	switch o {
	case abandoned:
		s.results[resAbandoned].Add(1)
		return floodgate.Decision{Limit: rl.capacity}, 0, err
	case unreached:
		refused, res, ferr := s.fallbackMany(ctx, r, err, h)
		s.results[res].Add(1)
		copy(each, r.all[:1])
		return r.all[0], refused, ferr
	}
	refused, res := -1, resAllowed
	if !d.Allowed {
		refused, res = 0, resDenied
	}
	s.results[res].Add(1)
	if len(each) > 0 {
		each[0] = d
	}
	if h != nil {
		h.N, h.Admitted = 1, d.Allowed || a.Shadow
		if d.Allowed {
			h.Parts[0] = floodgate.HoldPart{N: a.N, At: at, Gen: rl.gen}
		}
	}
	return d, refused, nil
}

// indexIn is the index of v in xs.
func indexIn(xs []int, v int) int {
	for k, x := range xs {
		if x == v {
			return k
		}
	}
	return -1
}

// run decides r on memcached: it reads the states, decides in process,
// writes the charges, and returns the index in r.asks of the ask that
// refused (-1 for none), with every ask's answer in r.all but the
// repeats'; with hold, the charged asks' parts in parts. sx are the asks
// that plan was prepared over.
func (s *Store) run(t *trip, r *request, plan *storekit.Plan, sx []int, hold bool, parts *[maxAsks]floodgate.HoldPart) (int, error) {
	n := len(r.asks)
	if err := s.fetch(t, r.keys[:n], r.items[:n]); err != nil {
		return -1, err
	}
	now := s.set.clock.Now()
	all := r.all[:n]
	refused := -1
	// The checks first: a request of 1 each, charging nothing.
	for i := range r.asks {
		if !hold || r.asks[i].N != 0 {
			continue
		}
		d, err := r.rl[i].m.Peek(stateOf(r.items[i]), now)
		if err != nil {
			return -1, &keyError{err}
		}
		all[i] = d
		if !d.Allowed && (refused < 0 || r.asks[refused].Shadow && !r.asks[i].Shadow) {
			refused = i
		}
	}
	for a := range sx {
		if plan.Bad[a] {
			all[sx[a]] = floodgate.Decision{Limit: r.rl[sx[a]].capacity, RetryAfter: floodgate.Never}
		}
	}
	peekLive := func(only func(i int) bool) error {
		for _, a := range plan.Live[:plan.NLive] {
			i := sx[a]
			if only != nil && !only(i) {
				continue
			}
			d, err := r.rl[i].m.Peek(stateOf(r.items[i]), now)
			if err != nil {
				return &keyError{err}
			}
			all[i] = d
		}
		return nil
	}
	if len(sx) == 0 {
		return refused, nil // checks alone
	}
	if refused >= 0 && !r.asks[refused].Shadow || plan.Refused >= 0 {
		// An enforced check or a Bad enforced ask refused: nothing is
		// charged.
		if err := peekLive(nil); err != nil {
			return -1, err
		}
		if refused < 0 || r.asks[refused].Shadow {
			refused = sx[plan.Refusal(-1)]
		}
		return refused, nil
	}
	var next [maxAsks][]byte
	var at [maxAsks]int64
	var charged, rolled [maxAsks]bool // rolled: written, then given back
	var wr [maxAsks]int               // the asks written, of both groups
	nw := 0
	live := -1 // the index in plan.Live of the ask that refused
	for _, shadows := range [2]bool{false, true} {
		inGroup := func(i int) bool { return r.asks[i].Shadow == shadows }
		if live >= 0 || shadows && plan.ShadowsRefused {
			if err := peekLive(inGroup); err != nil {
				return -1, err
			}
			continue
		}
		// Decide the group in process, on the states read.
		for k, a := range plan.Live[:plan.NLive] {
			i := sx[a]
			if !inGroup(i) {
				continue
			}
			d, nx, g, err := r.rl[i].m.Take(stateOf(r.items[i]), now, plan.Cost[a], nil)
			if err != nil {
				return -1, &keyError{err}
			}
			all[i], next[i], at[i] = d, nx, g
			if !d.Allowed {
				live = k
				break
			}
		}
		if live >= 0 && inGroup(sx[plan.Live[live]]) {
			// The group refused: it writes nothing, and its other asks
			// answer as they stand.
			refusedAt := sx[plan.Live[live]]
			if err := peekLive(func(i int) bool { return inGroup(i) && i != refusedAt }); err != nil {
				return -1, err
			}
			continue
		}
		// Write the group, in order; a lost write is decided again.
		if s.beforeWrite != nil {
			s.beforeWrite()
		}
		var written [maxAsks]int
		w := 0
		for k, a := range plan.Live[:plan.NLive] {
			i := sx[a]
			if !inGroup(i) || next[i] == nil {
				if inGroup(i) {
					charged[i] = true // admitted with no change of state
				}
				continue
			}
			ok, err := s.commit(t, r, i, plan.Cost[a], &at[i])
			if err != nil {
				if cerr := t.ctx.Err(); cerr != nil && err == cerr {
					s.rollback(r, wr[:nw], plan, sx, at[:]) // the caller left: nothing stays
				}
				return -1, err
			}
			if !ok {
				live = k
				s.rollback(r, written[:w], plan, sx, at[:])
				for _, j := range written[:w] {
					charged[j], rolled[j] = false, true
				}
				break
			}
			charged[i] = true
			written[w], wr[nw] = i, i
			w++
			nw++
		}
		if live >= 0 && inGroup(sx[plan.Live[live]]) {
			refusedAt := sx[plan.Live[live]]
			for _, a := range plan.Live[:plan.NLive] {
				i := sx[a]
				if inGroup(i) && i != refusedAt && !rolled[i] {
					charged[i] = false
					d, err := r.rl[i].m.Peek(stateOf(r.items[i]), now)
					if err != nil {
						return -1, &keyError{err}
					}
					all[i] = d
				}
			}
		}
	}
	if hold {
		for _, a := range plan.Live[:plan.NLive] {
			if i := sx[a]; charged[i] {
				parts[i] = floodgate.HoldPart{N: plan.Cost[a], At: at[i], Gen: r.rl[i].gen}
			}
		}
	}
	lr := plan.Refusal(live)
	if lr >= 0 && (refused < 0 || !r.asks[sx[lr]].Shadow) {
		refused = sx[lr]
	}
	return refused, nil
}

// commit takes ask i's cost on its key in the key's group with the
// other requests for that key in this process (see decideGrouped): on
// the key's state as it is then, which the read that decided the
// request may no longer show (another replica, or another request of
// this one, wrote since; a round it leads alone writes over what it
// read, and reads again only when that write loses). It returns false, with the ask's refusal in
// r.all, when the key refuses now, and at is set to the grant's. A
// request of several asks so writes its busy keys at their groups'
// pace, one round trip pair a group, and holds no key while it waits
// on another.
func (s *Store) commit(t *trip, r *request, i int, cost int64, at *int64) (bool, error) {
	d, g, o, err := s.decideGrouped(t.ctx, r.keys[i], r.rl[i], cost, true, r.items[i])
	switch o {
	case abandoned:
		return false, err // the caller's context ended
	case unreached:
		return false, counted{err}
	}
	r.all[i] = d
	if !d.Allowed {
		return false, nil
	}
	*at = g
	return true, nil
}

// rollback gives back the grants of the asks written (indices into
// r.asks), each its cost at its at, within a Timeout of its own: their
// request was refused, or its caller left. Each key is read again and
// refunded by compare-and-swap; a key that cannot be (memcached
// failing) keeps its charge, which is stricter, never looser. Each
// rolled-back ask's answer becomes what its policy answers now.
func (s *Store) rollback(r *request, written []int, plan *storekit.Plan, sx []int, at []int64) {
	if len(written) == 0 {
		return
	}
	t := s.newTrip(context.Background())
	for _, i := range written {
		cost := plan.Cost[indexIn(sx, i)]
		rl := r.rl[i]
		for {
			it, err := s.reread(&t, r.keys[i])
			if err != nil {
				s.giveUp(err)
				break
			}
			now := s.set.clock.Now()
			_, nx, err := rl.m.Refund(stateOf(it), now, at[i], cost, nil)
			if err != nil {
				s.giveUp(&keyError{err})
				break
			}
			if nx == nil {
				if d, err := rl.m.Peek(stateOf(it), now); err == nil {
					r.all[i] = d
				}
				s.rolledB.Add(1)
				break
			}
			fresh, err := rl.m.Fresh(nx)
			if err != nil {
				s.giveUp(&keyError{err})
				break
			}
			ok, err := s.store(&t, r.keys[i], it, nx, expiry(fresh, now))
			if err != nil {
				s.giveUp(err)
				break
			}
			if ok {
				r.items[i] = nil // written: the item read is stale
				if d, err := rl.m.Peek(nx, now); err == nil {
					r.all[i] = d
				}
				s.rolledB.Add(1)
				break
			}
		}
	}
}

// giveUp counts a give-back that failed with err: its key keeps the
// charge.
func (s *Store) giveUp(err error) {
	s.failed(err)
	if s.set.onError != nil {
		s.set.onError(fmt.Errorf("memcachelimit: a charge could not be given back, and stays: %w", err))
	}
}
