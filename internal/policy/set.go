package policy

import (
	"context"
	"slices"
	"sync"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/tally"
)

// This file holds what a middleware keeps for a route (a Route, its Sets
// and their Entries), and how a Set decides a request by its rate
// policies and counts the answer.

// Route is what a middleware holds for one route (an httplimit pattern, a
// grpclimit method or service, or the Default): its policies, those of
// each tier, and the route's own counts. Routes are made by a Builder and
// never change; a middleware that replaces its routes makes new ones,
// which keep the counts and the clients' state of the routes and policies
// that keep their names.
type Route struct {
	// Name is the route's label in the metrics.
	Name  string
	base  *Set
	tiers map[string]*Set
	count *tally.Counts // routeAllowed, routeExempt
}

// The counters of a Route's tally, and of an Entry's.
const (
	routeAllowed = iota
	routeExempt
	routeCounts
)

const (
	entryDenied = iota
	entryShadow
	entryHeld // an in-flight policy's slots held now: up at Acquire, down at Release
	entryCounts
)

// Set is the policies one request is decided by: a Route's own, or one
// tier's.
type Set struct {
	// Names are the policies' names, in order.
	Names []string
	// Specs are the policies, in order.
	Specs []Spec
	// Shown are the indices of the policies that the answer's headers
	// describe: the enforced ones, or all with Builder.ShowShadow.
	Shown []int
	// Header is the middleware's own, made once per Set: httplimit's
	// RateLimit-Policy value for the Shown policies.
	Header []string
	// Items is the middleware's own, made once per Set: for each Shown
	// policy, in order, the fixed start of its item in httplimit's
	// RateLimit value, so that an answer only appends the numbers.
	Items []string

	store   floodgate.Store
	local   *floodgate.LocalStore // store, when it is one: called directly, its arguments kept on the stack
	settler floodgate.Settler     // store, when a policy is After (see Reserve)
	asks    []floodgate.Ask       // each policy's, with its shadow switch; a request sets the key and cost
	entries []*Entry
	slots   []*Entry // the in-flight policies, in order (see Acquire)
	route   *Route
	// uncounted makes Decide skip its counts (Builder.Uncounted).
	uncounted bool
}

// Entry is one policy on the Store, and its counts. It outlives the Set
// that made it when a replacement keeps its route, tier and name.
type Entry struct {
	// Spec is the policy as the latest Builder gave it.
	Spec Spec
	// SP is the policy on the Store, which holds its clients' state; nil
	// for an in-flight policy.
	SP floodgate.StorePolicy
	// Slots is an in-flight policy on the Store; nil for a rate policy.
	Slots floodgate.SlotPolicy
	label string        // the policy label: the name, or "tier/name"
	count *tally.Counts // entryDenied, entryShadow, entryHeld
}

// For returns the Set for a request in tier ("" for none): the tier's
// own, or the Route's when the tier has none.
func (r *Route) For(tier string) *Set {
	if tier != "" && r.tiers != nil {
		if s, ok := r.tiers[tier]; ok {
			return s
		}
	}
	return r.base
}

// Exempt counts one request let through by an exemption.
func (r *Route) Exempt() { r.count.Inc(routeExempt) }

// Decide decides one request of cost n for key by the Set's policies
// together, on the Store, as their shadow switches say (see
// floodgate.Store's Decide), and counts it under its Route: allowed when
// every policy admitted it; denied, under the refusing policy, when an
// enforced policy refused it; shadow_denied, under the policy that
// refused it, when only shadow policies would have. It reports whether
// to serve the request, and writes the refusal's answer to *refusal
// when not (nothing otherwise). each receives each policy's answer (see
// floodgate.Store's Decide). A request whose caller gave up before the
// Store answered is refused, and counted by the Store alone (as
// abandoned).
func (s *Set) Decide(ctx context.Context, key string, n int64, each []floodgate.Decision, refusal *floodgate.Decision) (serve bool) {
	if len(s.asks) == 0 { // in-flight policies only: Acquire decided
		return s.verdict(-1)
	}
	var d floodgate.Decision
	var j int
	var err error
	if s.local != nil {
		var asks [floodgate.MaxPolicies]floodgate.Ask
		d, j, err = s.local.Decide(ctx, s.fill(asks[:], key, n), each)
	} else {
		// A slice passed to an interface's method escapes: the asks and
		// answers go through a pooled scratch, where a fresh one would
		// cost every request some 700 bytes.
		sc := scratches.Get().(*scratch)
		all := sc.each[:min(len(each), len(sc.each))]
		d, j, err = s.store.Decide(ctx, s.fill(sc.asks[:], key, n), all)
		copy(each, all)
		scratches.Put(sc)
	}
	serve = err == nil && s.verdict(j)
	if !serve {
		*refusal = d
	}
	return serve
}

// fill writes the Set's asks for a request of cost n from key into buf,
// and returns them.
func (s *Set) fill(buf []floodgate.Ask, key string, n int64) []floodgate.Ask {
	asks := buf[:len(s.asks)]
	copy(asks, s.asks)
	for i := range asks {
		asks[i].Key, asks[i].N = key, n
	}
	return asks
}

// verdict counts a request that policy j refused, or that none did (j <
// 0), and says whether to serve it: allowed, under the route; denied,
// under j, if j is enforced; shadow_denied, under j, if it is a shadow.
func (s *Set) verdict(j int) (serve bool) {
	switch {
	case j < 0:
		s.count(s.route.count, routeAllowed)
		return true
	case !s.asks[j].Shadow:
		s.count(s.entries[j].count, entryDenied)
		return false
	}
	s.count(s.entries[j].count, entryShadow)
	return true
}

// scratch is a request's asks and answers on a Store other than a
// LocalStore.
type scratch struct {
	asks [floodgate.MaxPolicies]floodgate.Ask
	each [floodgate.MaxPolicies]floodgate.Decision
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// count adds one to counter i of c, unless s is uncounted.
func (s *Set) count(c *tally.Counts, i int) {
	if !s.uncounted {
		c.Inc(i)
	}
}

// Shows reports whether the headers describe any policy of s.
func (s *Set) Shows() bool { return len(s.Shown) > 0 }

// all returns the Set's rate policies, then its in-flight ones.
func (s *Set) all() []*Entry {
	if len(s.slots) == 0 {
		return s.entries
	}
	return append(slices.Clip(s.entries), s.slots...)
}

// Sets returns the Route's Sets by tier ("" for its own).
func (r *Route) Sets() map[string]*Set { return r.sets() }

func (r *Route) sets() map[string]*Set {
	m := map[string]*Set{"": r.base}
	for t, s := range r.tiers {
		m[t] = s
	}
	return m
}
