package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/rls/internal/config"
	"github.com/puzpuzpuz/xsync/v4"
)

// Options configures a Server. The zero value serves in process, with
// envoyproxy/ratelimit's defaults.
type Options struct {
	// Shadow puts every rule in shadow mode (envoyproxy/ratelimit's
	// SHADOW_MODE): each request is decided and counted, and the overall
	// code is OK. The descriptors' statuses still say what was decided.
	Shadow bool
	// Quota puts every rule in quota mode (envoyproxy/ratelimit's
	// QUOTA_MODE), as a rule's quota_mode does: a descriptor over its
	// limit is answered OK, with its limit and nothing left and no
	// duration_until_reset, and named in the dynamic metadata's
	// quotaModeViolations; it does not refuse the request. A rule in
	// shadow mode stays in shadow mode.
	Quota bool
	// DynamicMetadata adds dynamic metadata to every response
	// (RESPONSE_DYNAMIC_METADATA), as envoyproxy/ratelimit writes it:
	// the domain; each descriptor's entries ("key=value"), its limit
	// override (as the message's text) and its hits_addend; the
	// request's hits_addend when set; quotaModeViolations, the indexes
	// of the descriptors over a limit in quota mode, when there are any;
	// and quotaModeEnabled, whether any descriptor's rule has
	// quota_mode (Quota alone does not set it).
	DynamicMetadata bool
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
	// Clock is the limiters' clock in process, in nanoseconds since the
	// Unix epoch, so that windows are aligned as envoyproxy/ratelimit
	// aligns them. nil is a clock read once from the wall clock, then
	// moved by the monotonic clock: never stepped by NTP or an operator,
	// so that no window is shortened or lengthened while it runs. Tests
	// give a floodgate.ManualClock set to a Unix time. With a Store it only
	// times the recycling of limit overrides (see MaxOverrides).
	Clock floodgate.Clock
	// MaxDescriptors is the most descriptors one request may carry; 0
	// means 64. A request with more is refused with InvalidArgument. Of
	// them, at most floodgate.MaxPolicies (8) distinct rules and keys
	// may be limited (a request's limited descriptors are decided
	// together, all or nothing): a request with more is refused with
	// InvalidArgument too.
	MaxDescriptors int
	// MaxOverrides is the most distinct per-descriptor limit overrides
	// (requests_per_unit and unit) the server keeps a policy for at once;
	// 0 means 1,024. An override is a fixed window, and once its last
	// request's window has ended it holds nothing a new one would not:
	// a new override past the bound takes the place of such an idle one.
	// While every one in the table has a window still running, a request
	// with a new one is over the limit (OVER_LIMIT, with the override's
	// limit and nothing remaining): never unlimited, and no key gains
	// allowance.
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
	// floodgate.LocalStoreConfig.MaxKeys does: 0, the default, is a
	// bound that keeps each rule within 64 MiB, so that a flood of new
	// descriptor values cannot grow memory without bound;
	// floodgate.Unbounded is none; negative is an error. It is for the
	// Store in process: with a Store, it must be 0.
	MaxKeys int
	// Store, if set, keeps every rule's counts there instead of in
	// process: redislimit.NewStore keeps them on Redis, shared by every
	// replica of the service. Each rule is a policy of the Store, named
	// by its place in the descriptor tree, and a request's limited
	// descriptors are decided together by the Store's Decide, in one
	// round trip at most; unless StopIncrementOverLimit, when one of them
	// refuses, the hits that Decide did not charge are then charged into
	// debt by the Store's Charge, in a second. On Redis Cluster, give the
	// Store a HashTag under which a request's keys share a slot: HashTag
	// does (every key of a domain in one slot). The Store's own
	// configuration says what happens while it cannot reach its state
	// (redislimit's FailureMode), and whether it leases (redislimit's
	// Lease). Close closes the Server's policies, which returns their
	// leases; the Store stays the caller's. nil keeps the counts in
	// process, on a floodgate.LocalStore with Clock and MaxKeys that the
	// Server closes at Close.
	Store floodgate.Store
	// StopIncrementOverLimit is envoyproxy/ratelimit's
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT. False, the default there,
	// in Envoy Gateway and here: every hit is charged, whatever its key
	// holds, and a hit that takes a key past its limit leaves it owing
	// the excess and is OVER_LIMIT, as is every hit while the key owes (a
	// check of hits_addend 0 included): a cost sent when a stream ends is
	// always counted. That is what a token budget needs, and a Store that
	// is a floodgate.Settler (both of floodgate's are). Each descriptor
	// is charged on its own, as that server charges it; a hit past what a
	// key can owe (floodgate.ErrDebtBound) charges nothing, and the
	// request is decided as with true.
	//
	// True: a hit is charged only if it passes, exact at any concurrency,
	// and a request's descriptors all or nothing; a refused hit charges
	// nothing. That is what a request limit wants: a client that keeps
	// sending while refused pays nothing for it.
	StopIncrementOverLimit bool
	// Pace, if set, is called every 64 rules while SetConfig checks the
	// new configuration's rules and carries the rules in use over to
	// it: a caller that reloads
	// while serving can pause there (see LoadOptions.Pace), so that a
	// reload of many rules never takes the CPU that requests need.
	// Requests are served meanwhile, by the configuration before.
	Pace func()
}

// HashTag is redislimit.Config.HashTag for a Store of a Server: the
// domain of a key the Server made, so that every key of a domain, and
// so every descriptor of a request, shares one Redis Cluster slot.
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

	opts    Options
	clock   floodgate.Clock
	near    float64
	store   floodgate.Store
	charger floodgate.Settler     // the Store, unless StopIncrementOverLimit: its Charge
	own     *floodgate.LocalStore // the Store in process, when Options gave none

	// mu serializes SetConfig's swap of the snapshot, Close, and each
	// rule's first use with the snapshot they read; a request that finds
	// its rule made takes no lock. setMu serializes SetConfig.
	mu     sync.Mutex
	setMu  sync.Mutex
	snap   atomic.Pointer[snapshot]
	closed bool

	// The limit overrides in use, at most Options.MaxOverrides of them;
	// ovMu serializes the making and recycling of one.
	overrides *xsync.Map[override, *rule]
	ovCount   atomic.Int64
	ovMu      sync.Mutex

	loads, loadErrors atomic.Int64
	serviceErrors     atomic.Int64
}

// snapshot is one configuration and the policies of its rules that have
// been used.
type snapshot struct {
	cfg   *config.Config
	rules []atomic.Pointer[rule] // by config.Limit.Index; nil until first used
}

// New returns a Server deciding by cfg. Close it when done.
func New(cfg *Config, opts Options) (*Server, error) {
	if cfg == nil || cfg.c == nil {
		return nil, errors.New("rls: New needs a configuration")
	}
	if r := opts.NearLimitRatio; r < 0 || r > 1 || math.IsNaN(r) {
		return nil, fmt.Errorf("rls: NearLimitRatio must lie in [0, 1], got %v", r)
	}
	if opts.MaxDescriptors < 0 || opts.MaxOverrides < 0 || opts.MaxDetailed < 0 {
		return nil, errors.New("rls: MaxDescriptors, MaxOverrides and MaxDetailed must be 0 (the default) or positive")
	}
	if opts.MaxKeys < 0 {
		return nil, fmt.Errorf("rls: MaxKeys must be 0 (the default bound), positive or floodgate.Unbounded, got %d", opts.MaxKeys)
	}
	if opts.Store != nil && opts.MaxKeys != 0 {
		return nil, errors.New("rls: MaxKeys is for the Store in process; with a Store, bound its keys there")
	}
	s := &Server{opts: opts, clock: opts.Clock, near: opts.NearLimitRatio, store: opts.Store,
		overrides: xsync.NewMap[override, *rule]()}
	if s.clock == nil {
		s.clock = newUnixClock()
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
	if s.store == nil {
		s.own = floodgate.NewLocalStore(floodgate.LocalStoreConfig{Clock: s.clock, MaxKeys: opts.MaxKeys})
		s.store = s.own
	}
	if !opts.StopIncrementOverLimit {
		c, ok := s.store.(floodgate.Settler)
		if !ok {
			s.Close()
			return nil, fmt.Errorf("rls: the Store takes no charge past a limit (%T is not a floodgate.Settler): set StopIncrementOverLimit", s.store)
		}
		s.charger = c
	}
	if err := s.check(context.Background(), cfg.c, nil); err != nil {
		s.Close()
		return nil, err
	}
	s.snap.Store(&snapshot{cfg: cfg.c, rules: make([]atomic.Pointer[rule], cfg.c.Len())})
	s.loads.Add(1)
	return s, nil
}

// unixClock reads Unix nanoseconds that never step: the wall clock's
// reading at start, plus Go's monotonic time since.
type unixClock struct {
	start time.Time
	unix  int64
}

func (c *unixClock) Now() int64 { return c.unix + int64(time.Since(c.start)) }

// newUnixClock returns a clock of nanoseconds since the Unix epoch that
// moves with the monotonic clock: read once from the wall clock, then
// never stepped by NTP or an operator, so that no window is shortened
// or lengthened while it runs.
func newUnixClock() floodgate.Clock {
	now := time.Now()
	return &unixClock{start: now, unix: now.UnixNano()}
}

// SetConfig makes c the Server's configuration for every request that
// starts after it returns. A rule that keeps its place in the descriptor
// tree and its algorithm keeps every key's state: its policy takes the
// new limit by SetRule, so no client gains allowance from the reload. A
// rule whose algorithm changes starts afresh. If a rule of c cannot be
// held (see CheckConfig), SetConfig returns the error and changes nothing.
// Requests go on meanwhile, by the configuration before: SetConfig
// carries the rules in use over without a lock (pausing at Options.Pace),
// and holds the lock that a rule's first request takes only to carry
// over the rules first used meanwhile and to swap the configuration; the
// policies it drops are closed after.
//
// SetConfig stops when ctx ends before c is in force: it then returns
// ctx's cause (context.Cause), and the configuration before stays, every
// rule's state as it was. Only the last step, which gives the rules in
// use their new limits and swaps the configuration, does not stop: it
// takes a few atomic operations a rule whose limit changed.
func (s *Server) SetConfig(ctx context.Context, c *Config) error {
	if c == nil || c.c == nil {
		return errors.New("rls: SetConfig needs a configuration")
	}
	cfg := c.c
	if err := s.check(ctx, cfg, s.opts.Pace); err != nil {
		return err
	}
	s.setMu.Lock()
	defer s.setMu.Unlock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return errors.New("rls: SetConfig after Close")
	}
	var dropped []*rule
	defer func() {
		for _, r := range dropped {
			r.close()
		}
	}()
	old := s.snap.Load()
	next := &snapshot{cfg: cfg, rules: make([]atomic.Pointer[rule], cfg.Len())}
	// prepare makes r's rule in next, or drops it; changed are the rules
	// whose policy takes a new limit, which set gives them.
	var changed []*rule
	prepare := func(r *rule) {
		nl := cfg.Same(r.limit)
		if nl == nil || nl.Unlimited || nl.Algorithm != r.limit.Algorithm || r.zero() != (nl.RequestsPerUnit == 0) {
			dropped = append(dropped, r)
			return
		}
		n := r.reconfigured(nl, s.opts.MaxDetailed)
		next.rules[nl.Index].Store(n)
		if !r.zero() && ruleOf(nl) != ruleOf(r.limit) {
			changed = append(changed, r, n)
		}
	}
	set := func() {
		for i := 0; i < len(changed); i += 2 {
			r, n := changed[i], changed[i+1]
			if r.pol.SetRule(ruleOf(n.limit)) != nil {
				dropped = append(dropped, r) // CheckConfig took the rule: not reached; the rule would start afresh
				next.rules[n.limit.Index].Store(nil)
			}
		}
		changed = changed[:0]
	}
	// The rules in use are prepared without the lock, requests served
	// meanwhile by the snapshot before, and stopped, nothing changed,
	// when ctx ends; then their policies take their new limits (a
	// policy's SetRule is safe while it decides); those first used
	// meanwhile, under the lock, with the swap.
	carried := make([]bool, len(old.rules))
	for i := range old.rules {
		if i%64 == 63 {
			if s.opts.Pace != nil {
				s.opts.Pace()
			}
			if ctx.Err() != nil {
				dropped = nil // still the snapshot's
				return context.Cause(ctx)
			}
		}
		if r := old.rules[i].Load(); r != nil {
			prepare(r)
			carried[i] = true
		}
	}
	if ctx.Err() != nil {
		dropped = nil
		return context.Cause(ctx)
	}
	set()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		dropped = nil // Close has closed every policy of the snapshot
		return errors.New("rls: SetConfig after Close")
	}
	for i := range old.rules {
		if r := old.rules[i].Load(); r != nil && !carried[i] {
			prepare(r)
		}
	}
	set()
	s.snap.Store(next)
	s.loads.Add(1)
	return nil
}

// CheckConfig reports whether the Server's Store can hold every rule of
// cfg (see floodgate.Store's CheckRule): in process, what floodgate.New
// takes; on Redis, what redislimit's Policy takes (Redis bounds some
// rules, as a sliding counter's Limit × Period, and a Lease must be able
// to save round trips under each bucket's rule). The error names the
// first rule refused, by its file's key. New and SetConfig check; a tool
// that validates config files may too.
func (s *Server) CheckConfig(cfg *Config) error {
	if cfg == nil || cfg.c == nil {
		return errors.New("rls: CheckConfig needs a configuration")
	}
	return s.check(context.Background(), cfg.c, nil)
}

// checkMemo is the most shapes of rules (algorithm and rule) that a
// check remembers.
const checkMemo = 1024

// check is CheckConfig, calling pace (if not nil) every 64 rules, and
// stopped with ctx's cause when ctx ends.
func (s *Server) check(ctx context.Context, cfg *config.Config, pace func()) error {
	type shape struct {
		alg  string
		rule floodgate.Rule
	}
	// The shapes checked, so that a rule like many others is checked
	// once; at most checkMemo of them, past which each is checked anew
	// (a Store's CheckRule is cheap: a map of a million distinct limits,
	// as a push may give each rule its own, cost more than the checks).
	seen := map[shape]error{}
	for i := range cfg.Len() {
		if i%64 == 63 {
			if pace != nil {
				pace()
			}
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
		}
		l := cfg.Rule(i)
		if l.Unlimited || l.RequestsPerUnit == 0 {
			continue
		}
		k := shape{l.Algorithm, ruleOf(l)}
		err, done := seen[k]
		if !done {
			err = s.store.CheckRule(l.Algorithm, k.rule)
			if len(seen) < checkMemo {
				seen[k] = err
			}
		}
		if err != nil {
			return fmt.Errorf("rls: rule %s (%d per %s, %s): %w", l.Key, l.RequestsPerUnit, l.Unit, l.Algorithm, err)
		}
	}
	return nil
}

// Close closes the Server's policies, which on Redis returns their
// unspent leases, and the Store in process it made. It must not be used
// after. Close is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var all []*rule
	if snap := s.snap.Load(); snap != nil {
		for i := range snap.rules {
			if r := snap.rules[i].Load(); r != nil {
				all = append(all, r)
			}
		}
	}
	s.mu.Unlock()
	s.ovMu.Lock()
	s.overrides.Range(func(o override, r *rule) bool {
		all = append(all, r)
		s.overrides.Delete(o)
		return true
	})
	s.ovMu.Unlock()
	var err error
	for _, r := range all {
		err = errors.Join(err, r.close())
	}
	if s.own != nil {
		err = errors.Join(err, s.own.Close())
	}
	return err
}
