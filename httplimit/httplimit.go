// Package httplimit is net/http middleware over floodgate: limits per
// endpoint, keyed by the client's address as far as it can be trusted, with
// the IETF RateLimit headers on every answer and Retry-After on a 429.
//
// Each Route matches requests as http.ServeMux matches its patterns (Go
// 1.22 syntax: "GET /users/{id}", "/static/", "api.example.com/"), and
// holds its own limiters, so one client's traffic to one endpoint never
// spends its allowance on another. A Route may carry several Policies
// (10 a second and 1,000 an hour): a request passes only if all admit it,
// and a refusal consumes nothing (see floodgate.Limits).
//
// The client is the connection's peer address, without the port, and an
// IPv6 client is grouped by its /64 (see Config.IPv6Prefix). The proxy
// header is believed only from peers in Config.TrustedProxies, and then
// only its right-most address that is not itself a trusted proxy: a client
// that writes its own X-Forwarded-For cannot choose its key.
package httplimit

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clientip"
	"github.com/floodgate-go/floodgate/internal/policy"
)

// Policy is one named limit of a Route.
type Policy struct {
	// Name names the policy in the RateLimit-Policy and RateLimit headers:
	// 1 to 64 of the characters A-Z a-z 0-9 . _ -, unique within a Route.
	Name string
	// Rule is the limit per client; Algorithm is the floodgate algorithm
	// ("" is the token bucket).
	Rule      floodgate.Rule
	Algorithm string
}

// Route is an endpoint with limits of its own.
type Route struct {
	// Pattern is an http.ServeMux pattern: "[METHOD ][HOST]/[PATH]".
	Pattern string
	// Policies are the route's limits, all of which must admit a request:
	// at least one, at most 8.
	Policies []Policy
}

// Config configures a Limiter. The zero value of every field but Routes
// and Default is a working default.
type Config struct {
	// Routes are the limited endpoints. A request matches the Route whose
	// pattern http.ServeMux would choose for it.
	Routes []Route
	// Default limits the requests that no Route matches; nil lets them
	// through without a limit or headers.
	Default []Policy
	// TrustedProxies are the CIDR prefixes ("10.0.0.0/8", "::1/128") of
	// the proxies whose ProxyHeader is believed. None by default: the
	// header is then ignored.
	TrustedProxies []string
	// ProxyHeader is the header trusted proxies set: XForwardedFor (the
	// default) or Forwarded.
	ProxyHeader ProxyHeader
	// IPv6Prefix is the prefix length by which IPv6 clients are grouped,
	// 1 to 128; 0 means 64, the block one subscriber usually holds.
	IPv6Prefix int
	// Key, if set, returns the key of a request, given the client address
	// the middleware found (say, to key by an API key or a user, or by
	// both): the limits then apply per key. It must not return keys of the
	// client's own choosing without bound if the limit is a security
	// control; floodgate.Config.MaxKeys (MaxKeys here) bounds what a flood
	// of them can cost.
	Key func(r *http.Request, client string) string
	// Deny writes the answer to a refused request. The RateLimit headers
	// and Retry-After are set when it is called. nil writes 429 Too Many
	// Requests with a short plain-text body.
	Deny func(w http.ResponseWriter, r *http.Request, d floodgate.Decision)
	// LegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (the Unix time, in seconds, at which the most
	// restrictive policy is full again) to every limited answer.
	LegacyHeaders bool
	// Clock, MaxKeys and IdleTTL are given to every floodgate.Limiter the
	// middleware makes (one per policy of each route); MaxKeys bounds each.
	Clock   floodgate.Clock
	MaxKeys int
	IdleTTL time.Duration
}

// Limiter is the middleware. It is safe for concurrent use.
type Limiter struct {
	mux     *http.ServeMux
	routes  []*route
	deflt   *route
	clients clientip.Finder
	header  string // the proxy header's canonical name
	key     func(*http.Request, string) string
	deny    func(http.ResponseWriter, *http.Request, floodgate.Decision)
	legacy  bool
	all     []*floodgate.Limiter
}

// route is a Route's limits, with its RateLimit-Policy header made once.
type route struct {
	limits *floodgate.Limits
	names  []string
	policy []string // the header's value, shared by every answer: net/http never writes into a value slice, it replaces it
}

// The header names, in the canonical form http.Header keys take, so that
// an answer sets them without canonicalising them again.
var (
	hdrPolicy     = http.CanonicalHeaderKey("RateLimit-Policy")
	hdrRateLimit  = http.CanonicalHeaderKey("RateLimit")
	hdrRetryAfter = http.CanonicalHeaderKey("Retry-After")
	hdrLimit      = http.CanonicalHeaderKey("X-RateLimit-Limit")
	hdrRemaining  = http.CanonicalHeaderKey("X-RateLimit-Remaining")
	hdrReset      = http.CanonicalHeaderKey("X-RateLimit-Reset")
)

// routeIndex is the handler that marks a pattern as the i-th route's in the
// Limiter's own ServeMux, which only matches and never serves.
type routeIndex int

func (routeIndex) ServeHTTP(http.ResponseWriter, *http.Request) {}

// New validates cfg and returns the middleware. Every error names what is
// wrong: a bad pattern, or two that conflict; a route without policies; a
// bad policy name or rule; a bad CIDR; an IPv6Prefix out of range.
func New(cfg Config) (_ *Limiter, err error) {
	l := &Limiter{mux: http.NewServeMux(), key: cfg.Key, deny: cfg.Deny, legacy: cfg.LegacyHeaders}
	if l.deny == nil {
		l.deny = denyTooMany
	}
	defer func() {
		if err != nil {
			l.Close() // the policies made before the error
		}
	}()
	if l.clients.V6Bits, err = clientip.V6Bits(cfg.IPv6Prefix); err != nil {
		return nil, fmt.Errorf("httplimit: %v", err)
	}
	switch cfg.ProxyHeader {
	case XForwardedFor:
		l.header = "X-Forwarded-For"
	case Forwarded:
		l.header, l.clients.Forwarded = "Forwarded", true
	default:
		return nil, fmt.Errorf("httplimit: unknown ProxyHeader %d", cfg.ProxyHeader)
	}
	if l.clients.Trusted, err = clientip.ParseTrusted(cfg.TrustedProxies); err != nil {
		return nil, fmt.Errorf("httplimit: %v", err)
	}
	for i, rc := range cfg.Routes {
		rt, err := l.newRoute(rc.Policies, cfg)
		if err != nil {
			return nil, fmt.Errorf("httplimit: route %q: %v", rc.Pattern, err)
		}
		if err := handle(l.mux, rc.Pattern, routeIndex(i)); err != nil {
			return nil, fmt.Errorf("httplimit: route %q: %v", rc.Pattern, err)
		}
		l.routes = append(l.routes, rt)
	}
	if cfg.Default != nil {
		if l.deflt, err = l.newRoute(cfg.Default, cfg); err != nil {
			return nil, fmt.Errorf("httplimit: default: %v", err)
		}
	}
	return l, nil
}

// handle registers pattern in mux, turning ServeMux's panic on a bad or
// conflicting pattern into an error.
func handle(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

func (l *Limiter) newRoute(ps []Policy, cfg Config) (*route, error) {
	specs := make([]policy.Spec, len(ps))
	for i, p := range ps {
		specs[i] = policy.Spec(p)
	}
	m, err := policy.Build(specs, policy.Common{Clock: cfg.Clock, MaxKeys: cfg.MaxKeys, IdleTTL: cfg.IdleTTL}, validName, &l.all)
	if err != nil {
		return nil, fmt.Errorf("%v (a name is 1 to 64 of A-Z a-z 0-9 . _ -)", err)
	}
	rt := &route{limits: m}
	var header strings.Builder
	for i, p := range ps {
		if i > 0 {
			header.WriteString(", ")
		}
		fmt.Fprintf(&header, "%q;q=%d;w=%d", p.Name, p.Rule.Limit, ceilSeconds(p.Rule.Period))
		rt.names = append(rt.names, p.Name)
	}
	rt.policy = []string{header.String()}
	return rt, nil
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

// Close stops every limiter the middleware made (their IdleTTL sweepers).
// It is idempotent and returns nil. The middleware goes on limiting after
// Close, as floodgate's Limiter does, but idle clients are no longer
// swept.
func (l *Limiter) Close() error {
	for _, fl := range l.all {
		fl.Close()
	}
	return nil
}

// Middleware is Handler as the func(http.Handler) http.Handler that
// routers take.
func (l *Limiter) Middleware(next http.Handler) http.Handler { return l.Handler(next) }

// Handler wraps next: a request that its route's policies admit goes on
// to next, with the RateLimit headers set; a refused one gets them, a
// Retry-After, and Config.Deny's answer instead.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rt := l.match(r)
		if rt == nil {
			next.ServeHTTP(w, r)
			return
		}
		if d, ok := l.check(w, r, rt); !ok {
			l.deny(w, r, d)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// HandlerFunc is Handler for a function.
func (l *Limiter) HandlerFunc(next http.HandlerFunc) http.Handler { return l.Handler(next) }

// match returns the route of r, the default one, or nil.
func (l *Limiter) match(r *http.Request) *route {
	if len(l.routes) > 0 {
		if h, _ := l.mux.Handler(r); h != nil {
			if i, ok := h.(routeIndex); ok {
				return l.routes[i]
			}
		}
	}
	return l.deflt
}

// Client returns the key under which the middleware counts r: its client
// address as Config's proxy rules find it, or Config.Key's answer.
func (l *Limiter) Client(r *http.Request) string {
	c := l.clients.Address(r.RemoteAddr, r.Header[l.header])
	if l.key != nil {
		return l.key(r, c)
	}
	return c
}

// check asks rt's policies about r and sets the answer's headers.
func (l *Limiter) check(w http.ResponseWriter, r *http.Request, rt *route) (floodgate.Decision, bool) {
	var buf [8]floodgate.Decision
	each := buf[:len(rt.names)]
	d := rt.limits.AllowEach(l.Client(r), 1, each)
	h := w.Header()
	h[hdrPolicy] = rt.policy
	h[hdrRateLimit] = []string{rateLimit(rt.names, each)}
	if l.legacy {
		reset := time.Now().Add(d.ResetAfter)
		sec := reset.Unix()
		if reset.Nanosecond() > 0 {
			sec++
		}
		h[hdrLimit] = []string{strconv.FormatInt(d.Limit, 10)}
		h[hdrRemaining] = []string{strconv.FormatInt(d.Remaining, 10)}
		h[hdrReset] = []string{strconv.FormatInt(sec, 10)}
	}
	if !d.Allowed && d.RetryAfter != floodgate.Never {
		h[hdrRetryAfter] = []string{strconv.FormatInt(max(1, ceilSeconds(d.RetryAfter)), 10)}
	}
	return d, d.Allowed
}

// rateLimit is the RateLimit header: one item per policy, what it has left
// and the whole seconds until it is full again, rounded up.
func rateLimit(names []string, each []floodgate.Decision) string {
	var buf [256]byte
	b := buf[:0]
	for i, d := range each {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '"')
		b = append(b, names[i]...)
		b = append(b, `";r=`...)
		b = strconv.AppendInt(b, max(0, d.Remaining), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, ceilSeconds(d.ResetAfter), 10)
	}
	return string(b)
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if d > math.MaxInt64-time.Second {
		return int64(math.MaxInt64 / time.Second)
	}
	return int64((d + time.Second - 1) / time.Second)
}

// denyTooMany is the default Deny: 429 and a body that says only that.
func denyTooMany(w http.ResponseWriter, _ *http.Request, _ floodgate.Decision) {
	http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
}
