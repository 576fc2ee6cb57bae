package redislimit

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/redis/go-redis/v9"
)

// FailureMode says how a Store decides while Redis cannot.
type FailureMode uint8

const (
	// FailLocal, the default, decides with an in-process floodgate
	// limiter for each policy, on its own rule (a Limiter's Config.Local,
	// if set). Each process then applies the rule on its own: with R
	// replicas a client may pass up to R times the rule while Redis is
	// away, unless Local says less.
	FailLocal FailureMode = iota
	// FailOpen admits every request while Redis cannot decide; its
	// decisions are Unreached.
	FailOpen
	// FailClosed denies every request while Redis cannot decide, with
	// RetryAfter set to the breaker's probe interval; its decisions are
	// Unreached, so that a caller that only checks a key (a Peek, which
	// would charge nothing) is refused too.
	FailClosed
	// FailError fails every call that Redis cannot decide: it is refused
	// (Unreached, RetryAfter the breaker's probe interval), and its error
	// wraps floodgate.ErrUnreached and Redis's own error, so that the
	// caller chooses what a request is owed, as envoyproxy/ratelimit's
	// callers do when its Redis fails: Envoy's failure_mode_deny decides.
	// The error never wraps a context's error (Redis running out of
	// Timeout is no caller's deadline); its Timeout method reports a
	// Redis that did not answer in time, or a breaker opened by one.
	// httplimit and grpclimit refuse such a request, as FailClosed does.
	FailError
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
	case FailError:
		return "FailError"
	}
	return fmt.Sprintf("FailureMode(%d)", uint8(m))
}

// Config configures a Limiter (New), or a Store and every policy it
// makes (NewStore). Only Rule is required, and only of a Limiter: a
// Store's policies bring their own algorithm and rule.
type Config struct {
	// Algorithm is one of floodgate's names: "token_bucket" (the default
	// when empty), "leaky_bucket", "fixed_window", "sliding_counter" or
	// "sliding_log". The buckets and the windows hold a fixed state per
	// key (MEMORY USAGE: 152 bytes for a bucket or a window); the log
	// holds an entry per instant of admitted cost still in the window,
	// about 12 bytes each (168 bytes for a key with one entry, 1,384 with
	// 100), and its calls cost about twice a window's, whatever the
	// number of entries. A Limiter's only: leave it empty for NewStore.
	Algorithm string
	// Rule is the limit per client, with floodgate's meaning (see
	// floodgate.Rule). Redis's clock counts microseconds, so the rule's
	// step (Period/Limit for the buckets, Period for the windows and the
	// log) is held in whole microseconds: exact when it is one, else
	// rounded up, so that a client never passes more than the rule. New
	// refuses a rule whose step is below 1 µs, or whose rounding would
	// slow it by more than 0.1% (a step under 1 ms that is not a whole
	// number of µs). A Limiter's only: leave it zero for NewStore.
	Rule floodgate.Rule
	// Prefix begins every key; "" means "floodgate". Keep it free of
	// braces unless every key is meant for one Cluster slot.
	Prefix string
	// Timeout is each call's budget for Redis, including a reload of the
	// script after a restart, counted from the call; 0 means 100ms. The
	// caller's context can only shorten what it waits. The round trip is
	// cut at Timeout; a call whose context cannot end
	// (context.Background) may wait up to Timeout/8 longer for a pooled
	// connection, since such calls share one timer for each eighth of
	// Timeout instead of starting their own.
	//
	// A call that Redis does not answer waits one Timeout, whatever it
	// does: a decision of one policy or of several, batched or not, a
	// Peek, a Charge, a Reserve, a Settle (whose second round trip is not
	// waited for once the first failed), a lease refill and the requests
	// that wait for it, an in-flight slot's Acquire or Release. The
	// calls floodgate-rls makes for one request (a decision, the checks
	// looked at after it, a charge after a refusal) wait once in all: a
	// call that finds Redis failing has the request's later calls
	// answered by the FailureMode at once.
	Timeout time.Duration
	// FailureMode decides while Redis cannot; the zero value is FailLocal.
	FailureMode FailureMode
	// Local is FailLocal's rule; nil means Rule. It is an error with
	// another FailureMode. A Limiter's only: a Store's policies fall back
	// on their own rules.
	Local *floodgate.Rule
	// LocalMaxKeys bounds the keys each policy's FailLocal limiter holds
	// (see floodgate.Config.MaxKeys); 0 means 65,536, less than
	// floodgate's default since it holds only what an outage brings;
	// floodgate.Unbounded holds every key; negative is an error. Its
	// idle keys are not swept: the bound alone limits its memory.
	LocalMaxKeys int

	// BreakAfter is how many consecutive failures open the circuit
	// breaker; 0 means 3. A Store has one breaker, whatever its number of
	// policies: BreakAfter failed calls of any of them open it for all.
	BreakAfter int
	// ProbeEvery is how long the breaker then stays open before one call
	// probes Redis again; 0 means 250ms. It bounds how long the Store
	// goes on deciding by its FailureMode once Redis answers again: the
	// first call after ProbeEvery (from the last failed probe) is decided
	// on Redis, so a Store with traffic decides on Redis again within
	// ProbeEvery and a round trip of Redis's return. The probe's caller
	// waits for it, up to Timeout. On a Redis Cluster it also spaces the
	// reloads of the slot map that failures ask for (Stats.Reloads).
	ProbeEvery time.Duration
	// Clock times the breaker (and, on a Redis Cluster, the spacing of
	// its slot map's reloads) and the FailLocal limiters; nil means
	// floodgate.SystemClock(). Nothing else reads it: decisions on Redis
	// use Redis's clock, and lease mode times its batches on this
	// machine's own clocks (see Lease), so that a Clock that lags, such
	// as a coarse one, cannot keep a unit spendable after Redis stopped
	// counting it.
	Clock floodgate.Clock
	// OnError, when set, is called with every error from Redis that the
	// FailureMode answered for. It runs on the request path.
	OnError func(error)

	// Lease turns on lease mode: each replica takes a key's allowance
	// from Redis in batches and spends them in process. The zero value
	// decides every request with a round trip. See Lease.
	Lease Lease

	// HashTag, for a Store only (New refuses it), names the part of a
	// client's key that chooses its Redis Cluster slot: keys whose tags
	// are equal share a slot, whatever the policy, so that Store.Decide
	// can decide them in one script. nil is the whole key. The key is
	// then "<Prefix>:<policy>:<algorithm>:{<tag>}:<key>", each of tag and
	// key as 32 hex digits of its hash.
	HashTag func(key string) string

	// SlotTTL is how long a slot of an in-flight policy (Store.SlotPolicy)
	// stays held on Redis without its holder: the Store renews every slot
	// it holds every third of it, all of them in one pipeline, so that a
	// living holder never loses its slot, and a replica that dies holding
	// slots gives them back within SlotTTL. After Redis loses the slots
	// (see Store.SlotPolicy), the replicas are back within the limit after
	// SlotTTL plus the longest request held. 0 means 10 s, or three
	// Timeouts if that is longer; else at least 100 ms and three Timeouts
	// (a renewal must reach Redis in time), and at most an hour.
	SlotTTL time.Duration
}

// The bounds of Config.SlotTTL.
const (
	defaultSlotTTL = 10 * time.Second
	minSlotTTL     = 100 * time.Millisecond
	maxSlotTTL     = time.Hour
)

// Stats counts what a Store (or a Limiter) has done since it was made.
type Stats struct {
	// Calls counts round trips to Redis: the calls in flight at once go
	// together, as one pipeline, in one round trip (see the package's
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
	// Abandoned counts decisions whose caller's context ended before
	// Redis answered (or before the call): denied, and counted against no
	// breaker; Refunded, the units of those that Redis had charged before
	// their caller left, given back (see Store.Decide).
	Abandoned, Refunded int64
	// Leased counts the units taken from Redis as leases (beyond the cost
	// of the request that took them); Returned, the unspent units given
	// back, by Close or when a lease's TTL ran out; and Lapsed, the
	// unspent units whose time passed before they could go back (Redis had
	// already taken them back) or whose return failed.
	Leased, Returned, Lapsed int64
	// Refills counts the round trips a request made in lease mode because
	// its key's lease could not serve it (a new key, a burst, a lease run
	// out before its renewal came); Renewals, the batches the Store's
	// bookkeeper asked for ahead, before a lease ran out. A busy key at a
	// steady rate should see Renewals grow and Refills stay.
	Refills, Renewals int64
	// Reloads counts the times a Redis Cluster's slot map was reloaded
	// after a failure (see Config.ProbeEvery).
	Reloads int64
	// SlotsHeld is the in-flight slots the Store holds on Redis now (see
	// SlotPolicy); SlotRenewals counts the pipelines that renewed them,
	// one every third of Config.SlotTTL while any is held, and
	// SlotRenewCommands the commands those sent, one per client key.
	SlotsHeld, SlotRenewals, SlotRenewCommands int64
	// SlotsLost counts the slots this Store held that a renewal found
	// gone from Redis (a flush, a restart, a failover, or an expiry while
	// this replica was paused): dropped, and never served again.
	SlotsLost int64
}

const (
	defaultTimeout    = 100 * time.Millisecond
	defaultBreakAfter = 3
	defaultProbeEvery = 250 * time.Millisecond
	defaultLocalKeys  = 1 << 16
	ttlMargin         = 1000 // ms
)

// orDefault returns v, or def when v is zero.
func orDefault[T int | int64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// settings are a Config's Store-wide settings, checked and with their
// defaults: what a Limiter and a Store share.
type settings struct {
	prefix       string
	timeout      time.Duration
	mode         FailureMode
	localMaxKeys int
	breakAfter   int64
	probeEvery   int64
	clock        floodgate.Clock
	onError      func(error)
	lease        Lease
	hashTag      func(string) string
	slotTTL      time.Duration
}

// readConfig checks what New and NewStore check alike: the client, and
// every field but Algorithm, Rule, Local and HashTag, which each checks
// for itself.
func readConfig(client redis.UniversalClient, cfg Config) (settings, error) {
	if client == nil {
		return settings{}, errors.New("redislimit: New needs a client")
	}
	if err := checkClient(client); err != nil {
		return settings{}, err
	}
	set := settings{prefix: cfg.Prefix, timeout: cfg.Timeout, mode: cfg.FailureMode, clock: cfg.Clock, onError: cfg.OnError,
		hashTag: cfg.HashTag, lease: cfg.Lease}
	if strings.TrimSpace(cfg.Prefix) != cfg.Prefix {
		return settings{}, fmt.Errorf("redislimit: Prefix %q has leading or trailing space", cfg.Prefix)
	}
	if set.prefix == "" {
		set.prefix = "floodgate"
	}
	switch {
	case cfg.Timeout < 0:
		return settings{}, fmt.Errorf("redislimit: Timeout must be 0 (meaning %v) or positive, got %v", defaultTimeout, cfg.Timeout)
	case cfg.Timeout == 0:
		set.timeout = defaultTimeout
	}
	if cfg.FailureMode > FailError {
		return settings{}, fmt.Errorf("redislimit: unknown %v", cfg.FailureMode)
	}
	if cfg.BreakAfter < 0 || cfg.ProbeEvery < 0 || cfg.LocalMaxKeys < 0 {
		return settings{}, fmt.Errorf("redislimit: BreakAfter, ProbeEvery and LocalMaxKeys must be 0 (the default) or positive, got %d, %v, %d",
			cfg.BreakAfter, cfg.ProbeEvery, cfg.LocalMaxKeys)
	}
	set.breakAfter = int64(orDefault(cfg.BreakAfter, defaultBreakAfter))
	set.probeEvery = int64(orDefault(cfg.ProbeEvery, defaultProbeEvery))
	set.localMaxKeys = orDefault(cfg.LocalMaxKeys, defaultLocalKeys)
	if set.clock == nil {
		set.clock = floodgate.SystemClock()
	}
	if cfg.Lease.Max < 0 || cfg.Lease.TTL < 0 || cfg.Lease.MaxKeys < 0 {
		return settings{}, fmt.Errorf("redislimit: Lease.Max, Lease.TTL and Lease.MaxKeys must be 0 or positive, got %d, %v and %d",
			cfg.Lease.Max, cfg.Lease.TTL, cfg.Lease.MaxKeys)
	}
	if cfg.Lease.Slots < 0 || cfg.Lease.Slots > maxSlotsAhead {
		return settings{}, fmt.Errorf("redislimit: Lease.Slots must be 0 (none ahead) to %d slots a client, got %d", maxSlotsAhead, cfg.Lease.Slots)
	}
	set.lease.TTL = orDefault(cfg.Lease.TTL, defaultLeaseTTL)
	set.lease.MaxKeys = orDefault(cfg.Lease.MaxKeys, defaultLeaseKeys)
	set.slotTTL = orDefault(cfg.SlotTTL, max(defaultSlotTTL, 3*set.timeout))
	if low := max(minSlotTTL, 3*set.timeout); cfg.SlotTTL < 0 || set.slotTTL < low || set.slotTTL > maxSlotTTL {
		return settings{}, fmt.Errorf("redislimit: SlotTTL must be 0 (the default) or %v (100 ms and three Timeouts) to %v, got %v: a holder renews its slots every third of it",
			low, maxSlotTTL, cfg.SlotTTL)
	}
	return set, nil
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
