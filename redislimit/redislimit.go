package redislimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/tally"
	"github.com/redis/go-redis/v9"
)

// FailureMode says how a Limiter decides while Redis cannot.
type FailureMode uint8

const (
	// FailLocal, the default, decides with an in-process floodgate
	// limiter on Config.Local (by default, Config.Rule). Each process then
	// applies the rule on its own: with R replicas a client may pass up to
	// R times the rule while Redis is away, unless Local says less.
	FailLocal FailureMode = iota
	// FailOpen admits every request while Redis cannot decide.
	FailOpen
	// FailClosed denies every request while Redis cannot decide, with
	// RetryAfter set to the breaker's probe interval.
	FailClosed
)

// String returns the mode's name.
func (m FailureMode) String() string {
	switch m {
	case FailLocal:
		return "FailLocal"
	case FailOpen:
		return "FailOpen"
	case FailClosed:
		return "FailClosed"
	}
	return fmt.Sprintf("FailureMode(%d)", uint8(m))
}

// Config configures a Limiter. Only Rule is required.
type Config struct {
	// Algorithm is one of floodgate's names: "token_bucket" (the default
	// when empty), "leaky_bucket", "fixed_window", "sliding_counter" or
	// "sliding_log". The buckets and the windows hold a fixed state per
	// key (MEMORY USAGE: 152 bytes for a bucket or a window); the log
	// holds an entry per instant of admitted cost still in the window,
	// about 12 bytes each (168 bytes for a key with one entry, 1,384 with
	// 100), and its calls cost about twice a window's, whatever the
	// number of entries.
	Algorithm string
	// Rule is the limit per client, with floodgate's meaning (see
	// floodgate.Rule). Redis's clock counts microseconds, so the rule's
	// step (Period/Limit for the buckets, Period for the windows and the
	// log) is held in whole microseconds: exact when it is one, else
	// rounded up, so that a client never passes more than the rule. New
	// refuses a rule whose step is below 1 µs, or whose rounding would
	// slow it by more than 0.1% (a step under 1 ms that is not a whole
	// number of µs).
	Rule floodgate.Rule
	// Prefix begins every key; "" means "floodgate". Keep it free of
	// braces unless every key is meant for one Cluster slot.
	Prefix string
	// Timeout is each call's budget for Redis, including a reload of the
	// script after a restart; 0 means 100ms. The caller's context can only
	// shorten it. The round trip is cut at Timeout; a call whose context
	// cannot end (context.Background) may wait up to Timeout/8 longer for
	// a pooled connection, since such calls share one timer for each
	// eighth of Timeout instead of starting their own.
	Timeout time.Duration
	// FailureMode decides while Redis cannot; the zero value is FailLocal.
	FailureMode FailureMode
	// Local is FailLocal's rule; nil means Rule. It is an error with
	// another FailureMode.
	Local *floodgate.Rule
	// LocalMaxKeys bounds the keys the FailLocal limiter holds (see
	// floodgate.Config.MaxKeys); 0 means 65,536.
	LocalMaxKeys int

	// BreakAfter is how many consecutive failures open the circuit
	// breaker; 0 means 3.
	BreakAfter int
	// ProbeEvery is how long the breaker then stays open before one call
	// probes Redis again; 0 means 1s. On a Redis Cluster it also spaces
	// the reloads of the slot map that failures ask for (Stats.Reloads).
	ProbeEvery time.Duration
	// Clock times the breaker (and, on a Redis Cluster, the spacing of
	// its slot map's reloads) and the FailLocal limiter; nil means
	// floodgate.SystemClock(). Nothing else reads it: decisions on Redis
	// use Redis's clock, and lease mode times its batches on this
	// machine's monotonic clock, which runs with Redis's (see Lease), so
	// that a Clock that lags, such as a coarse one, cannot keep a unit
	// spendable after Redis stopped counting it.
	Clock floodgate.Clock
	// OnError, when set, is called with every error from Redis that the
	// FailureMode answered for. It runs on the request path.
	OnError func(error)

	// Lease turns on lease mode: each replica takes a key's allowance
	// from Redis in batches and spends them in process. The zero value
	// decides every request with a round trip. See Lease.
	Lease Lease

	// HashTag, for a Store's policies only (New refuses it), names the
	// part of a client's key that chooses its Redis Cluster slot: keys
	// whose tags are equal share a slot, whatever the policy, so that
	// Store.DecideEach can decide them in one script. nil is the whole
	// key. The key is then "<Prefix>:<policy>:<algorithm>:{<tag>}:<key>",
	// each of tag and key as 32 hex digits of its hash.
	HashTag func(key string) string
}

// Stats counts what a Limiter has done since New.
type Stats struct {
	// Calls counts round trips to Redis: the decisions in flight at once
	// go together, as one pipeline, in one round trip (see the package's
	// doc). Errors counts the calls that failed, each call of a failed
	// round trip; and Timeouts, those of the failures that ran out of
	// Config.Timeout.
	Calls, Errors, Timeouts int64
	// Loads counts the calls that sent their script whole because Redis
	// did not have it: the first on a server, and the first after a
	// restart, a failover or SCRIPT FLUSH.
	Loads int64
	// Fallbacks counts decisions made by the FailureMode, with Redis
	// failing or the breaker open; Opens counts the times the breaker
	// opened.
	Fallbacks, Opens int64
	// KeyErrors counts the Errors that were error replies about one key's
	// data (say, WRONGTYPE on a key something else wrote): answered by the
	// FailureMode, they open the breaker for no one.
	KeyErrors int64
	// Abandoned counts calls whose caller's context ended before Redis
	// answered (or before the call): denied, and counted against no
	// breaker (see AllowN).
	Abandoned int64
	// Leased counts the units taken from Redis as leases (beyond the cost
	// of the request that took them); Returned, the unspent units given
	// back, by Close or when a lease's TTL ran out; and Lapsed, the
	// unspent units whose time passed before they could go back (Redis had
	// already taken them back) or whose return failed.
	Leased, Returned, Lapsed int64
	// Refills counts the round trips a request made in lease mode because
	// its key's lease could not serve it (a new key, a burst, a lease run
	// out before its renewal came); Renewals, the batches the Limiter's
	// background goroutine asked for ahead, before a lease ran out. A busy
	// key at a steady rate should see Renewals grow and Refills stay.
	Refills, Renewals int64
	// Reloads counts the times a Redis Cluster's slot map was reloaded
	// after a failure (see Config.ProbeEvery).
	Reloads int64
}

// Limiter applies one Rule to every client, with the state in Redis. It is
// safe for concurrent use.
type Limiter struct {
	client   redis.UniversalClient
	script   *script
	name     string              // the algorithm
	keyHead  string              // "<prefix>:<algorithm>:"
	tagged   bool                // a Store's: the client's hash is a Cluster hash tag, in braces
	tag      func(string) string // with tagged: the part of the key that is the tag (Config.HashTag)
	kind     scriptKind          // the scripts' ARGV[argKind]
	cur      atomic.Pointer[rules]
	timeout  time.Duration
	mode     FailureMode
	local    *floodgate.Limiter
	twin     floodgate.StorePolicy // a Store's: local, as a policy of the Store's LocalStore
	clock    floodgate.Clock
	breaker  breaker
	onError  func(error)
	margin   int64         // ms added to each key's TTL
	lease    *leases       // nil unless lease mode is on
	requests *tally.Counts // AllowN's decisions, by result
	batch    batcher       // the round trips of calls within Timeout
	budget   budgets       // Timeout for callers whose context cannot end

	// redisClock is nil in production, where the scripts read Redis's
	// clock (TIME) and lease mode this machine's monotonic clock. A test
	// sets it to have both take its now instead: the one place the choice
	// is made (see scriptNow and leaseNow).
	redisClock floodgate.Clock

	setMu        sync.Mutex   // SetRule's, one at a time
	localFollows bool         // the FailLocal limiter follows SetRule (Config.Local was nil)
	offset       atomic.Int64 // Redis's clock minus this machine's, µs, at SetRule's last TIME

	calls, errs, timeouts, loads, fallbacks, opens, keyErrs, abandoned atomic.Int64
	otherErrs                                                          atomic.Int64 // the errs neither timeouts nor keyErrs
	reloaded, reloads                                                  atomic.Int64 // the last cluster reload (clock ns), and their count
}

const (
	defaultTimeout    = 100 * time.Millisecond
	defaultBreakAfter = 3
	defaultProbeEvery = time.Second
	defaultLocalKeys  = 1 << 16
	ttlMargin         = 1000 // ms
)

// New validates cfg and returns a Limiter on client. It returns an error for
// a rule that floodgate would reject, or that Redis's microseconds cannot
// hold (see Config.Rule); for an unknown algorithm or one with no Redis
// form; for a negative Timeout, BreakAfter, ProbeEvery or LocalMaxKeys; for
// Local with a FailureMode other than FailLocal; and for a go-redis client
// that ignores its context's deadline, since a stalled server would then
// hold each call past Timeout: build it with ContextTimeoutEnabled: true.
// The client's retries do not matter: redislimit turns them off for its own
// commands, because a script that timed out may already have charged its
// request.
func New(client redis.UniversalClient, cfg Config) (*Limiter, error) {
	if cfg.HashTag != nil {
		return nil, errors.New("redislimit: HashTag is for a Store's policies (NewStore): a Limiter's keys have no tag")
	}
	return newLimiter(client, cfg, nil)
}

// newLimiter is New, with setup, when not nil, run on the Limiter before
// lease mode's goroutine starts: the tests' seam to put in their clocks.
func newLimiter(client redis.UniversalClient, cfg Config, setup func(*Limiter)) (*Limiter, error) {
	if client == nil {
		return nil, errors.New("redislimit: New needs a client")
	}
	if err := checkClient(client); err != nil {
		return nil, err
	}
	name := cfg.Algorithm
	if name == "" {
		name = floodgate.TokenBucket
	}
	s, kind, interval, err := parseRule(name, cfg.Rule)
	if err != nil {
		return nil, err
	}
	l := &Limiter{client: client, script: s, name: name, kind: kind, timeout: cfg.Timeout, mode: cfg.FailureMode,
		clock: cfg.Clock, onError: cfg.OnError, margin: ttlMargin, requests: tally.New(int(numResults))}
	l.batch.l = l
	if strings.TrimSpace(cfg.Prefix) != cfg.Prefix {
		return nil, fmt.Errorf("redislimit: Prefix %q has leading or trailing space", cfg.Prefix)
	}
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = "floodgate"
	}
	l.keyHead = prefix + ":" + name + ":"

	switch {
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("redislimit: Timeout must be 0 (meaning %v) or positive, got %v", defaultTimeout, cfg.Timeout)
	case cfg.Timeout == 0:
		l.timeout = defaultTimeout
	}
	l.budget.d, l.budget.grain = l.timeout, l.timeout/8
	if cfg.FailureMode > FailClosed {
		return nil, fmt.Errorf("redislimit: unknown %v", cfg.FailureMode)
	}
	if cfg.BreakAfter < 0 || cfg.ProbeEvery < 0 || cfg.LocalMaxKeys < 0 {
		return nil, fmt.Errorf("redislimit: BreakAfter, ProbeEvery and LocalMaxKeys must be 0 (the default) or positive, got %d, %v, %d",
			cfg.BreakAfter, cfg.ProbeEvery, cfg.LocalMaxKeys)
	}
	if l.clock == nil {
		l.clock = floodgate.SystemClock()
	}
	l.breaker.after = int64(orDefault(cfg.BreakAfter, defaultBreakAfter))
	l.breaker.every = int64(orDefault(cfg.ProbeEvery, defaultProbeEvery))
	l.breaker.openUntil.Store(closed)

	switch {
	case cfg.Local != nil && cfg.FailureMode != FailLocal:
		return nil, fmt.Errorf("redislimit: Local is the rule of FailLocal, and FailureMode is %v", cfg.FailureMode)
	case cfg.FailureMode == FailLocal:
		rule := cfg.Rule
		if cfg.Local != nil {
			rule = *cfg.Local
		}
		local, err := floodgate.New(floodgate.Config{Algorithm: name, Rule: rule, Clock: cfg.Clock,
			MaxKeys: orDefault(cfg.LocalMaxKeys, defaultLocalKeys)})
		if err != nil {
			return nil, fmt.Errorf("redislimit: Local: %w", err)
		}
		l.local, l.localFollows = local, cfg.Local == nil
	}
	if cfg.Lease.Max < 0 || cfg.Lease.TTL < 0 {
		return nil, fmt.Errorf("redislimit: Lease.Max and Lease.TTL must be 0 or positive, got %d and %v", cfg.Lease.Max, cfg.Lease.TTL)
	}
	if cfg.Lease.Max > 0 {
		l.lease = newLeases(cfg.Lease, orDefault(cfg.LocalMaxKeys, defaultLocalKeys))
		if err := l.lease.check(kind, cfg.Rule.Capacity(), interval); err != nil {
			return nil, err
		}
	}
	l.cur.Store(l.newRules(cfg.Rule, interval, nil, 0))
	if setup != nil {
		setup(l)
	}
	if l.lease != nil {
		go l.sweeper()
	}
	return l, nil
}

// orDefault returns v, or def when v is zero.
func orDefault[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

const (
	maxTau            = 1 << 50 // the scripts' bound on capacity × interval, µs
	maxSlidingProduct = 1 << 52 // the window script's bound on Limit × Period, µs
	maxLogPeriod      = 1 << 50 // the log script's bound on Period, µs
	maxLogLimit       = 1 << 31 // the log script's bound on Limit
)

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// micros converts a step of ns nanoseconds to whole microseconds, rounding
// up, and refuses a step that the rounding would change by more than 0.1%.
func micros(ns int64, what string) (int64, error) {
	if ns < 1000 {
		return 0, fmt.Errorf("redislimit: %s is %v, below the 1µs that Redis's clock counts", what, time.Duration(ns))
	}
	us := ceilDiv(ns, 1000)
	if ns%1000 != 0 && ns < int64(time.Millisecond) {
		return 0, fmt.Errorf("redislimit: %s is %v, not a whole number of microseconds; rounding it up to %dµs would slow the rule by more than 0.1%%", what, time.Duration(ns), us)
	}
	return us, nil
}

// checkClient refuses a go-redis client that would not hold a call to its
// context's deadline. (Its retries do not matter: every command of ours is
// marked NoRetry.) Another implementation of UniversalClient answers for
// itself.
func checkClient(c redis.UniversalClient) error {
	var ctxTimeout bool
	switch c := c.(type) {
	case *redis.Client:
		ctxTimeout = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		ctxTimeout = c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		ctxTimeout = c.Options().ContextTimeoutEnabled
	default:
		return nil
	}
	if !ctxTimeout {
		return errors.New("redislimit: the client ignores its context's deadline, so a stalled server would hold each call for the client's ReadTimeout instead of Config.Timeout; build it with ContextTimeoutEnabled: true")
	}
	return nil
}

// Allow reports whether one request from key may pass, with the details a
// response needs. See AllowN.
func (l *Limiter) Allow(ctx context.Context, key string) (floodgate.Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN decides a request of cost n from key. A cost below 1 or above the
// rule's capacity is a denial with RetryAfter == floodgate.Never, and
// reaches no server.
//
// The error is nil whenever the Limiter decided: by Redis, or by the
// FailureMode while Redis failed (see Stats and Config.OnError). It is the
// context's error when ctx ended before Redis answered. Such a call is
// abandoned: it is denied under every FailureMode (its caller is gone;
// admitting it would let a client pass the shared limit by sending a
// deadline too short for a round trip), and it counts against no breaker,
// whatever deadline the caller sent. Set Timeout below the deadlines
// callers carry: a call that ends by its caller's deadline tells the
// breaker nothing, even when Redis is the one that stalled.
func (l *Limiter) AllowN(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	rs := l.rs()
	if n < 1 || int64(n) > rs.capacity {
		l.requests.Inc(int(resDenied))
		return floodgate.Decision{Limit: rs.capacity, RetryAfter: floodgate.Never}, nil
	}
	if l.lease != nil {
		d, res, err := l.leaseAllow(ctx, key, int64(n))
		l.requests.Inc(int(res))
		return d, err
	}
	r, err := l.decide(ctx, key, call{n: int64(n), rs: rs})
	l.requests.Inc(int(r.res))
	return r.d, err
}

// Peek returns what Allow would answer for key now, and changes nothing.
// In lease mode it asks Redis, and counts this replica's unspent lease as
// remaining too.
func (l *Limiter) Peek(ctx context.Context, key string) (floodgate.Decision, error) {
	r, err := l.decide(ctx, key, call{n: 1, dry: true})
	if l.lease == nil || err != nil {
		return r.d, err
	}
	if st, ok := l.lease.states.Load(key); ok {
		now, held := l.leaseNow(), int64(0)
		for _, g := range []*grant{st.g.Load(), st.next.Load()} {
			if g != nil {
				held += l.lease.usable(g, g.units.Load(), now)
			}
		}
		// Redis's Remaining is after the peeked request; so is this.
		if held > 0 && r.d.Allowed {
			r.d.Remaining += held
		} else if held > 0 {
			r.d.Allowed, r.d.Remaining, r.d.RetryAfter = true, r.d.Remaining+held-1, 0
		}
	}
	return r.d, nil
}

// Reset forgets key's state in Redis, and in the FailLocal limiter, so that
// its next request finds it full. It returns Redis's error, if any: a reset
// has no failure mode.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if l.local != nil {
		l.local.Reset(key)
	}
	if l.lease != nil {
		if st, ok := l.lease.states.LoadAndDelete(key); ok {
			l.lease.size.Add(-1)
			for _, g := range []*grant{st.g.Swap(nil), st.next.Swap(nil)} {
				if g != nil {
					g.units.Store(retiredUnits)
				}
			}
			st.deniedUntil.Store(0)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	err := l.client.Process(ctx, noRetry{redis.NewIntCmd(ctx, "del", l.Key(key))})
	if err != nil {
		return fmt.Errorf("redislimit: reset %q: %w", key, err)
	}
	return nil
}

// Key returns the Redis key that holds key's state:
// "<Prefix>:<algorithm>:" and 32 hex digits of key's SHA-256 (in braces,
// for a Store's policy: see Store; after its tag's, with Config.HashTag).
func (l *Limiter) Key(key string) string {
	var h [32]byte
	hashInto(&h, key)
	if l.tag != nil {
		var t [32]byte
		hashInto(&t, l.tag(key))
		return l.keyHead + "{" + string(t[:]) + "}:" + string(h[:])
	}
	if l.tagged {
		return l.keyHead + "{" + string(h[:]) + "}"
	}
	return l.keyHead + string(h[:])
}

// Close stops what lease mode started and returns every unspent lease to
// Redis. It first waits for lease mode's round trips in flight (a refill
// in a request's round trip, a renewal, a return), within Timeout, and
// then returns every unit held, theirs too, within another Timeout: when
// Close returns, lease mode sends nothing more, and the client may be
// closed. After Close the Limiter still decides, each request by a round
// trip. Close is idempotent, and a Limiter without leases has it too (it
// does nothing). The error says how many units could not be returned, and
// whether round trips were still running after Timeout: those units are
// lost (they count in Stats.Lapsed), so the clients under-admit by as many
// until Redis would have given them back anyway.
func (l *Limiter) Close() error {
	if l.lease == nil {
		return nil
	}
	return l.closeLeases()
}

// Stats returns the counts so far.
func (l *Limiter) Stats() Stats {
	s := Stats{
		Calls: l.calls.Load(), Errors: l.errs.Load(), Timeouts: l.timeouts.Load(), Loads: l.loads.Load(),
		Fallbacks: l.fallbacks.Load(), Opens: l.opens.Load(), KeyErrors: l.keyErrs.Load(), Abandoned: l.abandoned.Load(),
		Reloads: l.reloads.Load(),
	}
	if ls := l.lease; ls != nil {
		s.Leased, s.Returned, s.Lapsed = ls.leased.Load(), ls.returned.Load(), ls.lapsed.Load()
		s.Refills, s.Renewals = ls.refills.Load(), ls.renewals.Load()
	}
	return s
}

// call is what one round trip asks of the script: a request of cost n
// (0 for a return alone), or with dry its peek; want extra units for a
// lease; give unspent leased units back, charged to window gk (the
// windows), whose slots ended at gk on Redis's clock (the buckets), or in
// the entry stamped gk (the log).
type call struct {
	n, want, give, gk int64
	dry               bool
	budget            time.Duration // the call's time for Redis; 0 means Timeout
	rs                *rules        // the rule it is sent under; nil means the one in force
}

// reply is the script's answer: the decision; extra, the units leased
// beyond n; horizon, how long (µs) they stay spendable at most; k, the
// window they were charged to (the windows), their entry's stamp (the
// log) or Redis's clock (the buckets); redis, false when the
// FailureMode answered instead; res, the decision's result as
// AppendCounts counts it; and rs, the rule the call was sent under.
type reply struct {
	d                 floodgate.Decision
	extra, horizon, k int64
	redis             bool
	res               result
	rs                *rules
}

// decide runs the script for key, or falls back.
//
// What counts against the breaker is Redis's own failure only: an error
// that says the server cannot serve (a broken connection, a refused dial,
// LOADING, BUSY, READONLY and the like), or the limiter's own Timeout
// running out. A call whose caller's context ended first is abandoned: it
// tells nothing of Redis, since a client sets its own deadline (gRPC's
// grpc-timeout) and could otherwise open the breaker for every client. An
// error reply about one key's data (WRONGTYPE, a script error on a value
// something else wrote there) is that key's: it is answered by the
// FailureMode and counted in Errors and KeyErrors, but it opens the
// breaker for no one.
func (l *Limiter) decide(ctx context.Context, key string, c call) (reply, error) {
	if c.rs == nil {
		c.rs = l.rs()
	}
	if c.budget <= 0 {
		c.budget = l.timeout
	}
	var r reply
	o, callerErr := l.guarded(ctx, c.budget, func() (err error) {
		r, err = l.run(ctx, key, c)
		return err
	})
	switch o {
	case tripAnswered:
		r.res = decided(r.d.Allowed)
		return r, nil
	case tripAbandoned:
		return reply{d: l.abandon(), res: resAbandoned}, callerErr
	}
	return reply{d: l.fallback(key, c.n, c.dry), res: l.failResult()}, nil
}

// What became of a round trip that guarded ran.
type tripOutcome int

const (
	tripAnswered  tripOutcome = iota // Redis answered: the answer stands
	tripAbandoned                    // the caller's context ended first
	tripFailed                       // Redis did not answer, or the breaker is open: the FailureMode decides
)

// guarded runs trip, one round trip for a call whose caller's context is
// ctx, within budget, under l's breaker: a caller whose context has ended
// sends nothing; an open breaker sends nothing and fails; an answer closes
// the breaker; a caller's deadline or cancellation is the caller's, and
// counts against no breaker; any other failure is counted, tried against
// the breaker (an error about one key's data is not Redis down), and
// given to OnError. callerErr is the caller's context's error when the
// caller ended first.
func (l *Limiter) guarded(ctx context.Context, budget time.Duration, trip func() error) (o tripOutcome, callerErr error) {
	if err := ctx.Err(); err != nil {
		return tripAbandoned, err
	}
	probe, ok := l.breaker.enter(l.clock.Now())
	if !ok {
		return tripFailed, nil
	}
	deadline := time.Now().Add(budget)
	err := trip()
	if err == nil {
		l.breaker.succeed(probe)
		return tripAnswered, nil
	}
	if callerErr := callerEnded(ctx, deadline); callerErr != nil {
		l.breaker.abandon(probe)
		return tripAbandoned, callerErr
	}
	switch l.failed(err) {
	case keyErr:
		l.breaker.succeed(probe) // Redis answered: it is up
	default:
		l.serverFailed()
		if l.breaker.fail(probe, l.clock.Now()) {
			l.opens.Add(1)
		}
	}
	if l.onError != nil {
		l.onError(err)
	}
	return tripFailed, nil
}

// abandon answers a call whose caller's context ended before Redis did,
// under every FailureMode, with a denial, and counts nothing against the
// breaker. The FailureMode answers for Redis when Redis cannot decide; a
// caller that gave up did not find Redis unable, and admitting it (as
// FailOpen would, or FailLocal's limiter, a limit per replica) would let
// any client pass the shared limit by sending a deadline too short for a
// round trip. Its caller is gone, so the denial turns no one away.
func (l *Limiter) abandon() floodgate.Decision {
	l.abandoned.Add(1)
	return floodgate.Decision{Limit: l.rs().capacity}
}

// fallback is the FailureMode's answer.
func (l *Limiter) fallback(key string, n int64, dry bool) floodgate.Decision {
	l.fallbacks.Add(1)
	capacity := l.rs().capacity
	switch l.mode {
	case FailOpen:
		return floodgate.Decision{Allowed: true, Limit: capacity, Remaining: capacity - n}
	case FailClosed:
		return floodgate.Decision{Limit: capacity, RetryAfter: time.Duration(l.breaker.every)}
	}
	if dry {
		return l.local.Peek(key)
	}
	return l.local.AllowN(key, n)
}
