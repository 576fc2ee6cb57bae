package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/internal/clientip"
	"github.com/floodgate-go/floodgate/internal/outage"
	"github.com/floodgate-go/floodgate/internal/policy"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// Policy is one named limit of a Route (see floodgate.Policy, which
// says what each field means). Its CostHeader names a response header or
// trailer, declared in the Trailer header or set with
// http.TrailerPrefix for a cost known only at the end of a streamed
// body; it is read and removed when the handler writes its header, and
// again when it returns. A request's RateLimit headers describe the
// state before its own cost; the next request's show it.
type Policy = floodgate.Policy

// Route is an endpoint with limits of its own.
type Route struct {
	// Pattern is an http.ServeMux pattern: "[METHOD ][HOST]/[PATH]".
	Pattern string
	// Policies are the route's limits, all of which must admit a request:
	// at least one, at most floodgate.MaxPolicies (8).
	Policies []Policy
	// Tiers are the route's policies for each tier that Config.Tier puts
	// a request in (1 to floodgate.MaxPolicies each, tier names as
	// policy names are). A
	// request in a tier not here, or with no Config.Tier, is limited by
	// Policies. Each tier's policies keep their own clients' state.
	Tiers map[string][]Policy
}

// Config configures a Limiter. The zero value of every field but Routes
// and Default is a working default.
type Config struct {
	// Routes are the limited endpoints. A request matches the Route whose
	// pattern http.ServeMux would choose for its clean path (see Handler).
	Routes []Route
	// Default limits the requests that no Route matches; nil lets them
	// through without a limit or headers. Default has no tiers: a Route
	// with Pattern "/" matches every request that no other Route does
	// (leaving Default nothing), and its Tiers then apply to all of them.
	Default []Policy
	// TrustedProxies are the CIDR prefixes ("10.0.0.0/8", "::1/128") of
	// the proxies whose ProxyHeader is believed. None by default: the
	// header is then ignored.
	TrustedProxies []string
	// ProxyHeader names the header that trusted proxies write the
	// client's address into: "X-Forwarded-For" (the default, "" too), the
	// de facto list to which each proxy appends the address it received
	// the request from, or "Forwarded", RFC 7239's header, each proxy
	// appending an element whose for= parameter is that address; any
	// other is an error (matched without regard to case). Only one is
	// read: a client behind a proxy that sets one of them could
	// otherwise send the other with an address of its choosing.
	ProxyHeader string
	// IPv6Prefix is the prefix length by which IPv6 clients are grouped,
	// 1 to 128; 0 means 64, the block one subscriber usually holds.
	IPv6Prefix int
	// Key, if set, returns the key of a request, given the client address
	// the middleware found (say, to key by an API key or a user, or by
	// both): the limits then apply per key. It must not return keys of the
	// client's own choosing without bound if the limit is a security
	// control; the Store's MaxKeys (floodgate.LocalStoreConfig's, by
	// default a 64 MiB bound per policy) bounds what a flood of them can
	// cost.
	Key func(r *http.Request, client string) string
	// Deny writes the answer to a refused request. The RateLimit headers
	// and Retry-After are set when it is called. nil writes 429 Too Many
	// Requests with a short plain-text body.
	Deny func(w http.ResponseWriter, r *http.Request, d floodgate.Decision)
	// LegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (the Unix time, in seconds, at which the most
	// restrictive policy is full again) to every limited answer.
	LegacyHeaders bool
	// Store, if set, keeps every policy's clients' state outside this
	// process, so that every replica of the service that shares it shares
	// one limit per client: redislimit.NewStore makes one on Redis. nil
	// keeps them in process, on a floodgate.LocalStore that the
	// middleware makes with LocalStoreConfig's defaults (the system clock,
	// a 64 MiB bound per policy, idle clients forgotten after a minute)
	// and closes at Close: pass floodgate.NewLocalStore's for another
	// clock or bound (and close it after the middleware). On a Store each
	// request is decided by all of its route's policies together in one
	// round trip at most (none, in a Store's lease mode, while the
	// client's leases last), with every guarantee of the in-process
	// middleware; the clock and the bounds are then the Store's. A request whose context ends before the
	// Store answers is refused (its client is gone), and counted by the
	// Store, not here. A request waits on a Store that does not answer
	// once: its first call that finds the Store unreachable marks the
	// request, and the Store's failure mode answers the others (its
	// in-flight slots, its rates, a second route's) at once. The Store's
	// own counts are its own counts.Source.
	Store floodgate.Store
	// Shadow makes every policy a shadow (see Policy.Shadow): nothing is
	// refused, and what enforcement would have refused is counted as
	// shadow_denied, request for request.
	Shadow bool
	// ShadowHeaders sends the RateLimit headers of shadow policies too.
	// Without it the headers describe only the enforced policies, so
	// that a dry run changes no answer a client sees.
	ShadowHeaders bool
	// Tier, if set, returns the tier of a request, given the key it is
	// counted under (Client's answer), and so chooses its Route's Tiers.
	// Decide it from what the server has authenticated (a verified API
	// key, a session), never from a header the client writes: a client
	// that can name its tier chooses its own limit.
	Tier func(r *http.Request, client string) string
	// Exempt, if set, lets a request it returns true for through
	// unlimited, uncharged and without headers, and counts it as exempt
	// (health checks, internal callers). Like Tier, it is a bypass if a
	// client can make it true: decide it from the connection (a trusted
	// address, mTLS), not from what the client sends.
	Exempt func(r *http.Request) bool

	// uncounted makes the middleware keep no per-route or per-policy
	// counts. Only testhook.Uncounted sets it, for the benchmark harness
	// to measure what counting costs a request.
	uncounted bool
}

// Limiter is the middleware. It is safe for concurrent use.
type Limiter struct {
	table   atomic.Pointer[table] // the routes now; SetRoutes replaces it
	clients clientip.Finder
	header  string // the proxy header's canonical name
	key     func(*http.Request, string) string
	deny    func(http.ResponseWriter, *http.Request, floodgate.Decision)
	tier    func(*http.Request, string) string
	exempt  func(*http.Request) bool
	legacy  bool
	shadow  bool // Config.Shadow
	show    bool // Config.ShadowHeaders
	store   floodgate.Store
	own     *floodgate.LocalStore // the Store in process, when Config gave none
	remote  bool                  // the Store is not in process: a request's calls share an outage mark
	// uncounted is Config.uncounted, which every Builder of the
	// middleware's routes carries.
	uncounted bool

	mu     sync.Mutex // serialises SetRoutes and Close
	closed bool
}

// table is the routes a Limiter serves with: its own ServeMux, which only
// matches and never serves, and each route's policies.
type table struct {
	mux    *http.ServeMux
	routes []*route
	deflt  *route
	all    []*policy.Route // routes, then deflt: what AppendCounts reports
}

// route is one Route's policies (or the Default's), each Set's
// RateLimit-Policy header made once in its Header: net/http never writes
// into a value slice, it replaces it, so every answer shares it.
type route = policy.Route

// New validates cfg and returns the middleware. Every error names what is
// wrong: a bad pattern, or two that conflict; a route or tier without
// policies, or with more than floodgate.MaxPolicies; a bad policy or tier
// name; a bad rule; a bad CIDR; an IPv6Prefix out of range.
func New(cfg Config) (_ *Limiter, err error) {
	l := &Limiter{key: cfg.Key, deny: cfg.Deny, tier: cfg.Tier, exempt: cfg.Exempt,
		legacy: cfg.LegacyHeaders, shadow: cfg.Shadow, show: cfg.ShadowHeaders, uncounted: cfg.uncounted, store: cfg.Store}
	if l.deny == nil {
		l.deny = denyTooMany
	}
	if l.clients.V6Bits, err = clientip.V6Bits(cfg.IPv6Prefix); err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	switch http.CanonicalHeaderKey(cfg.ProxyHeader) {
	case "", "X-Forwarded-For":
		l.header = "X-Forwarded-For"
	case "Forwarded":
		l.header, l.clients.Forwarded = "Forwarded", true
	default:
		return nil, fmt.Errorf("httplimit: ProxyHeader %q: X-Forwarded-For or Forwarded", cfg.ProxyHeader)
	}
	if l.clients.Trusted, err = clientip.ParseTrusted(cfg.TrustedProxies); err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	if l.store, l.own = policy.LocalFor(l.store); l.own != nil {
		defer func() {
			if err != nil {
				l.own.Close()
			}
		}()
	}
	l.remote = policy.Remote(l.store)
	b := l.builder(nil)
	t, err := l.build(b, cfg.Routes, cfg.Default)
	if err != nil {
		return nil, err
	}
	if _, err := b.Commit(); err != nil { // nothing kept: no SetRule to make
		b.Abort()
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	l.table.Store(t)
	return l, nil
}

// SetRoutes replaces the routes and the Default while the middleware
// serves, validated as New validates them; on an error nothing changes.
// A request decided while it runs is decided by the old routes or the
// new, never by a mix.
//
// A policy that keeps its route's pattern (or stays in the Default), its
// tier, its name and its Algorithm keeps its clients' state: a new Rule
// reaches it by floodgate's SetRule, under which no client gains
// allowance from the change (each holds at most min(what it held, the new
// capacity), refilling at the new rate, and a window's client has spent
// what it spent under a lower limit), and a new Shadow switch takes
// effect at once. Its Algorithm cannot change (its state could not be
// kept): give the policy a new name to start it afresh. A route that
// keeps its pattern keeps its counts. The policies that no new route
// keeps are closed. After Close, SetRoutes returns an error.
func (l *Limiter) SetRoutes(routes []Route, deflt []Policy) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("httplimit: SetRoutes after Close")
	}
	b := l.builder(l.table.Load().all)
	t, err := l.build(b, routes, deflt)
	if err != nil {
		return err
	}
	retired, err := b.Commit()
	if err != nil {
		b.Abort()
		return fmt.Errorf("httplimit: %w", err)
	}
	l.table.Store(t)
	for _, fl := range retired {
		fl.Close()
	}
	return nil
}

// builder returns a Builder of the middleware's routes, replacing old.
func (l *Limiter) builder(old []*route) *policy.Builder {
	b := policy.NewBuilder(l.store, validName, l.show, old)
	b.Uncounted = l.uncounted
	return b
}

// init gives the benchmark harness its way to a middleware that counts
// nothing (see internal/testhook).
func init() {
	testhook.Uncounted = func(c any) any {
		cfg := c.(Config)
		cfg.uncounted = true
		return cfg
	}
}

// build makes the table of routes and deflt; on an error it has closed
// every policy it made.
func (l *Limiter) build(b *policy.Builder, routes []Route, deflt []Policy) (_ *table, err error) {
	defer func() {
		if err != nil {
			b.Abort()
		}
	}()
	t := &table{mux: http.NewServeMux()}
	for i, rc := range routes {
		rt, err := l.newRoute(b, rc.Pattern, rc.Policies, rc.Tiers)
		if err != nil {
			return nil, fmt.Errorf("httplimit: route %q: %w", rc.Pattern, err)
		}
		if err := handle(t.mux, rc.Pattern, routeIndex(i)); err != nil {
			return nil, fmt.Errorf("httplimit: route %q: %w", rc.Pattern, err)
		}
		t.routes = append(t.routes, rt)
	}
	t.all = append(t.all, t.routes...)
	if deflt != nil {
		if t.deflt, err = l.newRoute(b, defaultRoute, deflt, nil); err != nil {
			return nil, fmt.Errorf("httplimit: default: %w", err)
		}
		t.all = append(t.all, t.deflt)
	}
	return t, nil
}

// defaultRoute is the route label of Config.Default's counts.
const defaultRoute = "default"

func (l *Limiter) newRoute(b *policy.Builder, name string, ps []Policy, tiers map[string][]Policy) (*route, error) {
	var ts map[string][]policy.Spec
	if tiers != nil {
		ts = make(map[string][]policy.Spec, len(tiers))
		for t, tp := range tiers {
			specs, err := l.specs(tp)
			if err != nil {
				return nil, fmt.Errorf("tier %q: %w", t, err)
			}
			ts[t] = specs
		}
	}
	specs, err := l.specs(ps)
	if err != nil {
		return nil, err
	}
	rt, err := b.Route(name, specs, ts)
	if errors.Is(err, policy.ErrName) {
		return nil, fmt.Errorf("%w (a name is 1 to 64 of A-Z a-z 0-9 . _ -)", err)
	}
	if err != nil {
		return nil, err
	}
	for _, s := range rt.Sets() {
		s.Header = []string{policyHeader(s)}
		s.Items = rateLimitItems(s)
	}
	return rt, nil
}

func (l *Limiter) specs(ps []Policy) ([]policy.Spec, error) {
	specs := make([]policy.Spec, len(ps))
	for i, p := range ps {
		specs[i] = policy.Spec{Name: p.Name, Rule: p.Rule, Algorithm: p.Algorithm, Shadow: p.Shadow || l.shadow,
			After: p.After, Estimate: p.Estimate, InFlight: p.InFlight, RetryAfter: p.RetryAfter}
		if p.CostHeader == "" {
			continue
		}
		name, err := costHeader(p.CostHeader)
		if err != nil {
			return nil, fmt.Errorf("policy %q: %w", p.Name, err)
		}
		if !p.After {
			return nil, fmt.Errorf("policy %q: a CostHeader is for a policy whose cost is known after the handler (After)", p.Name)
		}
		specs[i].CostKey = name
	}
	return specs, nil
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Close closes every policy the middleware made, which on a Store gives
// back what they leased ahead (the error is theirs: it says what could
// not go back), and the Store in process that it made, which stops its
// sweep of idle clients. It is idempotent. In process, the middleware
// goes on limiting after Close, as floodgate's Limiter does, but idle
// clients are no longer swept; on a Store it must not be used after.
func (l *Limiter) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	var err error
	for _, c := range policy.Closers(l.table.Load().all) {
		err = errors.Join(err, c.Close())
	}
	if l.own != nil {
		err = errors.Join(err, l.own.Close())
	}
	return err
}

// AppendCounts appends the middleware's counts (see package counts), by
// route (its pattern, or "default") and policy (its name, or
// "tier/name" for a tier's): the requests by result (allowed and exempt
// for the route, denied and shadow_denied under the policy that refused
// them), and each policy's keys, their bound and its evictions. A request
// is counted once under each route that decided it (two, for a path whose
// escapes route it apart; see Handler). Counting is always on: it costs a
// per-P add of a few nanoseconds a request.
func (l *Limiter) AppendCounts(dst []counts.Sample) []counts.Sample {
	for _, r := range l.table.Load().all {
		dst = r.AppendCounts(dst)
	}
	return dst
}

// Handler wraps next: a request that its route's policies admit goes on
// to next, with the RateLimit headers set; a refused one gets them, a
// Retry-After, and Config.Deny's answer instead. The route is found by
// the request's clean path, and a path whose escapes change its segments
// is charged under the routes of both its forms (see the package
// documentation).
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rt, also := l.table.Load().match(r)
		if rt == nil {
			next.ServeHTTP(w, r)
			return
		}
		if l.exempt != nil && l.exempt(r) {
			rt.Exempt()
			if also != nil {
				also.Exempt()
			}
			next.ServeHTTP(w, r)
			return
		}
		if l.remote {
			// The request's calls (its slots, its rates, both routes')
			// wait on a Store that does not answer once, not once each.
			r = r.WithContext(outage.With(r.Context()))
		}
		var d floodgate.Decision
		var m *meter
		var held policy.Held
		if !l.check(w, r, rt, also, &d, &m, &held) {
			if m != nil {
				m.settle(r, true) // what a route reserved before the other refused
			}
			l.deny(w, r, d)
			return
		}
		if held.Len() > 0 {
			defer held.Release() // when the handler returns, or panics
		}
		if m == nil {
			next.ServeHTTP(w, r)
			return
		}
		defer m.settle(r, false) // a handler that panics has cost what it reported
		next.ServeHTTP(m, r)
	})
}

// check asks rt's policies about r, and also's if it is not nil, and
// sets the answer's headers, for the policies they show. With two routes,
// both must admit; a refusal by also leaves what rt granted spent
// (stricter, never looser), and the headers carry both routes' policies.
// It reports whether to serve r, and writes the refusal to *d when not.
// A route whose policies are After reserves their estimates in *m, which
// it makes (see meter). A route's in-flight policies take their slots
// into held first (see Policy.InFlight); a refused request holds none.
func (l *Limiter) check(w http.ResponseWriter, r *http.Request, rt, also *route, d *floodgate.Decision, m **meter, held *policy.Held) bool {
	client := l.Client(r)
	tier := ""
	if l.tier != nil {
		tier = l.tier(r, client)
	}
	s := rt.For(tier)
	h := w.Header()
	if s.Slotted() && !s.Acquire(r.Context(), client, d, held) {
		setRetryAfter(h, d.RetryAfter)
		return false
	}
	var buf [floodgate.MaxPolicies]floodgate.Decision
	each := buf[:len(s.Names)]
	serve := decide(w, r, s, client, each, d, m)
	shown, dh := s.Shows(), floodgate.Decision{}
	if l.legacy { // only the legacy headers read dh
		dh = restrictive(each, s.Shown)
	}
	if shown {
		h[hdrPolicy] = s.Header
		h[hdrRateLimit] = rateLimit(s, each)
	}
	if also != nil && serve {
		s2 := also.For(tier)
		more := make([]floodgate.Decision, len(s2.Names))
		if s2.Slotted() && !s2.Acquire(r.Context(), client, d, held) {
			// What rt granted stays spent, as when also's rate refuses.
			held.Release()
			setRetryAfter(h, d.RetryAfter)
			return false
		}
		serve = decide(w, r, s2, client, more, d, m)
		if s2.Shows() {
			if dh2 := restrictive(more, s2.Shown); !shown || dh2.Remaining < dh.Remaining {
				dh = dh2
			}
			if shown {
				h[hdrPolicy] = []string{s.Header[0] + ", " + s2.Header[0]}
				h[hdrRateLimit] = []string{h[hdrRateLimit][0] + ", " + rateLimit(s2, more)[0]}
			} else {
				h[hdrPolicy] = s2.Header
				h[hdrRateLimit] = rateLimit(s2, more)
			}
			shown = true
		}
	}
	if !serve {
		dh = *d // a refusal is always an enforced policy's, which the headers show
	}
	if l.legacy && shown {
		setLegacy(h, dh)
	}
	if !serve && d.RetryAfter != floodgate.Never {
		setRetryAfter(h, d.RetryAfter)
	}
	if !serve {
		held.Release()
	}
	return serve
}
