package policy

import (
	"errors"
	"fmt"
	"sort"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/internal/tally"
)

// This file makes Routes from their Specs (Builder): it checks each
// policy, and makes its policy on the Store, or keeps the one of the
// Routes that the new ones replace.

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
			if err := b.Store.CheckRule(sp.Algorithm, sp.Rule); err != nil {
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

// StoreName is the name of a policy on a Store: its route, its tier ("" for
// none) and its own name, which no two policies of a middleware share.
func StoreName(route, tier, name string) string {
	return route + "\x00" + tier + "\x00" + name
}
