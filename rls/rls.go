package rls

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/policy"
	"github.com/floodgate-go/floodgate/rls/config"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Options configures a Server. The zero value serves in process, with
// envoyproxy/ratelimit's defaults.
type Options struct {
	// Shadow puts every rule in shadow mode (envoyproxy/ratelimit's
	// SHADOW_MODE): each request is decided and counted, and the overall
	// code is OK. The descriptors' statuses still say what was decided.
	Shadow bool
	// NearLimitRatio is the share of a rule's limit past which admitted
	// hits count as near_limit (NEAR_LIMIT_RATIO); 0 means 0.8. It must
	// lie in [0, 1].
	NearLimitRatio float64
	// Headers adds the RateLimit headers to every response
	// (LIMIT_RESPONSE_HEADERS_ENABLED), describing the descriptor with
	// the least left: RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset, unless named otherwise below.
	Headers                                   bool
	LimitHeader, RemainingHeader, ResetHeader string
	// Clock is the limiters' clock, in nanoseconds since the Unix epoch,
	// so that windows are aligned as envoyproxy/ratelimit aligns them;
	// nil is UnixClock(). Tests give a floodgate.ManualClock set to a
	// Unix time.
	Clock floodgate.Clock
	// MaxDescriptors is the most descriptors one request may carry; 0
	// means 64. A request with more is refused with InvalidArgument.
	MaxDescriptors int
	// MaxOverrides is the most distinct per-descriptor limit overrides
	// (requests_per_unit and unit) the server keeps a limiter for; 0
	// means 1,024. A request with a new one past it is refused with
	// ResourceExhausted.
	MaxOverrides int
	// MaxKeys bounds the keys each rule holds in process, as
	// grpclimit.Config.MaxKeys does: 0 is a bound that keeps each rule
	// within 64 MiB, negative none.
	MaxKeys int
}

// Server is Envoy's rate-limit service. Make one with New; it is safe for
// concurrent use, and SetConfig changes its rules while it serves.
type Server struct {
	pb.UnimplementedRateLimitServiceServer

	opts  Options
	clock floodgate.Clock
	near  float64

	mu        sync.Mutex // serializes SetConfig, and each rule's first use, with the snapshot they read
	snap      atomic.Pointer[snapshot]
	overrides map[override]*rule // guarded by mu
	ovCount   atomic.Int64       // len(overrides), read without mu

	loads, loadErrors atomic.Int64
	serviceErrors     atomic.Int64
	stop              chan struct{}
	closed            sync.Once
	swept             chan struct{}
}

// snapshot is one configuration and the limiters of its rules that have
// been used.
type snapshot struct {
	cfg   *config.Config
	rules []atomic.Pointer[rule] // by config.Limit.Index; nil until first used
}

// rule is one rule's limiter and counts. It outlives a reload that keeps
// the rule at its place with the same algorithm.
type rule struct {
	lim   *floodgate.Limiter // nil for a rule that admits nothing (requests_per_unit 0)
	limit *config.Limit      // as last configured
	pbLim *pb.RateLimitResponse_RateLimit
	unit  int64 // the window in seconds
	fixed bool  // a fixed window: duration_until_reset is the window's end, as envoyproxy/ratelimit says it
	stats ruleStats
}

// override is a per-descriptor limit override's rule.
type override struct {
	rpu  uint32
	unit config.Unit
}

// New returns a Server deciding by cfg. Close it when done.
func New(cfg *config.Config, opts Options) (*Server, error) {
	if cfg == nil {
		return nil, errors.New("rls: New needs a configuration")
	}
	if r := opts.NearLimitRatio; r < 0 || r > 1 || math.IsNaN(r) {
		return nil, fmt.Errorf("rls: NearLimitRatio must lie in [0, 1], got %v", r)
	}
	if opts.MaxDescriptors < 0 || opts.MaxOverrides < 0 {
		return nil, errors.New("rls: MaxDescriptors and MaxOverrides must be 0 (the default) or positive")
	}
	s := &Server{opts: opts, clock: opts.Clock, near: opts.NearLimitRatio, overrides: map[override]*rule{},
		stop: make(chan struct{}), swept: make(chan struct{})}
	if s.clock == nil {
		s.clock = UnixClock()
	}
	if s.near == 0 {
		s.near = 0.8
	}
	if s.opts.MaxDescriptors == 0 {
		s.opts.MaxDescriptors = 64
	}
	if s.opts.MaxOverrides == 0 {
		s.opts.MaxOverrides = 1024
	}
	if s.opts.LimitHeader == "" {
		s.opts.LimitHeader = "RateLimit-Limit"
	}
	if s.opts.RemainingHeader == "" {
		s.opts.RemainingHeader = "RateLimit-Remaining"
	}
	if s.opts.ResetHeader == "" {
		s.opts.ResetHeader = "RateLimit-Reset"
	}
	s.snap.Store(&snapshot{cfg: cfg, rules: make([]atomic.Pointer[rule], cfg.Len())})
	s.loads.Add(1)
	go s.sweep(policy.DefaultIdleTTL)
	return s, nil
}

// unixClock reads Unix nanoseconds that never step: the wall clock's
// reading at start, plus Go's monotonic time since.
type unixClock struct {
	start time.Time
	unix  int64
}

func (c *unixClock) Now() int64 { return c.unix + int64(time.Since(c.start)) }

// UnixClock returns a clock of nanoseconds since the Unix epoch that
// moves with the monotonic clock: read once from the wall clock, then
// never stepped by NTP or an operator, so that no window is shortened
// or lengthened while it runs.
func UnixClock() floodgate.Clock {
	now := time.Now()
	return &unixClock{start: now, unix: now.UnixNano()}
}

// SetConfig makes cfg the Server's configuration for every request that
// starts after it returns. A rule that keeps its place in the descriptor
// tree and its algorithm keeps every key's state: its limiter takes the
// new limit by SetRule, so no client gains allowance from the reload. A
// rule whose algorithm changes starts afresh.
func (s *Server) SetConfig(cfg *config.Config) error {
	if cfg == nil {
		return errors.New("rls: SetConfig needs a configuration")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.snap.Load()
	next := &snapshot{cfg: cfg, rules: make([]atomic.Pointer[rule], cfg.Len())}
	var errs []error
	for i := range old.rules {
		r := old.rules[i].Load()
		if r == nil {
			continue
		}
		nl := cfg.Same(r.limit)
		if nl == nil || nl.Unlimited || nl.Algorithm != r.limit.Algorithm || (r.lim == nil) != (nl.RequestsPerUnit == 0) {
			if r.lim != nil {
				r.lim.Close()
			}
			continue
		}
		if r.lim != nil && ruleOf(nl) != ruleOf(r.limit) {
			if err := r.lim.SetRule(ruleOf(nl)); err != nil {
				errs = append(errs, fmt.Errorf("rule %s: %w", nl.Key, err))
				r.lim.Close()
				continue
			}
		}
		next.rules[nl.Index].Store(r.reconfigured(nl))
	}
	s.snap.Store(next)
	s.loads.Add(1)
	return errors.Join(errs...)
}

// reconfigured returns r under its new configuration nl: the same
// limiter and counts.
func (r *rule) reconfigured(nl *config.Limit) *rule {
	n := &rule{lim: r.lim, limit: nl, pbLim: pbLimit(nl), unit: int64(nl.Unit.Duration() / time.Second), fixed: nl.Algorithm == floodgate.FixedWindow}
	n.stats.share(&r.stats)
	return n
}

// ruleOf is l's floodgate rule.
func ruleOf(l *config.Limit) floodgate.Rule {
	return floodgate.Rule{Limit: int64(l.RequestsPerUnit), Period: l.Unit.Duration(), Burst: l.Burst}
}

func pbLimit(l *config.Limit) *pb.RateLimitResponse_RateLimit {
	return &pb.RateLimitResponse_RateLimit{Name: l.Name, RequestsPerUnit: l.RequestsPerUnit, Unit: pb.RateLimitResponse_RateLimit_Unit(l.Unit)}
}

// ruleFor returns snap's rule for l, making its limiter on first use.
func (s *Server) ruleFor(snap *snapshot, l *config.Limit) (*rule, error) {
	if r := snap.rules[l.Index].Load(); r != nil {
		return r, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := snap.rules[l.Index].Load(); r != nil {
		return r, nil
	}
	// A snapshot that SetConfig has replaced hands no new rule over: one
	// made now would be lost with it. The request uses the current one.
	if cur := s.snap.Load(); cur != snap {
		if nl := cur.cfg.Same(l); nl != nil && !nl.Unlimited {
			if r := cur.rules[nl.Index].Load(); r != nil {
				return r, nil
			}
			snap, l = cur, nl
		}
	}
	r := &rule{limit: l, pbLim: pbLimit(l), unit: int64(l.Unit.Duration() / time.Second), fixed: l.Algorithm == floodgate.FixedWindow}
	r.stats.init()
	if l.RequestsPerUnit > 0 {
		lim, err := policy.Build1(policy.Spec{Name: l.Key, Rule: ruleOf(l), Algorithm: l.Algorithm},
			policy.Common{Clock: s.clock, MaxKeys: s.opts.MaxKeys, IdleTTL: -1})
		if err != nil {
			return nil, err
		}
		r.lim = lim
	}
	snap.rules[l.Index].Store(r)
	return r, nil
}

// overrideFor returns the rule of a per-descriptor limit override.
func (s *Server) overrideFor(rpu uint32, u config.Unit) (*rule, error) {
	o := override{rpu, u}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.overrides[o]; r != nil {
		return r, nil
	}
	if len(s.overrides) >= s.opts.MaxOverrides {
		return nil, status.Errorf(codes.ResourceExhausted, "rls: more than %d distinct limit overrides", s.opts.MaxOverrides)
	}
	l := &config.Limit{Key: "override", RequestsPerUnit: rpu, Unit: u, Algorithm: floodgate.FixedWindow}
	r := &rule{limit: l, pbLim: pbLimit(l), unit: int64(u.Duration() / time.Second), fixed: true}
	r.stats.init()
	if rpu > 0 {
		lim, err := policy.Build1(policy.Spec{Name: "override", Rule: ruleOf(l), Algorithm: floodgate.FixedWindow},
			policy.Common{Clock: s.clock, MaxKeys: s.opts.MaxKeys, IdleTTL: -1})
		if err != nil {
			return nil, err
		}
		r.lim = lim
	}
	s.overrides[o] = r
	s.ovCount.Store(int64(len(s.overrides)))
	return r, nil
}

// sweep forgets, every ttl, the keys of every rule that hold what a new
// key would: a rule's limiter has no sweeper of its own, so that a
// config of many rules runs one goroutine.
func (s *Server) sweep(ttl time.Duration) {
	defer close(s.swept)
	t := time.NewTicker(ttl)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		snap := s.snap.Load()
		for i := range snap.rules {
			if r := snap.rules[i].Load(); r != nil && r.lim != nil {
				r.lim.EvictIdle()
			}
		}
		s.mu.Lock()
		for _, r := range s.overrides {
			if r.lim != nil {
				r.lim.EvictIdle()
			}
		}
		s.mu.Unlock()
	}
}

// Close stops the Server's background sweep. The Server still answers
// after Close; only idle keys are no longer forgotten.
func (s *Server) Close() error {
	s.closed.Do(func() {
		close(s.stop)
		<-s.swept
	})
	return nil
}

// unitOf converts a limit override's unit, numbered as the response's
// (envoyproxy/ratelimit converts it by number too, so 7 is a week).
func unitOf(u int32) (config.Unit, bool) {
	if u < int32(config.Second) || u > int32(config.Week) {
		return 0, false
	}
	return config.Unit(u), true
}

// scratch is one request's working memory, reused across requests.
type scratch struct {
	entries []config.Entry
	key     []byte
	ends    []int // where each descriptor's key ends in key
	rules   []*rule
	hits    []uint64
	kind    []uint8
	asks    []floodgate.Ask
	askOf   []int // the descriptor of each ask
	each    []floodgate.Decision
	ds      []floodgate.Decision // each descriptor's answer
	names   map[string]bool      // replaces
}

// What a descriptor is, for this request.
const (
	kindNone      uint8 = iota // no rule: OK, no limit
	kindUnlimited              // an unlimited rule: OK, remaining MaxUint32
	kindEnforced               // charged with the others, all or nothing
	kindShadow                 // charged alone, after the others, never refusing
	kindCheck                  // hits 0: looked at, charged nothing
)

var scratches = sync.Pool{New: func() any { return &scratch{names: map[string]bool{}} }}

// ShouldRateLimit decides one request from Envoy. A request the service
// cannot decide is answered with a status: InvalidArgument for an empty
// domain, no descriptors, too many (Options.MaxDescriptors) or a limit
// override of no known unit; ResourceExhausted for a new override past
// Options.MaxOverrides.
func (s *Server) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	resp, err := s.shouldRateLimit(ctx, req)
	if err != nil {
		s.serviceErrors.Add(1)
	}
	return resp, err
}

func (s *Server) shouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rls: the domain is empty")
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rls: the request has no descriptors")
	}
	if len(ds) > s.opts.MaxDescriptors {
		return nil, status.Errorf(codes.InvalidArgument, "rls: %d descriptors in one request, more than the %d allowed", len(ds), s.opts.MaxDescriptors)
	}
	snap := s.snap.Load()
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	n := len(ds)
	sc.key, sc.ends = sc.key[:0], sc.ends[:0]
	sc.rules, sc.hits, sc.kind = grow(sc.rules, n), grow(sc.hits, n), grow(sc.kind, n)
	sc.ds = grow(sc.ds, n)
	clear(sc.names)
	reqHits := uint64(max(1, req.GetHitsAddend()))
	for i, d := range ds {
		sc.entries = sc.entries[:0]
		for _, e := range d.GetEntries() {
			sc.entries = append(sc.entries, config.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		start := len(sc.key)
		sc.key = appendField(sc.key, req.Domain)
		var l *config.Limit
		var r *rule
		if o := d.GetLimit(); o != nil {
			u, ok := unitOf(int32(o.GetUnit()))
			if !ok {
				return nil, status.Errorf(codes.InvalidArgument, "rls: descriptor %d: limit override with unit %v", i, o.GetUnit())
			}
			if !snap.cfg.HasDomain(req.Domain) {
				sc.key = sc.key[:start] // envoyproxy/ratelimit applies an override only in a known domain
			} else {
				var err error
				if r, err = s.overrideFor(o.GetRequestsPerUnit(), u); err != nil {
					return nil, err
				}
				for _, e := range sc.entries {
					sc.key = appendField(appendField(sc.key, e.Key), e.Value)
				}
			}
		} else if l, sc.key = snap.cfg.AppendKey(sc.key, req.Domain, sc.entries); l == nil {
			sc.key = sc.key[:start]
		} else {
			for _, name := range l.Replaces {
				sc.names[name] = true
			}
			if !l.Unlimited {
				var err error
				if r, err = s.ruleFor(snap, l); err != nil {
					return nil, status.Errorf(codes.Internal, "rls: %v", err)
				}
			}
		}
		sc.ends = append(sc.ends, len(sc.key))
		sc.rules[i] = r
		hits := reqHits
		if h := d.GetHitsAddend(); h != nil {
			hits = h.GetValue()
		}
		sc.hits[i] = hits
		switch {
		case l != nil && l.Unlimited:
			sc.kind[i] = kindUnlimited
		case r == nil:
			sc.kind[i] = kindNone
		case hits == 0:
			sc.kind[i] = kindCheck
		case r.limit.Shadow:
			sc.kind[i] = kindShadow
		default:
			sc.kind[i] = kindEnforced
		}
	}
	if len(sc.names) > 0 {
		for i, r := range sc.rules {
			if r != nil && r.limit.Name != "" && sc.names[r.limit.Name] && (sc.kind[i] != kindUnlimited) {
				sc.kind[i], sc.rules[i] = kindNone, nil
			}
		}
	}
	// The enforced descriptors, all or nothing.
	sc.asks, sc.askOf = sc.asks[:0], sc.askOf[:0]
	for i := range n {
		if sc.kind[i] == kindEnforced {
			sc.asks = append(sc.asks, floodgate.Ask{Limiter: sc.rules[i].lim, Key: sc.keyOf(i), N: clampHits(sc.hits[i])})
			sc.askOf = append(sc.askOf, i)
		}
	}
	sc.each = grow(sc.each, len(sc.asks))
	refused := floodgate.DecideAll(sc.asks, sc.each)
	for k, i := range sc.askOf {
		sc.ds[i] = sc.each[k]
	}
	for i := range n {
		r := sc.rules[i]
		switch sc.kind[i] {
		case kindShadow:
			if refused >= 0 || r.lim == nil {
				sc.ds[i] = peek(r, sc.keyOf(i))
			} else {
				sc.ds[i] = r.lim.AllowN(sc.keyOf(i), clampHits(sc.hits[i]))
			}
		case kindCheck:
			sc.ds[i] = peek(r, sc.keyOf(i))
		}
	}
	return s.respond(req, sc, refused), nil
}

// keyOf is descriptor i's key, which shares sc.key's bytes: floodgate
// limiters hash a key and keep none of it, so it is valid for the
// request.
func (sc *scratch) keyOf(i int) string {
	start := 0
	if i > 0 {
		start = sc.ends[i-1]
	}
	if start == sc.ends[i] {
		return ""
	}
	return unsafe.String(&sc.key[start], sc.ends[i]-start)
}

// peek is what r would answer to one request for key now; a rule that
// admits nothing answers as refused.
func peek(r *rule, key string) floodgate.Decision {
	if r.lim == nil {
		return floodgate.Decision{RetryAfter: floodgate.Never}
	}
	return r.lim.Peek(key)
}

// appendField appends s, prefixed by its length.
func appendField(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// clampHits converts a hits_addend to a cost. A cost past int64 is past
// every rule's capacity (a rule's limit is a uint32), so it is refused as
// the largest cost is: nothing is admitted that asked for more.
func clampHits(h uint64) int64 {
	if h > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(h)
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// respond builds the response from each descriptor's answer, and counts.
func (s *Server) respond(req *pb.RateLimitRequest, sc *scratch, refused int) *pb.RateLimitResponse {
	n := len(sc.kind)
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, n)}
	statuses := make([]pb.RateLimitResponse_DescriptorStatus, n) // one allocation for all
	over := refused >= 0
	now := s.clock.Now()
	minIdx, minLeft := -1, uint32(math.MaxUint32)
	for i := range n {
		st := &statuses[i]
		resp.Statuses[i] = st
		st.Code = pb.RateLimitResponse_OK
		r, d, hits := sc.rules[i], &sc.ds[i], sc.hits[i]
		switch sc.kind[i] {
		case kindNone:
			continue
		case kindUnlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		}
		st.CurrentLimit = r.pbLim
		st.DurationUntilReset = r.reset(now, d)
		var left int64
		var overHere bool
		switch {
		case sc.kind[i] == kindCheck:
			left = remainingNow(d)
		case sc.kind[i] == kindEnforced && over:
			if sc.askOf[refused] == i {
				overHere = true
			} else {
				left = remainingNow(d)
				overHere = uint64(left) < hits
			}
		case sc.kind[i] == kindShadow && over:
			left = remainingNow(d)
			overHere = uint64(left) < hits
		default: // admitted, enforced or shadow
			if d.Allowed {
				left = d.Remaining
			} else {
				overHere = true // a shadow that would refuse
			}
		}
		if overHere {
			left = 0
			if sc.kind[i] == kindShadow {
				r.stats.add(statShadow, hits)
			} else {
				st.Code = pb.RateLimitResponse_OVER_LIMIT
			}
			r.stats.add(statOver, hits)
		} else {
			r.stats.add(statWithin, hits)
			// near_limit as envoyproxy/ratelimit counts it: the hits that
			// landed past the ratio's share of the limit.
			nearFloor := int64(math.Floor(float64(float32(r.limit.RequestsPerUnit) * float32(s.near))))
			if used := int64(r.limit.RequestsPerUnit) - left; used > nearFloor && hits > 0 {
				r.stats.add(statNear, uint64(min(int64(min(hits, math.MaxInt64)), used-nearFloor)))
			}
		}
		r.stats.add(statTotal, hits)
		st.LimitRemaining = uint32(min(max(left, 0), math.MaxUint32))
		// The headers describe the descriptor with the least left, or
		// the last one over its limit, as envoyproxy/ratelimit picks it.
		if st.LimitRemaining < minLeft || st.Code == pb.RateLimitResponse_OVER_LIMIT {
			minIdx, minLeft = i, st.LimitRemaining
		}
	}
	if over {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
		if s.opts.Shadow {
			resp.OverallCode = pb.RateLimitResponse_OK
		}
	}
	if s.opts.Headers && minIdx >= 0 {
		st := &statuses[minIdx]
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: s.opts.LimitHeader, Value: strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)},
			{Key: s.opts.RemainingHeader, Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
			{Key: s.opts.ResetHeader, Value: strconv.FormatInt(st.DurationUntilReset.GetSeconds(), 10)},
		}
	}
	return resp
}

// remainingNow is what a Peek says is left before one more request.
func remainingNow(d *floodgate.Decision) int64 {
	if !d.Allowed {
		return 0
	}
	return d.Remaining + 1
}

// reset is the status's duration_until_reset: for a fixed window, the
// whole seconds to the window's end, as envoyproxy/ratelimit computes it
// (unit − now mod unit, on the Unix clock); for the other algorithms,
// the time until the key is whole again, rounded up to a second.
func (r *rule) reset(now int64, d *floodgate.Decision) *durationpb.Duration {
	if r.fixed {
		sec := now / int64(time.Second)
		return &durationpb.Duration{Seconds: r.unit - sec%r.unit}
	}
	return &durationpb.Duration{Seconds: int64((d.ResetAfter + time.Second - 1) / time.Second)}
}
