package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/internal/clientip"
	"github.com/floodgate-go/floodgate/internal/outage"
	"github.com/floodgate-go/floodgate/internal/policy"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Policy is one named limit of a method (see floodgate.Policy, which
// says what each field means): a call passes only if every policy of its
// method admits it. Its CostHeader names a metadata key (lowercase
// letters, digits, '-', '_' and '.'; not a binary key, nor gRPC's own),
// set with grpc.SetHeader, grpc.SendHeader, grpc.SetTrailer or a
// stream's own. A refusal is ResourceExhausted with RetryInfo; an
// in-flight policy's slot is held until a unary call answers or a
// stream ends, and Config.PerMessage charges a stream's messages to its
// rate policies only.
type Policy = floodgate.Policy

// Config configures a Limiter. The zero value of every field but Methods
// and Default is a working default.
type Config struct {
	// Methods are the limited methods by full name
	// ("/package.Service/Method"), or whole services by their prefix
	// ending in a slash ("/package.Service/"), each with 1 to
	// floodgate.MaxPolicies policies.
	// A call matches its method's entry first, then its service's.
	Methods map[string][]Policy
	// Default limits the calls that Methods does not match; nil lets them
	// through.
	Default []Policy
	// TrustedProxies are the CIDR prefixes of peers whose
	// "x-forwarded-for" metadata is believed; the client is then its
	// right-most address that is not itself trusted. None by default: the
	// metadata is ignored.
	TrustedProxies []string
	// IPv6Prefix groups IPv6 clients by this prefix length, 1 to 128; 0
	// means 64.
	IPv6Prefix int
	// Key, if set, returns the key of a call from its context, full method
	// and the client address found (say, an authenticated user's id).
	Key func(ctx context.Context, fullMethod, client string) string
	// PerMessage charges every message a stream receives, not only its
	// opening: each once it has arrived, so that the end of the stream
	// costs nothing, and a refused one reaches the handler as its
	// RecvMsg's error, before the handler sees it.
	PerMessage bool
	// Store, if set, keeps every policy's clients' state outside this
	// process, so that every replica of the service that shares it shares
	// one limit per client: redislimit.NewStore makes one on Redis. nil
	// keeps them in process, on a floodgate.LocalStore that the Limiter
	// makes with LocalStoreConfig's defaults (the system clock, a 64 MiB
	// bound per policy, idle clients forgotten after a minute) and closes
	// at Close: pass floodgate.NewLocalStore's for another clock or bound
	// (and close it after the Limiter). On a Store each call
	// (and message, with PerMessage) is decided by all of its entry's
	// policies together in one round trip at most (none, in a Store's
	// lease mode, while the client's leases last), with every guarantee
	// of the in-process interceptors; the clock and the bounds are then
	// the Store's. A call whose context ends
	// before the Store answers is refused, and counted by the Store, not
	// here. A call waits on a Store that does not answer once: its first
	// Store call that finds the Store unreachable marks the call, and the
	// Store's failure mode answers the others (its in-flight slots, its
	// rates) at once. The Store's own counts are its own counts.Source.
	Store floodgate.Store
	// Shadow makes every policy a shadow (see Policy.Shadow): nothing is
	// refused, and what enforcement would have refused is counted as
	// shadow_denied, call for call.
	Shadow bool
	// Tier, if set, returns the tier of a call, given the key it is
	// counted under (Client's answer), and so chooses its entry in Tiers.
	// Decide it from what the server has authenticated (a verified token,
	// mTLS), never from metadata the client writes: a client that can
	// name its tier chooses its own limit.
	Tier func(ctx context.Context, fullMethod, client string) string
	// Tiers are Methods again for each tier: Tiers[tier][name] are the
	// policies of the Methods entry name (a method or a service; it must
	// be one of Methods) for the calls in that tier, and Tiers[tier][""]
	// are Default's (which must then be set). A call whose tier has no
	// entry for its match, or with no Config.Tier, is limited by Methods
	// (or Default). Each tier's policies keep their own clients' state.
	Tiers map[string]map[string][]Policy
	// Exempt, if set, lets a call it returns true for through unlimited
	// and uncharged, and counts it as exempt (health checks, internal
	// callers). Like Tier, it is a bypass if a client can make it true.
	Exempt func(ctx context.Context, fullMethod string) bool
}

// Limiter holds the limits and makes the interceptors. It is safe for
// concurrent use.
type Limiter struct {
	table      atomic.Pointer[table] // the methods now; SetMethods replaces it
	clients    clientip.Finder
	key        func(context.Context, string, string) string
	tier       func(context.Context, string, string) string
	exempt     func(context.Context, string) bool
	perMessage bool
	shadow     bool
	store      floodgate.Store
	own        *floodgate.LocalStore // the Store in process, when Config gave none
	remote     bool                  // the Store is not in process: a call's Store calls share an outage mark

	mu     sync.Mutex // serialises SetMethods and Close
	closed bool
}

// table is the limits a Limiter decides with.
type table struct {
	methods map[string]*policy.Route
	deflt   *policy.Route
	all     []*policy.Route // in name order, then deflt: what AppendCounts reports
}

// defaultRoute is the route label of Config.Default's counts.
const defaultRoute = "default"

// New validates cfg and returns a Limiter: a method name that is not
// "/service/method" or "/service/", an entry with no policies or more than
// floodgate.MaxPolicies, a bad or repeated policy name, a Tiers entry for a name that Methods
// does not have, a rule floodgate rejects, a bad CIDR or IPv6Prefix are
// errors.
func New(cfg Config) (_ *Limiter, err error) {
	l := &Limiter{key: cfg.Key, tier: cfg.Tier, exempt: cfg.Exempt, perMessage: cfg.PerMessage, shadow: cfg.Shadow, store: cfg.Store}
	if l.clients.V6Bits, err = clientip.V6Bits(cfg.IPv6Prefix); err != nil {
		return nil, fmt.Errorf("grpclimit: %w", err)
	}
	if l.clients.Trusted, err = clientip.ParseTrusted(cfg.TrustedProxies); err != nil {
		return nil, fmt.Errorf("grpclimit: %w", err)
	}
	if l.store, l.own = policy.LocalFor(l.store); l.own != nil {
		defer func() {
			if err != nil {
				l.own.Close()
			}
		}()
	}
	l.remote = policy.Remote(l.store)
	b := policy.NewBuilder(l.store, validName, false, nil)
	t, err := l.build(b, cfg.Methods, cfg.Tiers, cfg.Default)
	if err != nil {
		return nil, err
	}
	if _, err := b.Commit(); err != nil { // nothing kept: no SetRule to make
		b.Abort()
		return nil, fmt.Errorf("grpclimit: %w", err)
	}
	l.table.Store(t)
	return l, nil
}

// SetMethods replaces Methods, Tiers and Default while the interceptors
// serve, validated as New validates them; on an error nothing changes. A
// call is decided by the old limits or the new, never by a mix; a stream
// already open with Config.PerMessage goes on being charged by the
// policies it opened under.
//
// A policy that keeps its entry's name (or stays in the Default), its
// tier, its name and its Algorithm keeps its clients' state: a new Rule
// reaches it by floodgate's SetRule, under which no client gains
// allowance from the change (each holds at most min(what it held, the new
// capacity), refilling at the new rate, and a window's client has spent
// what it spent under a lower limit), and a new Shadow switch takes
// effect at once. Its Algorithm cannot change (its state could not be
// kept): give the policy a new name to start it afresh. An entry that
// keeps its name keeps its counts. The policies that no new entry keeps
// are closed. After Close, SetMethods returns an error.
func (l *Limiter) SetMethods(methods map[string][]Policy, tiers map[string]map[string][]Policy, deflt []Policy) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("grpclimit: SetMethods after Close")
	}
	b := policy.NewBuilder(l.store, validName, false, l.table.Load().all)
	t, err := l.build(b, methods, tiers, deflt)
	if err != nil {
		return err
	}
	retired, err := b.Commit()
	if err != nil {
		b.Abort()
		return fmt.Errorf("grpclimit: %w", err)
	}
	l.table.Store(t)
	for _, fl := range retired {
		fl.Close()
	}
	return nil
}

func validName(name string) bool { return name != "" }

// build makes the table; on an error it has closed every Limiter it made.
func (l *Limiter) build(b *policy.Builder, methods map[string][]Policy, tiers map[string]map[string][]Policy, deflt []Policy) (_ *table, err error) {
	defer func() {
		if err != nil {
			b.Abort()
		}
	}()
	byName := map[string]map[string][]policy.Spec{}
	for tier, entries := range tiers {
		for name, ps := range entries {
			if _, ok := methods[name]; !ok && (name != "" || deflt == nil) {
				if name == "" {
					return nil, fmt.Errorf("grpclimit: tier %q: a Default entry, with no Default", tier)
				}
				return nil, fmt.Errorf("grpclimit: tier %q: %q is not one of Methods", tier, name)
			}
			if byName[name] == nil {
				byName[name] = map[string][]policy.Spec{}
			}
			specs, err := l.specs(ps)
			if err != nil {
				return nil, fmt.Errorf("grpclimit: tier %q: %q: %w", tier, name, err)
			}
			byName[name][tier] = specs
		}
	}
	names := make([]string, 0, len(methods))
	for name := range methods {
		names = append(names, name)
	}
	sort.Strings(names)
	t := &table{methods: make(map[string]*policy.Route, len(methods))}
	for _, name := range names {
		if !validMethod(name) {
			return nil, fmt.Errorf("grpclimit: method %q: want \"/package.Service/Method\" or \"/package.Service/\"", name)
		}
		specs, err := l.specs(methods[name])
		if err != nil {
			return nil, fmt.Errorf("grpclimit: method %q: %w", name, err)
		}
		rt, err := b.Route(name, specs, byName[name])
		if err != nil {
			return nil, fmt.Errorf("grpclimit: method %q: %w", name, err)
		}
		t.methods[name] = rt
		t.all = append(t.all, rt)
	}
	if deflt != nil {
		specs, err := l.specs(deflt)
		if err != nil {
			return nil, fmt.Errorf("grpclimit: default: %w", err)
		}
		if t.deflt, err = b.Route(defaultRoute, specs, byName[""]); err != nil {
			return nil, fmt.Errorf("grpclimit: default: %w", err)
		}
		t.all = append(t.all, t.deflt)
	}
	return t, nil
}

func (l *Limiter) specs(ps []Policy) ([]policy.Spec, error) {
	specs := make([]policy.Spec, len(ps))
	for i, p := range ps {
		specs[i] = policy.Spec{Name: p.Name, Rule: p.Rule, Algorithm: p.Algorithm, Shadow: p.Shadow || l.shadow,
			After: p.After, Estimate: p.Estimate, InFlight: p.InFlight, RetryAfter: p.RetryAfter}
		if p.CostHeader == "" {
			continue
		}
		if !p.After {
			return nil, fmt.Errorf("policy %q: a CostHeader is for a policy whose cost is known when the call ends (After)", p.Name)
		}
		if err := costKey(p.CostHeader); err != nil {
			return nil, fmt.Errorf("policy %q: %w", p.Name, err)
		}
		specs[i].CostKey = p.CostHeader
	}
	return specs, nil
}

func validMethod(s string) bool {
	service, method, ok := strings.Cut(strings.TrimPrefix(s, "/"), "/")
	return strings.HasPrefix(s, "/") && ok && service != "" && !strings.Contains(method, "/")
}

// Close closes every policy made, which on a Store gives back what they
// leased ahead (the error is theirs: it says what could not go back), and
// the Store in process that the Limiter made, which stops its sweep of
// idle clients. It is idempotent. In process, the interceptors go on
// limiting after Close, as floodgate's Limiter does, but idle clients are
// no longer swept; on a Store they must not be used after.
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

// AppendCounts appends the interceptors' counts (see package counts), by
// route (the Methods entry's name, or "default") and policy (its name,
// or "tier/name" for a tier's): the calls, and with Config.PerMessage the
// stream messages, by result (allowed and exempt for the route, denied and
// shadow_denied under the policy that refused them), and each policy's
// keys, their bound and its evictions. Counting is always on: it costs a
// per-P add of a few nanoseconds a call.
func (l *Limiter) AppendCounts(dst []counts.Sample) []counts.Sample {
	for _, r := range l.table.Load().all {
		dst = r.AppendCounts(dst)
	}
	return dst
}

// match returns the limits of a full method name, or nil.
func (t *table) match(fullMethod string) *policy.Route {
	if m, ok := t.methods[fullMethod]; ok {
		return m
	}
	if i := strings.LastIndexByte(fullMethod, '/'); i > 0 {
		if m, ok := t.methods[fullMethod[:i+1]]; ok {
			return m
		}
	}
	return t.deflt
}

// Client returns the key under which a call in ctx to fullMethod is
// counted: the peer's address, or behind a trusted proxy the client its
// "x-forwarded-for" names, or Config.Key's answer. A peer whose address is
// not an IP address (a Unix socket, bufconn) is keyed by
// "invalid-remote-addr": all such peers share one allowance.
func (l *Limiter) Client(ctx context.Context, fullMethod string) string {
	remote := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		remote = p.Addr.String()
	}
	var xff []string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		xff = md.Get("x-forwarded-for")
	}
	c := l.clients.Address(remote, xff)
	if l.key != nil {
		return l.key(ctx, fullMethod, c)
	}
	return c
}

// Check decides one call in ctx to fullMethod and charges it, as the
// interceptors do, for a call made outside them: it takes from the
// client's allowance, and validates nothing (a Store's CheckRule
// validates a rule). It returns nil if the call may proceed (or no limit
// applies), else the ResourceExhausted status error a refused call
// returns. Check cannot see the call end: an After policy keeps its
// Estimate charged, and an in-flight slot is taken and given back at
// once.
func (l *Limiter) Check(ctx context.Context, fullMethod string) error {
	_, _, m, held, err := l.open(ctx, fullMethod)
	held.Release() // a bare check has no end: an in-flight slot goes back at once
	if m != nil {
		m.settle(ctx) // a bare check has no end to wait for: its estimate stands
	}
	return err
}

// open decides the call in ctx to fullMethod: the Set that decided it and
// its key, for a stream's messages (nil when no limit applies or an
// exemption let it through), the meter of a call whose Set has After
// policies, to settle when it ends, the slots of its in-flight policies,
// to release when it ends (nil when it has none: Release on nil does
// nothing), and the refusal, if any. A refused call holds no slot.
func (l *Limiter) open(ctx context.Context, fullMethod string) (*policy.Set, string, *meter, *policy.Held, error) {
	rt := l.table.Load().match(fullMethod)
	if rt == nil {
		return nil, "", nil, nil, nil
	}
	if l.exempt != nil && l.exempt(ctx, fullMethod) {
		rt.Exempt()
		return nil, "", nil, nil, nil
	}
	key := l.Client(ctx, fullMethod)
	tier := ""
	if l.tier != nil {
		tier = l.tier(ctx, fullMethod, key)
	}
	s := rt.For(tier)
	if l.remote {
		// The call's slots and rates wait on a Store that does not
		// answer once, not once each.
		ctx = outage.With(ctx)
	}
	var held *policy.Held
	if s.Slotted() {
		held = new(policy.Held)
		var d floodgate.Decision
		if !s.Acquire(ctx, key, &d, held) {
			return s, key, nil, nil, inFlightRefusal(d)
		}
	}
	if s.After() {
		m := newMeter(s, key)
		var d floodgate.Decision
		if !s.Reserve(ctx, key, 1, nil, &d, &m.hold) {
			held.Release()
			return s, key, nil, nil, refusal(d)
		}
		return s, key, m, held, nil
	}
	if err := decide(ctx, s, key); err != nil {
		held.Release()
		return s, key, nil, nil, err
	}
	return s, key, nil, held, nil
}

// decide charges one call or message for key, and returns its refusal.
func decide(ctx context.Context, s *policy.Set, key string) error {
	var d floodgate.Decision
	if !s.Decide(ctx, key, 1, nil, &d) {
		return refusal(d)
	}
	return nil
}

// refusal is the status error of a refused call, with the wait as
// RetryInfo when there is one.
func refusal(d floodgate.Decision) error {
	st := status.New(codes.ResourceExhausted, "rate limit exceeded")
	if d.RetryAfter != floodgate.Never {
		if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)}); err == nil {
			st = withInfo
		}
	}
	return st.Err()
}

// inFlightRefusal is the status error of a call that an in-flight policy
// refused, with the policy's RetryAfter as RetryInfo.
func inFlightRefusal(d floodgate.Decision) error {
	st := status.New(codes.ResourceExhausted, "too many calls in flight")
	if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)}); err == nil {
		st = withInfo
	}
	return st.Err()
}

// UnaryServerInterceptor limits unary calls.
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		_, _, m, held, err := l.open(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		if held != nil {
			defer held.Release() // when the handler returns, or panics
		}
		if m != nil {
			defer m.settle(ctx) // a handler that panics has cost what it reported
			return handler(m.wrap(ctx), req)
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor limits streams: each is charged when it opens,
// and with Config.PerMessage for every message it receives.
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		s, key, m, held, err := l.open(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		if held != nil {
			defer held.Release() // when the stream ends
		}
		if m != nil {
			defer m.settle(ss.Context())
			ss = &meteredStream{ServerStream: ss, m: m, ctx: m.wrap(ss.Context())}
		}
		if s != nil && l.perMessage {
			ss = &chargedStream{ServerStream: ss, set: s, key: key}
		}
		return handler(srv, ss)
	}
}

// chargedStream charges every message the stream receives, once it has
// arrived: the end of the stream (io.EOF) and a failed receive are not
// messages, and cost nothing. A refused message never reaches the handler:
// its RecvMsg returns the refusal instead, and the message it had read is
// reset, so that a handler that ignored the error would find nothing in
// it.
type chargedStream struct {
	grpc.ServerStream
	set *policy.Set
	key string
}

func (s *chargedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := decide(s.ServerStream.Context(), s.set, s.key); err != nil {
		if pm, ok := m.(proto.Message); ok {
			proto.Reset(pm)
		}
		return err
	}
	return nil
}
