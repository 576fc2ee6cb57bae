package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/policy"
	"github.com/floodgate-go/floodgate/redislimit"
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
	// MaxDetailed is the most series a rule with detailed_metric keeps,
	// one for each pair of its first two levels' key_value in the
	// requests (a share_threshold level's pattern stands for its
	// values); 0 means 1,000. Past it, a request counts in the rule's own
	// series, labelled as configured: clients that send a new value each
	// time grow the metrics no further. So does a request whose two
	// levels' names exceed 256 bytes together.
	MaxDetailed int
	// MaxKeys bounds the keys each rule holds in process, as
	// grpclimit.Config.MaxKeys does: 0 is a bound that keeps each rule
	// within 64 MiB, negative none.
	MaxKeys int
	// Store, if set, keeps every rule's counts on Redis, shared by every
	// replica of the service: each rule is a policy of the Store, named
	// by its place in the descriptor tree, and a request's descriptors
	// are decided in one script (see redislimit.Store.DecideEach), so at
	// most 8 limited descriptors a request. Give the Store a HashTag
	// under which a request's keys share a Redis Cluster slot: HashTag
	// does (every key of a domain in one slot). The Store's Config says
	// what happens while Redis cannot answer (FailureMode), and lease
	// mode (Lease), which serves a request from leases, with no round
	// trip, while every descriptor it charges holds one. Close closes
	// the Server's policies, which returns their leases; the Store stays
	// the caller's.
	Store *redislimit.Store
}

// HashTag is the redislimit.Config.HashTag of a Store for the Server:
// the domain of a key the Server made, so that every key of a domain,
// and so every descriptor of a request, shares one Redis Cluster slot.
func HashTag(key string) string {
	domain, _, ok := config.CutField(key)
	if !ok {
		return key
	}
	return domain
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
	lim   *floodgate.Limiter    // in process; nil for a rule that admits nothing (requests_per_unit 0)
	pol   floodgate.StorePolicy // on Redis (Options.Store), instead of lim
	limit *config.Limit         // as last configured
	pbLim *pb.RateLimitResponse_RateLimit
	unit  int64 // the window in seconds
	fixed bool  // a fixed window: duration_until_reset is the window's end, as envoyproxy/ratelimit says it
	stats ruleStats
	// detailed holds the series by the requests' values of a rule with
	// detailed_metric; nil for the others.
	detailed *detailed
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
	if opts.MaxDescriptors < 0 || opts.MaxOverrides < 0 || opts.MaxDetailed < 0 {
		return nil, errors.New("rls: MaxDescriptors, MaxOverrides and MaxDetailed must be 0 (the default) or positive")
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
	if s.opts.MaxDetailed == 0 {
		s.opts.MaxDetailed = 1000
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
	if err := s.Check(cfg); err != nil {
		return nil, err
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
// rule whose algorithm changes starts afresh. If a rule of cfg cannot be
// held (see Check), SetConfig returns the error and changes nothing.
func (s *Server) SetConfig(cfg *config.Config) error {
	if cfg == nil {
		return errors.New("rls: SetConfig needs a configuration")
	}
	if err := s.Check(cfg); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.snap.Load()
	next := &snapshot{cfg: cfg, rules: make([]atomic.Pointer[rule], cfg.Len())}
	for i := range old.rules {
		r := old.rules[i].Load()
		if r == nil {
			continue
		}
		nl := cfg.Same(r.limit)
		if nl == nil || nl.Unlimited || nl.Algorithm != r.limit.Algorithm || r.zero() != (nl.RequestsPerUnit == 0) {
			r.close()
			continue
		}
		if !r.zero() && ruleOf(nl) != ruleOf(r.limit) && r.setRule(ruleOf(nl)) != nil {
			r.close() // Check took the rule: not reached; the rule would start afresh
			continue
		}
		next.rules[nl.Index].Store(r.reconfigured(nl, s.opts.MaxDetailed))
	}
	s.snap.Store(next)
	s.loads.Add(1)
	return nil
}

// Check reports whether the Server can hold every rule of cfg: in
// process, what floodgate.New takes; on a Store, what its Policy takes
// (Redis bounds some rules, as a sliding counter's Limit × Period, and a
// Lease must be able to save round trips under each bucket's rule). The
// error names the first rule refused, by its file's key. New and
// SetConfig check; a tool that validates config files may too.
func (s *Server) Check(cfg *config.Config) error {
	type shape struct {
		alg  string
		rule floodgate.Rule
	}
	seen := map[shape]error{}
	for i := range cfg.Len() {
		l := cfg.Rule(i)
		if l.Unlimited || l.RequestsPerUnit == 0 {
			continue
		}
		k := shape{l.Algorithm, ruleOf(l)}
		err, done := seen[k]
		if !done {
			if s.opts.Store != nil {
				err = s.opts.Store.Check(l.Algorithm, k.rule)
			} else {
				var lim *floodgate.Limiter
				if lim, err = floodgate.New(floodgate.Config{Algorithm: l.Algorithm, Rule: k.rule}); err == nil {
					lim.Close()
				}
			}
			seen[k] = err
		}
		if err != nil {
			return fmt.Errorf("rls: rule %s (%d per %s, %s): %w", l.Key, l.RequestsPerUnit, l.Unit, l.Algorithm, err)
		}
	}
	return nil
}

// reconfigured returns r under its new configuration nl: the same
// limiter and counts.
func (r *rule) reconfigured(nl *config.Limit, maxDetailed int) *rule {
	n := &rule{lim: r.lim, pol: r.pol, limit: nl, pbLim: pbLimit(nl), unit: int64(nl.Unit.Duration() / time.Second), fixed: nl.Algorithm == floodgate.FixedWindow}
	n.stats.share(&r.stats)
	if nl.Detailed {
		n.detailed = r.detailed
		if n.detailed == nil {
			n.detailed = newDetailed(maxDetailed)
		}
	}
	return n
}

// zero reports whether r admits nothing (requests_per_unit 0).
func (r *rule) zero() bool { return r.lim == nil && r.pol == nil }

func (r *rule) setRule(fr floodgate.Rule) error {
	if r.pol != nil {
		return r.pol.SetRule(fr)
	}
	return r.lim.SetRule(fr)
}

// close releases what r holds: a policy's leases go back to Redis.
func (r *rule) close() {
	if r.pol != nil {
		r.pol.Close()
	}
	if r.lim != nil {
		r.lim.Close()
	}
}

// build makes r's limiter, or its policy on the Store, named name.
func (s *Server) build(r *rule, name string) error {
	l := r.limit
	if l.RequestsPerUnit == 0 {
		return nil
	}
	if s.opts.Store != nil {
		p, err := s.opts.Store.Policy(name, l.Algorithm, ruleOf(l))
		r.pol = p
		return err
	}
	lim, err := policy.Build1(policy.Spec{Name: l.Key, Rule: ruleOf(l), Algorithm: l.Algorithm},
		policy.Common{Clock: s.clock, MaxKeys: s.opts.MaxKeys, IdleTTL: -1})
	r.lim = lim
	return err
}

// policyName is the Store's name for a rule: its place in the tree.
func policyName(l *config.Limit) string {
	domain, levels := l.Path()
	return fmt.Sprintf("rule %q %q", domain, levels)
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
	if l.Detailed {
		r.detailed = newDetailed(s.opts.MaxDetailed)
	}
	if err := s.build(r, policyName(l)); err != nil {
		return nil, err
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
	if err := s.build(r, fmt.Sprintf("override %d/%s", rpu, u)); err != nil {
		return nil, status.Errorf(codes.Internal, "rls: %v", err)
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

// Close stops the Server's background sweep and, on a Store, closes its
// policies, which returns their unspent leases to Redis. In process the
// Server still answers after Close; only idle keys are no longer
// forgotten. On a Store it must not be used after.
func (s *Server) Close() error {
	s.closed.Do(func() {
		close(s.stop)
		<-s.swept
		if s.opts.Store == nil {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		snap := s.snap.Load()
		for i := range snap.rules {
			if r := snap.rules[i].Load(); r != nil {
				r.close()
			}
		}
		for _, r := range s.overrides {
			r.close()
		}
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
	state   []uint8              // how each answer was reached
	first   []int                // the descriptor that decides for each: itself, or the first of the same rule and key
	cost    []uint64             // what the deciding descriptor asks: the hits of all it decides for
	done    []bool               // decided before any limiter is asked
	label   []byte               // a detailed series' name
	// On Redis:
	storeAsks []redislimit.Ask
	shadow    []bool
	names     map[string]bool // replaces
}

// What a descriptor is, for this request.
const (
	kindNone      uint8 = iota // no rule: OK, no limit
	kindUnlimited              // an unlimited rule: OK, remaining MaxUint32
	kindEnforced               // charged with the others, all or nothing
	kindShadow                 // charged alone, after the others, never refusing
	kindCheck                  // hits 0: looked at, charged nothing
)

// detailedLabel names the detailed series of a request's descriptor of
// entries under rule l: its first two levels' key_value (a share_threshold
// level's as configured), joined by a 0 byte. The name is a view of sc's
// buffer, valid until sc's next use.
func (sc *scratch) detailedLabel(l *config.Limit, entries []*rlv3.RateLimitDescriptor_Entry) string {
	sc.label = sc.label[:0]
	for i := range min(2, len(entries)) {
		if i > 0 {
			sc.label = append(sc.label, 0)
		}
		if l.SharedLevel(i) {
			sc.label = append(sc.label, l.Level(i)...)
			continue
		}
		e := entries[i]
		sc.label = append(sc.label, e.GetKey()...)
		if v := e.GetValue(); v != "" {
			sc.label = append(append(sc.label, '_'), v...)
		}
	}
	if len(entries) < 2 {
		sc.label = append(sc.label, 0)
	}
	return unsafe.String(unsafe.SliceData(sc.label), len(sc.label))
}

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
		sc.key = config.AppendField(sc.key, req.Domain)
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
					sc.key = config.AppendField(config.AppendField(sc.key, e.Key), e.Value)
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
	over, err := s.decide(ctx, sc)
	if err != nil {
		return nil, err
	}
	return s.respond(sc, ds, over), nil
}

// How a descriptor's answer in sc.ds was reached.
const (
	charged     uint8 = iota // it decided the request, and charged it: Remaining is what is left
	peeked                   // it was not charged: the answer is what one more request would find
	refusedHere              // it refused the request
)

// decide decides the request's descriptors: the enforced ones all or
// nothing, then the shadows all or nothing among themselves (a shadow
// refuses nothing; if one would, none is charged), and the checks by a
// look. It reports whether an enforced descriptor refused.
func (s *Server) decide(ctx context.Context, sc *scratch) (over bool, err error) {
	n := len(sc.kind)
	sc.state = grow(sc.state, n)
	over = s.prepare(sc)
	if s.opts.Store != nil {
		over, err = s.decideStore(ctx, sc, over)
	} else {
		over = s.decideLocal(sc, over)
	}
	for i, f := range sc.first {
		if f != i {
			sc.ds[i], sc.state[i] = sc.ds[f], sc.state[f]
		}
	}
	return over, err
}

// prepare merges the descriptors that name one rule and key (and are
// enforced, or shadows, both) into the first of them, which asks for
// all their hits at once, so that a request is decided the same on
// every backend; and decides at once every one whose hits no state of
// its rule can hold: an enforced one refuses the request, a shadow is
// refused alone. It reports whether an enforced descriptor refused.
func (s *Server) prepare(sc *scratch) (over bool) {
	n := len(sc.kind)
	sc.first, sc.cost, sc.done = grow(sc.first, n), grow(sc.cost, n), grow(sc.done, n)
	for i := range n {
		sc.first[i], sc.cost[i], sc.done[i] = i, sc.hits[i], false
		k := sc.kind[i]
		if k != kindEnforced && k != kindShadow {
			continue
		}
		for j := range i {
			if sc.first[j] == j && sc.kind[j] == k && sc.rules[j] == sc.rules[i] && sc.keyOf(j) == sc.keyOf(i) {
				sc.first[i] = j
				sc.cost[j] = addHits(sc.cost[j], sc.hits[i])
				break
			}
		}
	}
	for i := range n {
		f := sc.first[i]
		sc.cost[i] = sc.cost[f]
		k := sc.kind[i]
		if f == i && (k == kindEnforced || k == kindShadow) && sc.cost[i] > sc.rules[i].capacity() {
			sc.ds[i], sc.state[i], sc.done[i] = floodgate.Decision{RetryAfter: floodgate.Never}, refusedHere, true
			over = over || k == kindEnforced
		}
	}
	return over
}

// addHits is a + b, at most math.MaxUint64.
func addHits(a, b uint64) uint64 {
	if a+b < a {
		return math.MaxUint64
	}
	return a + b
}

// capacity is the most one request may ask of r: its burst, or its
// limit (0 for a rule that admits nothing).
func (r *rule) capacity() uint64 {
	if r.limit.Burst > 0 {
		return uint64(r.limit.Burst)
	}
	return uint64(r.limit.RequestsPerUnit)
}

// live reports whether descriptor i is decided by a limiter: it decides
// for itself, and was not decided before.
func (sc *scratch) live(i int) bool { return sc.first[i] == i && !sc.done[i] }

// decideLocal is decide in process.
func (s *Server) decideLocal(sc *scratch, over bool) bool {
	n := len(sc.kind)
	sc.each = grow(sc.each, n)
	group := func(kind uint8) int {
		sc.asks, sc.askOf = sc.asks[:0], sc.askOf[:0]
		for i := range n {
			if sc.kind[i] == kind && sc.live(i) {
				sc.asks = append(sc.asks, floodgate.Ask{Limiter: sc.rules[i].lim, Key: sc.keyOf(i), N: clampHits(sc.cost[i])})
				sc.askOf = append(sc.askOf, i)
			}
		}
		j := floodgate.DecideAll(sc.asks, sc.each)
		for k, i := range sc.askOf {
			sc.ds[i] = sc.each[k]
			switch {
			case j < 0:
				sc.state[i] = charged
			case k == j:
				sc.state[i] = refusedHere
			default:
				sc.state[i] = peeked
			}
		}
		return j
	}
	if over {
		// An enforced descriptor refused at once: the others are looked at.
		for i := range n {
			if sc.live(i) && sc.kind[i] != kindNone && sc.kind[i] != kindUnlimited {
				sc.ds[i], sc.state[i] = peek(sc.rules[i], sc.keyOf(i)), peeked
			}
		}
		return true
	}
	over = group(kindEnforced) >= 0
	if !over {
		group(kindShadow)
	}
	// The shadows of a refused request, and the checks, are looked at
	// after every charge, as on Redis.
	for i := range n {
		if sc.live(i) && (sc.kind[i] == kindCheck || sc.kind[i] == kindShadow && over) {
			sc.ds[i], sc.state[i] = peek(sc.rules[i], sc.keyOf(i)), peeked
		}
	}
	return over
}

// peeker is what a Store's policy answers besides its decisions.
type peeker interface {
	Peek(ctx context.Context, key string) (floodgate.Decision, error)
}

// decideStore is decide on Redis: every enforced and shadow descriptor
// in one script (see redislimit.Store.DecideEach), a check by a look of
// its own.
func (s *Server) decideStore(ctx context.Context, sc *scratch, over bool) (bool, error) {
	n := len(sc.kind)
	sc.storeAsks, sc.shadow, sc.askOf = sc.storeAsks[:0], sc.shadow[:0], sc.askOf[:0]
	for i := range n {
		k := sc.kind[i]
		if k != kindEnforced && k != kindShadow || !sc.live(i) {
			continue
		}
		r := sc.rules[i]
		// A key of its own, not sc's bytes: lease mode keeps the keys it
		// holds leases for.
		sc.storeAsks = append(sc.storeAsks, redislimit.Ask{Policy: r.pol, Key: strings.Clone(sc.keyOf(i)), N: clampHits(sc.cost[i])})
		sc.shadow = append(sc.shadow, k == kindShadow)
		sc.askOf = append(sc.askOf, i)
	}
	if len(sc.storeAsks) > maxStoreAsks {
		return false, status.Errorf(codes.InvalidArgument, "rls: %d limited descriptors in one request, more than the %d one decision on Redis takes", len(sc.storeAsks), maxStoreAsks)
	}
	look := func(i int) error {
		if sc.rules[i].pol == nil {
			sc.ds[i], sc.state[i] = floodgate.Decision{RetryAfter: floodgate.Never}, peeked
			return nil
		}
		d, err := sc.rules[i].pol.(peeker).Peek(ctx, strings.Clone(sc.keyOf(i)))
		sc.ds[i], sc.state[i] = d, peeked
		return err
	}
	if over {
		// Refused before any decision: the others are looked at.
		for _, i := range sc.askOf {
			if err := look(i); err != nil {
				return true, contextStatus(err)
			}
		}
		return true, s.looks(sc, look)
	}
	if len(sc.storeAsks) > 0 {
		sc.each = grow(sc.each, len(sc.storeAsks))
		j, err := s.opts.Store.DecideEach(ctx, sc.storeAsks, sc.shadow, sc.each)
		if err != nil {
			return false, contextStatus(err)
		}
		over = j >= 0 && !sc.shadow[j]
		for k, i := range sc.askOf {
			d := sc.each[k]
			switch {
			case k == j:
				sc.ds[i], sc.state[i] = d, refusedHere
			case j < 0 || !over && !sc.shadow[k]:
				sc.ds[i], sc.state[i] = d, charged
			default: // a dry run of the request's cost: as a look
				sc.ds[i], sc.state[i] = asLook(d, sc.storeAsks[k].N), peeked
			}
		}
	}
	return over, s.looks(sc, look)
}

// maxStoreAsks is the most descriptors one decision on Redis takes.
const maxStoreAsks = 8

// looks answers the request's checks (hits 0) by a look each.
func (s *Server) looks(sc *scratch, look func(int) error) error {
	for i, k := range sc.kind {
		if k == kindCheck && sc.live(i) {
			if err := look(i); err != nil {
				return contextStatus(err)
			}
		}
	}
	return nil
}

// asLook turns a dry run of cost n into what a look (one request) says.
func asLook(d floodgate.Decision, n int64) floodgate.Decision {
	if !d.Allowed {
		return floodgate.Decision{Limit: d.Limit, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter}
	}
	d.Remaining += n - 1
	return d
}

// contextStatus is the gRPC status of a decision the caller gave up on.
func contextStatus(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, "rls: the caller's deadline passed before Redis answered")
	}
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, "rls: the caller gave up before Redis answered")
	}
	return status.Errorf(codes.Unavailable, "rls: %v", err)
}

// keyOf is descriptor i's key, which shares sc.key's bytes: floodgate
// limiters hash a key and keep none of it, so it is valid for the
// request; a Store's policies may keep one (lease mode), and are given
// a copy.
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
func (s *Server) respond(sc *scratch, ds []*rlv3.RateLimitDescriptor, over bool) *pb.RateLimitResponse {
	n := len(sc.kind)
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, n)}
	statuses := make([]pb.RateLimitResponse_DescriptorStatus, n) // one allocation for all
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
		stats := &r.stats
		if r.detailed != nil {
			if c := r.detailed.get(sc.detailedLabel(r.limit, ds[i].GetEntries())); c != nil {
				stats = c
			}
		}
		var left int64
		var overHere bool
		switch sc.state[i] {
		case refusedHere:
			overHere = true
		case peeked:
			left = remainingNow(d)
			overHere = uint64(left) < sc.cost[i]
		default:
			left = d.Remaining
		}
		if overHere {
			left = 0
			if sc.kind[i] == kindShadow {
				stats.add(statShadow, hits)
			} else {
				st.Code = pb.RateLimitResponse_OVER_LIMIT
			}
			stats.add(statOver, hits)
		} else {
			stats.add(statWithin, hits)
			// near_limit as envoyproxy/ratelimit counts it: the hits that
			// landed past the ratio's share of the limit.
			nearFloor := int64(math.Floor(float64(float32(r.limit.RequestsPerUnit) * float32(s.near))))
			if used := int64(r.limit.RequestsPerUnit) - left; used > nearFloor && hits > 0 {
				stats.add(statNear, uint64(min(int64(min(hits, math.MaxInt64)), used-nearFloor)))
			}
		}
		stats.add(statTotal, hits)
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
