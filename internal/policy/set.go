package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
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

	limits   *floodgate.Limits // in process
	enforced *floodgate.Limits // the enforced policies alone, when some but not all are shadow
	store    floodgate.Store   // on a Store, instead of limits
	sps      []floodgate.StorePolicy
	enfIdx   []int // enforced's k-th Limiter is policy enfIdx[k]
	shadow   []bool
	entries  []*Entry
	route    *Route
	// uncounted makes Decide skip its counts (Builder.Uncounted).
	uncounted bool
}

// Entry is one policy's Limiter and counts. It outlives the Set that made
// it when a replacement keeps its route, tier and name.
type Entry struct {
	// Spec is the policy as the latest Builder gave it.
	Spec Spec
	// L is the policy's Limiter, which holds its clients' state in
	// process; nil on a Store.
	L *floodgate.Limiter
	// SP is the policy on the Store, when there is one.
	SP    floodgate.StorePolicy
	label string        // the policy label: the name, or "tier/name"
	count *tally.Counts // entryDenied, entryShadow
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

// Decide decides one request for key, as its policies and their shadow
// switches say (on the Store, with ctx, all in its one round trip), and
// counts it under its Route: allowed when every policy
// admitted it; denied, under the refusing policy, when an enforced policy
// refused it; shadow_denied, under the policy that refused it, when only
// shadow policies would have. It reports whether to serve the request,
// and writes the refusal's answer to *refusal when not (nothing
// otherwise).
//
// A request that a shadow policy refuses is charged as enforcement would
// charge it: nothing anywhere (a refusal by Limits consumes nothing), and
// then, if some policies are enforced, by those alone, so that it is still
// refused if one of them refuses. each receives each policy's answer as
// Limits.Decide gives it, the enforced ones' from the charge that decided
// the request; with len(Names) entries or more, no Decision is copied
// whole on an admission in process. On a Store, its Decide does all this
// with ctx, in one round trip at most; a request whose caller gave up
// before the Store answered is refused, and counted by the Store alone
// (as abandoned).
func (s *Set) Decide(ctx context.Context, key string, n int64, each []floodgate.Decision, refusal *floodgate.Decision) (serve bool) {
	if len(each) < len(s.Names) {
		var buf [8]floodgate.Decision
		serve = s.Decide(ctx, key, n, buf[:len(s.Names)], refusal)
		copy(each, buf[:])
		return serve
	}
	if s.store != nil {
		return s.decideStore(ctx, key, n, each, refusal)
	}
	j := s.limits.DecideTo(key, n, each)
	if j >= 0 && s.shadow[j] && s.enforced != nil {
		// Only a shadow refused: charge the enforced policies alone.
		var buf [8]floodgate.Decision
		more := buf[:len(s.enfIdx)]
		e := s.enforced.DecideTo(key, n, more)
		for k, i := range s.enfIdx {
			each[i] = more[k]
		}
		if e >= 0 {
			j = s.enfIdx[e]
		}
	}
	serve = s.settle(j)
	if !serve {
		*refusal = each[j]
	}
	return serve
}

// settle counts a request that policy j refused, or that none did (j <
// 0), and says whether to serve it: allowed, under the route; denied,
// under j, if j is enforced; shadow_denied, under j, if it is a shadow.
func (s *Set) settle(j int) (serve bool) {
	switch {
	case j < 0:
		s.count(s.route.count, routeAllowed)
		return true
	case !s.shadow[j]:
		s.count(s.entries[j].count, entryDenied)
		return false
	}
	s.count(s.entries[j].count, entryShadow)
	return true
}

// decideStore is Decide on the Store. each goes to the Store through a
// pooled copy: a slice passed to an interface's method escapes, and each
// is the caller's stack array, which the in-process path keeps off the
// heap; a fresh copy would cost every request 384 bytes.
func (s *Set) decideStore(ctx context.Context, key string, n int64, each []floodgate.Decision, refusal *floodgate.Decision) bool {
	buf := decisions.Get().(*[8]floodgate.Decision)
	tmp := buf[:min(len(each), len(buf))]
	d, j, err := s.store.Decide(ctx, key, n, s.sps, s.shadow, tmp)
	copy(each, tmp)
	decisions.Put(buf)
	serve := err == nil && s.settle(j)
	if !serve {
		*refusal = d
	}
	return serve
}

// decisions are decideStore's buffers.
var decisions = sync.Pool{New: func() any { return new([8]floodgate.Decision) }}

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
	// Common is what every Limiter the Builder makes shares.
	Common Common
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
	e    *Entry
	rule floodgate.Rule
}

// NewBuilder returns a Builder for a middleware's routes; old are the
// Routes it replaces (none for a new middleware).
func NewBuilder(c Common, valid func(string) bool, showShadow bool, old []*Route) *Builder {
	b := &Builder{Common: c, Valid: valid, ShowShadow: showShadow,
		old: map[string]*Entry{}, oldCount: map[string]*tally.Counts{}, kept: map[*Entry]bool{}}
	for _, r := range old {
		b.oldCount[r.Name] = r.count
		for tier, s := range r.sets() {
			for _, e := range s.entries {
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
// is an error to give no policy or more than 8 to the route or a tier, a
// name that Valid refuses (a policy's or a tier's) or that comes twice, a
// rule that floodgate.New refuses, or, for a policy that a replacement
// keeps, a new algorithm (its clients' state could not be kept) or a rule
// that its SetRule refuses.
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
	s := &Set{route: r, uncounted: b.Uncounted, store: b.Common.Store}
	seen := make(map[string]bool, len(specs))
	ls := make([]*floodgate.Limiter, 0, len(specs))
	var enforced []*floodgate.Limiter
	for i, sp := range specs {
		if !b.Valid(sp.Name) {
			return nil, fmt.Errorf("policy name %q: %w", sp.Name, ErrName)
		}
		if seen[sp.Name] {
			return nil, fmt.Errorf("policy name %q used twice", sp.Name)
		}
		seen[sp.Name] = true
		e, err := b.entry(r.Name, tier, sp)
		if err != nil {
			return nil, err
		}
		s.Names = append(s.Names, sp.Name)
		s.Specs = append(s.Specs, sp)
		s.entries = append(s.entries, e)
		s.shadow = append(s.shadow, sp.Shadow)
		if e.SP != nil {
			s.sps = append(s.sps, e.SP)
		} else {
			ls = append(ls, e.L)
		}
		if !sp.Shadow {
			if e.L != nil {
				enforced = append(enforced, e.L)
			}
			s.enfIdx = append(s.enfIdx, i)
		}
		if !sp.Shadow || b.ShowShadow {
			s.Shown = append(s.Shown, i)
		}
	}
	if s.store != nil {
		if len(s.sps) > 8 {
			return nil, fmt.Errorf("%d policies: at most 8", len(s.sps))
		}
		return s, nil
	}
	var err error
	if s.limits, err = floodgate.NewLimits(ls...); err != nil {
		return nil, err
	}
	if len(enforced) > 0 && len(enforced) < len(ls) {
		if s.enforced, err = floodgate.NewLimits(enforced...); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// entry is the policy's Entry: the one a replacement keeps, or a new one.
func (b *Builder) entry(route, tier string, sp Spec) (*Entry, error) {
	label := sp.Name
	if tier != "" {
		label = tier + "/" + sp.Name
	}
	if e, ok := b.old[entryKey(route, tier, sp.Name)]; ok {
		if algorithmName(e.Spec.Algorithm) != algorithmName(sp.Algorithm) {
			return nil, fmt.Errorf("policy %q: its algorithm cannot change from %s to %s while serving: its clients' state would be lost (give it a new name to start it afresh)",
				sp.Name, algorithmName(e.Spec.Algorithm), algorithmName(sp.Algorithm))
		}
		if sp.Rule != e.Spec.Rule {
			// Check the change now, on a Limiter of its own (New, then
			// SetRule, which refuses what the kept one would), so that a
			// bad rule leaves every kept policy as it was; the kept one
			// takes it at Commit.
			probe, err := floodgate.New(floodgate.Config{Algorithm: sp.Algorithm, Rule: e.Spec.Rule})
			if err == nil {
				err = probe.SetRule(sp.Rule)
				probe.Close()
			}
			if err != nil {
				return nil, fmt.Errorf("policy %q: %w", sp.Name, err)
			}
			b.rules = append(b.rules, pendingRule{e, sp.Rule})
		}
		b.kept[e] = true
		kept := &Entry{Spec: sp, L: e.L, SP: e.SP, label: label, count: e.count}
		return kept, nil
	}
	e := &Entry{Spec: sp, label: label, count: tally.New(entryCounts)}
	if st := b.Common.Store; st != nil {
		p, err := st.Policy(StoreName(route, tier, sp.Name), sp.Algorithm, sp.Rule)
		if err != nil {
			return nil, fmt.Errorf("policy %q: %w", sp.Name, err)
		}
		e.SP = p
	} else {
		l, err := Build1(sp, b.Common)
		if err != nil {
			return nil, err
		}
		e.L = l
	}
	b.fresh = append(b.fresh, e)
	return e, nil
}

func algorithmName(a string) string {
	if a == "" {
		return floodgate.TokenBucket
	}
	return a
}

// StoreName is the name of a policy on a Store: its route, its tier ("" for
// none) and its own name, which no two policies of a middleware share.
func StoreName(route, tier, name string) string {
	return route + "\x00" + tier + "\x00" + name
}

// Closer is what holds a policy's clients' state: a floodgate.Limiter, or
// a policy on a Store.
type Closer interface{ Close() error }

// closer is e's Limiter or policy on a Store.
func (e *Entry) closer() Closer {
	if e.SP != nil {
		return e.SP
	}
	return e.L
}

// Abort closes the Limiters and Store policies the Builder made, after an
// error.
func (b *Builder) Abort() {
	for _, e := range b.fresh {
		e.closer().Close()
	}
}

// Commit gives each kept policy its new rule, by floodgate's SetRule
// (which Route checked it takes), and returns the Limiters of the replaced
// routes that no new route kept, for the caller to Close once the new
// routes serve. Between the first SetRule and the new routes' start, a
// request may meet a kept policy's new rule under the old routes: each
// policy's own decisions keep SetRule's contract throughout.
//
// It returns an error only if a SetRule refuses a rule that a Limiter of
// the same algorithm took in Route, which no built-in algorithm does; the
// policies before it have their new rules then.
func (b *Builder) Commit() ([]Closer, error) {
	for _, p := range b.rules {
		var err error
		if p.e.SP != nil {
			err = p.e.SP.SetRule(p.rule)
		} else {
			err = p.e.L.SetRule(p.rule)
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
// Limiters, or their policies on a Store.
func Closers(routes []*Route) []Closer {
	var all []Closer
	for _, r := range routes {
		for _, s := range r.sets() {
			for _, e := range s.entries {
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
		if e.SP != nil {
			dst = e.SP.AppendCounts(dst)
		} else {
			dst = e.L.AppendCounts(dst)
		}
		for i := from; i < len(dst); i++ {
			dst[i].Route, dst[i].Policy = route, e.label
		}
	}
	return dst
}
