// Package testhook holds every seam through which floodgate's own tests
// and its benchmark harness build what users must not: a Limiter of an
// algorithm's mutex twin, an algorithm outside any Limiter (for the
// reference limiter the differential tests hold the Limiter to), an
// algorithm of the tests' own, a middleware that counts nothing, and the
// sliding log on its LDAXP/STLXP loop. Each package that owns a hook sets it in its init, and reads it
// only where a value is built (New), never on a request. A Config goes in
// and comes out as an any, since this package cannot name the types.
//
// So the packages that own a hook import it (floodgate, httplimit,
// inflight, and the sliding log's package on arm64), and every program
// that imports them links it; only tests and their machinery (the
// benchmark harness, the reference limiter, the tests' TestMain) call a
// hook.
package testhook

// The mutex twins' names. A twin is the plain reference implementation of
// its algorithm, behind a mutex per key, with the same semantics: the
// tests hold the lock-free form to it, and the benchmark harness measures
// one against the other. It is not a product, and users cannot choose
// one: floodgate.New accepts these names only in a Config that Twins
// returned.
const (
	TokenBucketMutex    = "token_bucket_mutex"
	LeakyBucketMutex    = "leaky_bucket_mutex"
	FixedWindowMutex    = "fixed_window_mutex"
	SlidingCounterMutex = "sliding_counter_mutex"
	SlidingLogMutex     = "sliding_log_mutex"
)

// Twins returns a copy of a floodgate.Config whose Algorithm may also
// name a mutex twin. Set by floodgate.
var Twins func(cfg any) any

// InFlightTwin returns a copy of an inflight.Config whose Limiter is the
// mutex twin of the lock-free one. Set by inflight.
var InFlightTwin func(cfg any) any

// InFlightSpread returns a copy of an inflight.Config whose Limiter, if it
// may spread keys at all, spreads every key when it creates it, and parks
// a released slot whatever the key holds. Set by inflight.
var InFlightSpread func(cfg any) any

// InFlightInUse returns the slots an *inflight.Limiter holds over all
// keys together, when its Config.Global is set; otherwise 0. Set by
// inflight.
var InFlightInUse func(l any) int

// InFlightEvictIdle removes every key of an *inflight.Limiter that holds
// no slot and no waiter, and returns how many it removed. Set by
// inflight.
var InFlightEvictIdle func(l any) int

// InFlightSpreadKeys returns how many keys an *inflight.Limiter has
// spread now. Set by inflight.
var InFlightSpreadKeys func(l any) int

// InFlightSpreadKey spreads key on an *inflight.Limiter now, as a lost
// CAS would (if its Limiter spreads keys at all, the key is held, and
// the bound on spread keys has room), so that a test that needs a spread
// key has one whatever its goroutines' CASes did.
var InFlightSpreadKey func(l any, key string)

// InFlightSpreadCounts returns an *inflight.Limiter's count of the keys
// spread now (which its bound on them reads, and InFlightSpreadKeys
// must agree with when nothing runs), and how many spread keys its
// Sweep has taken the lanes of since New. Set by inflight.
var InFlightSpreadCounts func(l any) (spreading, unspread int)

// SameKeys makes the *floodgate.Limiter b, before its first request, hash
// keys as the *floodgate.Limiter a does: the two then place every key in
// the same slot and, with MaxKeys, the same sketch cells, so that a
// differential test of two Limiters that evict keys compares answers
// that no random hash key sets apart. Set by floodgate.
var SameKeys func(a, b any)

// Algorithm returns the algorithm that floodgate.New would build for a
// floodgate.Config (its Algorithm, a twin's name included, and its Rule),
// as a keystate.Algorithm whose states are objects, or New's error for
// it. Set by floodgate.
var Algorithm func(cfg any) (any, error)

// Register makes an algorithm of the tests' own available to
// floodgate.New under name: f is a func(floodgate.Rule)
// (keystate.Algorithm, error), which builds it for a rule that New has
// validated, and returns an error for a rule it cannot represent exactly.
// Register returns an error for an empty name, a nil or mistyped f, or a
// name already taken. Set by floodgate.
//
// Such an algorithm has what keystate.State offers, and no more: its
// states are held out of line, one per key, and it has Allow, AllowN,
// Peek, Reset, eviction of idle keys (EvictIdle and IdleTTL), the global
// cap and Limits. New refuses it with MaxKeys > 0 (an evicted key could
// not be remembered, so a client could rotate its way back to a full
// allowance), and so do the Stores and faces under their default bound;
// SetRule refuses to change its rule; Wait returns floodgate.ErrCannotWait;
// Charge returns keystate.ErrCannotCharge unless its states are
// keystate.Chargers.
var Register func(name string, f any) error

// Uncounted returns a copy of an httplimit.Config whose middleware keeps
// no per-route or per-policy counts, so that the benchmark harness can
// measure what counting costs a request. Set by httplimit.
var Uncounted func(cfg any) any

// ExclusivePair, where it is set (by internal/shardlog on arm64), makes the
// sliding log's 16-byte CAS use the LDAXP/STLXP loop even where the
// processor has LSE's CASPAL, so that tests run both forms.
var ExclusivePair func()
