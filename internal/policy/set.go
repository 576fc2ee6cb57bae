package policy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/internal/tally"
)

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

// closer is what holds the entry's clients' state.
func (e *Entry) closer() Closer {
	if e.Slots != nil {
		return e.Slots
	}
	return e.SP
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

// Slotted reports whether s has in-flight policies: a request must take
// their slots with Acquire before Decide, and give them back when it
// ends.
func (s *Set) Slotted() bool { return len(s.slots) > 0 }

// Acquire takes a slot of key from each of the Set's in-flight policies,
// into h, before its rate policies decide the request (Decide or
// Reserve, which do not count it again): all or nothing, so that a
// request that any enforced in-flight policy refuses holds no slot, and
// is charged by no rate policy. A shadow policy that has no slot free
// counts the request as shadow_denied and lets it pass without one.
// It reports whether to go on, and writes the refusal to *refusal when
// not: its Limit is the policy's, Remaining 0, and RetryAfter and
// ResetAfter the policy's RetryAfter. The refusal is counted as denied
// under the policy; a caller gone before the Store answered is counted
// by the Store alone. A request refused afterwards, by a rate policy or
// another route, must Release h; one served Releases it when it ends.
func (s *Set) Acquire(ctx context.Context, key string, h *Held, refusal *floodgate.Decision) bool {
	for _, e := range s.slots {
		slot, ok, err := e.Slots.Acquire(ctx, key)
		switch {
		case ok:
			h.add(slot, e, s.uncounted)
			continue
		case err == nil && e.Spec.Shadow:
			s.count(e.count, entryShadow)
			continue
		case err == nil:
			s.count(e.count, entryDenied)
		}
		h.Release()
		wait := cmp.Or(e.Spec.RetryAfter, DefaultRetryAfter)
		*refusal = floodgate.Decision{Limit: int64(e.Slots.Limit()), RetryAfter: wait, ResetAfter: wait}
		return false
	}
	return true
}

// Held is the slots a request took (Set.Acquire), for as long as it
// runs: its zero value holds none. It is not safe for concurrent use.
type Held struct {
	n       int
	slots   [2 * floodgate.MaxPolicies]floodgate.Slot // two Sets, for a request that two routes decide
	entries [2 * floodgate.MaxPolicies]*Entry         // nil where the gauge is not counted
}

func (h *Held) add(slot floodgate.Slot, e *Entry, uncounted bool) {
	if uncounted {
		e = nil
	} else {
		e.count.Add(entryHeld, 1)
	}
	h.slots[h.n], h.entries[h.n] = slot, e
	h.n++
}

// Release gives back every slot h holds, once: a second Release gives
// back nothing, nor does Release of a nil Held.
func (h *Held) Release() {
	if h == nil {
		return
	}
	for i := range h.n {
		h.slots[i].Release() // false for a slot that holds nothing (a Store's FailOpen): counted all the same
		if h.entries[i] != nil {
			h.entries[i].count.Add(entryHeld, -1)
		}
		h.slots[i], h.entries[i] = floodgate.Slot{}, nil
	}
	h.n = 0
}

// Len returns the number of slots h holds.
func (h *Held) Len() int { return h.n }

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

// MaxCost is the most one request is charged for an After policy: a
// larger cost counts as MaxCost (see ParseCost).
const MaxCost = 1 << 52

// ParseCost is the cost that a header's or a metadata key's values carry:
// one non-negative decimal integer (a value past MaxCost counts as
// MaxCost); else old, as if none were carried.
func ParseCost(vs []string, old int64) int64 {
	if len(vs) != 1 {
		return old
	}
	v := strings.TrimSpace(vs[0])
	if v == "" || v[0] < '0' || v[0] > '9' { // no sign
		return old
	}
	c, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return MaxCost
		}
		return old
	}
	return int64(min(c, MaxCost))
}

// Reported is the sum of the costs a request's handler reported, at most
// MaxCost, safe for concurrent use. Its zero value holds no report.
type Reported struct{ v atomic.Int64 } // the sum plus 1; 0 for none

// Add adds cost, 0 or more, to the sum.
func (r *Reported) Add(cost int64) {
	for {
		old := r.v.Load()
		if r.v.CompareAndSwap(old, min(max(old-1, 0)+min(cost, MaxCost), MaxCost)+1) {
			return
		}
	}
}

// Load returns the sum, or -1 if nothing was reported.
func (r *Reported) Load() int64 { return r.v.Load() - 1 }

// settle is one Settle, at costs.
func (s *Set) settle(ctx context.Context, key string, n int64, costs []int64, h *floodgate.Hold) error {
	var err error
	if s.local != nil {
		var asks [floodgate.MaxPolicies]floodgate.Ask
		_, err = s.local.Settle(ctx, s.fillAfter(asks[:], key, n, costs), h, nil)
	} else {
		sc := scratches.Get().(*scratch)
		_, err = s.settler.Settle(ctx, s.fillAfter(sc.asks[:], key, n, costs), h, nil)
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

// Builder makes Routes, keeping the state of what a replacement keeps: a
// policy with the same route, tier, name and algorithm keeps its Limiter
// (and its clients' state), whatever its Shadow switch, and takes a new
// rule by SetRule, under which no client gains allowance; a route with
// the same name keeps its counts.
type Builder struct {
	// Store holds every policy the Builder makes.
	Store floodgate.Store
	// Valid says whether a policy or tier name is allowed.
	Valid func(string) bool
	// ShowShadow makes the headers describe shadow policies too.
	ShowShadow bool
	// Uncounted makes every Set the Builder makes skip its counts in
	// Decide, so that the benchmark harness can measure what counting
	// costs a request. Only a middleware built through
	// testhook.Uncounted sets it; each Set carries it, so one
	// middleware's switch leaves every other's counts alone.
	Uncounted bool

	old      map[string]*Entry
	oldCount map[string]*tally.Counts
	kept     map[*Entry]bool
	fresh    []*Entry
	rules    []pendingRule
}

// pendingRule is a kept policy's new rule, which Commit gives it.
type pendingRule struct {
	e     *Entry
	rule  floodgate.Rule
	limit int // an in-flight policy's new limit, instead of rule
}

// all returns the Set's rate policies, then its in-flight ones.
func (s *Set) all() []*Entry {
	if len(s.slots) == 0 {
		return s.entries
	}
	return append(slices.Clip(s.entries), s.slots...)
}

// NewBuilder returns a Builder for a middleware's routes, whose policies
// store holds; old are the Routes it replaces (none for a new
// middleware).
func NewBuilder(store floodgate.Store, valid func(string) bool, showShadow bool, old []*Route) *Builder {
	b := &Builder{Store: store, Valid: valid, ShowShadow: showShadow,
		old: map[string]*Entry{}, oldCount: map[string]*tally.Counts{}, kept: map[*Entry]bool{}}
	for _, r := range old {
		b.oldCount[r.Name] = r.count
		for tier, s := range r.sets() {
			for _, e := range s.all() {
				b.old[entryKey(r.Name, tier, e.Spec.Name)] = e
			}
		}
	}
	return b
}

func entryKey(route, tier, name string) string { return route + "\x00" + tier + "\x00" + name }

// ErrName is wrapped by the error of a policy or tier name that
// Builder.Valid refuses, so that a middleware can say what a name may be.
var ErrName = errors.New("not a valid name")

// Route makes the named route with its own policies and each tier's. It
// is an error to give no policy or more than floodgate.MaxPolicies to the
// route or a tier, a name that Valid refuses (a policy's or a tier's) or
// that comes twice, a rule that the Store refuses, or, for a policy that
// a replacement keeps, a new algorithm (its clients' state could not be
// kept) or a rule that its SetRule would refuse.
func (b *Builder) Route(name string, base []Spec, tiers map[string][]Spec) (*Route, error) {
	r := &Route{Name: name, count: b.oldCount[name]}
	if r.count == nil {
		r.count = tally.New(routeCounts)
	}
	var err error
	if r.base, err = b.set(r, "", base); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(tiers))
	for t := range tiers {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		if !b.Valid(t) {
			return nil, fmt.Errorf("tier name %q: %w", t, ErrName)
		}
		s, err := b.set(r, t, tiers[t])
		if err != nil {
			return nil, fmt.Errorf("tier %q: %w", t, err)
		}
		if r.tiers == nil {
			r.tiers = map[string]*Set{}
		}
		r.tiers[t] = s
	}
	return r, nil
}

func (b *Builder) set(r *Route, tier string, specs []Spec) (*Set, error) {
	if len(specs) == 0 {
		return nil, errors.New("no policies")
	}
	if len(specs) > floodgate.MaxPolicies {
		return nil, fmt.Errorf("%d policies: at most %d", len(specs), floodgate.MaxPolicies)
	}
	s := &Set{route: r, uncounted: b.Uncounted, store: b.Store}
	s.local, _ = b.Store.(*floodgate.LocalStore)
	seen := make(map[string]bool, len(specs))
	for _, sp := range specs {
		if !b.Valid(sp.Name) {
			return nil, fmt.Errorf("policy name %q: %w", sp.Name, ErrName)
		}
		if sp.After {
			settler, ok := b.Store.(floodgate.Settler)
			if !ok {
				return nil, fmt.Errorf("policy %q: its cost is known after the request, which needs a Store that is a floodgate.Settler; %T is not", sp.Name, b.Store)
			}
			if sp.Estimate < 0 || sp.Rule.Validate() == nil && sp.Estimate > sp.Rule.Capacity() {
				return nil, fmt.Errorf("policy %q: an Estimate of %d: want 0 (a check) to the rule's capacity, %d", sp.Name, sp.Estimate, sp.Rule.Capacity())
			}
			s.settler = settler
		} else if sp.Estimate != 0 {
			return nil, fmt.Errorf("policy %q: an Estimate is for a policy whose cost is known after the request (After)", sp.Name)
		}
		if seen[sp.Name] {
			return nil, fmt.Errorf("policy name %q used twice", sp.Name)
		}
		seen[sp.Name] = true
		if sp.InFlight != 0 || sp.RetryAfter != 0 {
			if err := b.checkSlots(sp); err != nil {
				return nil, fmt.Errorf("policy %q: %w", sp.Name, err)
			}
			e, err := b.slotEntry(r.Name, tier, sp)
			if err != nil {
				return nil, err
			}
			s.slots = append(s.slots, e)
			continue
		}
		e, err := b.entry(r.Name, tier, sp)
		if err != nil {
			return nil, err
		}
		i := len(s.Names)
		s.Names = append(s.Names, sp.Name)
		s.Specs = append(s.Specs, sp)
		s.entries = append(s.entries, e)
		s.asks = append(s.asks, floodgate.Ask{Policy: e.SP, Shadow: sp.Shadow})
		if !sp.Shadow || b.ShowShadow {
			s.Shown = append(s.Shown, i)
		}
	}
	return s, nil
}

// checkSlots checks an in-flight policy's spec: a limit in range, a wait
// of 0 or more, and nothing of a rate policy.
func (b *Builder) checkSlots(sp Spec) error {
	switch {
	case sp.InFlight < 1 || sp.InFlight > inflight.MaxLimit:
		return fmt.Errorf("an in-flight limit of %d: want 1 to %d requests of a client at once", sp.InFlight, inflight.MaxLimit)
	case sp.RetryAfter < 0:
		return fmt.Errorf("a RetryAfter of %v: want 0 (a second) or more", sp.RetryAfter)
	case sp.Rule != floodgate.Rule{} || sp.Algorithm != "" || sp.After || sp.Estimate != 0 || sp.CostKey != "":
		return errors.New("an in-flight limit (InFlight) has no Rule, Algorithm, After, Estimate or cost: make a policy of each kind")
	}
	if _, ok := b.Store.(floodgate.SlotStore); !ok {
		return fmt.Errorf("an in-flight limit needs a Store that is a floodgate.SlotStore; %T is not", b.Store)
	}
	return nil
}

// slotEntry is the in-flight policy's Entry: the one a replacement keeps,
// or a new one.
func (b *Builder) slotEntry(route, tier string, sp Spec) (*Entry, error) {
	label := sp.Name
	if tier != "" {
		label = tier + "/" + sp.Name
	}
	if e, ok := b.old[entryKey(route, tier, sp.Name)]; ok {
		if e.Slots == nil {
			return nil, fmt.Errorf("policy %q: it cannot change from a rate limit to an in-flight limit while serving (give it a new name)", sp.Name)
		}
		if sp.InFlight != e.Spec.InFlight {
			b.rules = append(b.rules, pendingRule{e: e, limit: sp.InFlight})
		}
		b.kept[e] = true
		return &Entry{Spec: sp, Slots: e.Slots, label: label, count: e.count}, nil
	}
	p, err := b.Store.(floodgate.SlotStore).SlotPolicy(StoreName(route, tier, sp.Name), sp.InFlight)
	if err != nil {
		return nil, fmt.Errorf("policy %q: %w", sp.Name, err)
	}
	e := &Entry{Spec: sp, Slots: p, label: label, count: tally.New(entryCounts)}
	b.fresh = append(b.fresh, e)
	return e, nil
}

// entry is the policy's Entry: the one a replacement keeps, or a new one.
func (b *Builder) entry(route, tier string, sp Spec) (*Entry, error) {
	label := sp.Name
	if tier != "" {
		label = tier + "/" + sp.Name
	}
	if e, ok := b.old[entryKey(route, tier, sp.Name)]; ok {
		if e.Slots != nil {
			return nil, fmt.Errorf("policy %q: it cannot change from an in-flight limit to a rate limit while serving (give it a new name)", sp.Name)
		}
		if algorithmName(e.Spec.Algorithm) != algorithmName(sp.Algorithm) {
			return nil, fmt.Errorf("policy %q: its algorithm cannot change from %s to %s while serving: its clients' state would be lost (give it a new name to start it afresh)",
				sp.Name, algorithmName(e.Spec.Algorithm), algorithmName(sp.Algorithm))
		}
		if sp.Rule != e.Spec.Rule {
			// Check the change now, so that a bad rule leaves every kept
			// policy as it was; the kept one takes it at Commit.
			if err := b.Store.Check(sp.Algorithm, sp.Rule); err != nil {
				return nil, fmt.Errorf("policy %q: %w", sp.Name, err)
			}
			b.rules = append(b.rules, pendingRule{e: e, rule: sp.Rule})
		}
		b.kept[e] = true
		kept := &Entry{Spec: sp, SP: e.SP, label: label, count: e.count}
		return kept, nil
	}
	e := &Entry{Spec: sp, label: label, count: tally.New(entryCounts)}
	p, err := b.Store.Policy(StoreName(route, tier, sp.Name), sp.Algorithm, sp.Rule)
	if err != nil {
		return nil, fmt.Errorf("policy %q: %w", sp.Name, err)
	}
	e.SP = p
	b.fresh = append(b.fresh, e)
	return e, nil
}

// LocalFor returns store, or, when it is nil, a new LocalStore of the
// middleware's in-process settings, which the middleware owns and closes
// (own is nil otherwise).
func LocalFor(store floodgate.Store, clock floodgate.Clock, maxKeys int, idleTTL time.Duration) (s floodgate.Store, own *floodgate.LocalStore) {
	if store != nil {
		return store, nil
	}
	own = floodgate.NewLocalStore(floodgate.LocalStoreConfig{Clock: clock, MaxKeys: maxKeys, IdleTTL: idleTTL})
	return own, own
}

// Remote reports whether store keeps its state outside this process: a
// face then marks each request's context (see internal/outage), so that
// the request's calls wait on a store that does not answer once.
func Remote(store floodgate.Store) bool {
	_, local := store.(*floodgate.LocalStore)
	return !local
}

// StoreName is the name of a policy on a Store: its route, its tier ("" for
// none) and its own name, which no two policies of a middleware share.
func StoreName(route, tier, name string) string {
	return route + "\x00" + tier + "\x00" + name
}

// Closer is what holds a policy's clients' state: its policy on the
// Store.
type Closer interface{ Close() error }

// Abort closes the Store policies the Builder made, after an error.
func (b *Builder) Abort() {
	for _, e := range b.fresh {
		e.closer().Close()
	}
}

// Commit gives each kept policy its new rule, by its SetRule (which Route
// checked it takes), and returns the policies of the replaced routes that
// no new route kept, for the caller to Close once the new routes serve. Between the first SetRule and the new routes' start, a
// request may meet a kept policy's new rule under the old routes: each
// policy's own decisions keep SetRule's contract throughout.
//
// It returns an error only if a SetRule refuses a rule that the Store's
// Check took in Route; the policies before it have their new rules then.
func (b *Builder) Commit() ([]Closer, error) {
	for _, p := range b.rules {
		var err error
		if p.e.Slots != nil {
			err = p.e.Slots.SetLimit(p.limit)
		} else {
			err = p.e.SP.SetRule(p.rule)
		}
		if err != nil {
			return nil, fmt.Errorf("policy %q: %w", p.e.Spec.Name, err)
		}
	}
	var retired []Closer
	for _, e := range b.old {
		if !b.kept[e] {
			retired = append(retired, e.closer())
		}
	}
	return retired, nil
}

// Closers returns what holds the state of every policy of routes: their
// policies on the Store.
func Closers(routes []*Route) []Closer {
	var all []Closer
	for _, r := range routes {
		for _, s := range r.sets() {
			for _, e := range s.all() {
				all = append(all, e.closer())
			}
		}
	}
	return all
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

// AppendCounts appends the Route's counts (see package counts): its
// requests by result, the denials and shadow denials by policy, and each
// policy's keys and evictions, with the route and policy labels set. The
// series come in the same order on every call.
func (r *Route) AppendCounts(dst []counts.Sample) []counts.Sample {
	dst = append(dst,
		counts.Sample{Metric: counts.Requests, Route: r.Name, Label: counts.Allowed, Value: r.count.Value(routeAllowed)},
		counts.Sample{Metric: counts.Requests, Route: r.Name, Label: counts.Exempt, Value: r.count.Value(routeExempt)})
	tiers := make([]string, 0, len(r.tiers))
	for t := range r.tiers {
		tiers = append(tiers, t)
	}
	slices.Sort(tiers)
	dst = r.base.appendCounts(dst)
	for _, t := range tiers {
		dst = r.tiers[t].appendCounts(dst)
	}
	return dst
}

func (s *Set) appendCounts(dst []counts.Sample) []counts.Sample {
	route := s.route.Name
	for _, e := range s.entries {
		dst = append(dst,
			counts.Sample{Metric: counts.Requests, Route: route, Policy: e.label, Label: counts.Denied, Value: e.count.Value(entryDenied)},
			counts.Sample{Metric: counts.Requests, Route: route, Policy: e.label, Label: counts.ShadowDenied, Value: e.count.Value(entryShadow)})
		from := len(dst)
		dst = e.SP.AppendCounts(dst)
		for i := from; i < len(dst); i++ {
			dst[i].Route, dst[i].Policy = route, e.label
		}
	}
	for _, e := range s.slots {
		dst = append(dst,
			counts.Sample{Metric: counts.Requests, Route: route, Policy: e.label, Label: counts.Denied, Value: e.count.Value(entryDenied)},
			counts.Sample{Metric: counts.Requests, Route: route, Policy: e.label, Label: counts.ShadowDenied, Value: e.count.Value(entryShadow)},
			counts.Sample{Metric: counts.InFlight, Route: route, Policy: e.label, Value: e.count.Value(entryHeld)})
		from := len(dst)
		dst = e.Slots.AppendCounts(dst)
		for i := from; i < len(dst); i++ {
			dst[i].Route, dst[i].Policy = route, e.label
		}
	}
	return dst
}
