// Package hook lets floodgate's own tests and its benchmark harness build
// a Limiter in ways that users must not: on the reference registry, with
// keys identified by a function of the test's choosing, or with an
// algorithm's mutex twin. The root package sets the variables in its
// init; a floodgate.Config goes in and comes out as an any, since this
// package cannot name the type.
package hook

// The mutex twins' names. A twin is the plain reference implementation of
// its algorithm, behind a mutex per key, with the same semantics: the
// tests hold the lock-free form to it, and bench/ measures one against the
// other. It is not a product, and users cannot choose one: New accepts
// these names only in a Config that Twins returned.
const (
	TokenBucketMutex    = "token_bucket_mutex"
	LeakyBucketMutex    = "leaky_bucket_mutex"
	FixedWindowMutex    = "fixed_window_mutex"
	SlidingCounterMutex = "sliding_counter_mutex"
	SlidingLogMutex     = "sliding_log_mutex"
)

// Twins returns a copy of a floodgate.Config whose Algorithm may also
// name a mutex twin.
var Twins func(cfg any) any

// Reference returns a copy of a floodgate.Config whose Limiter keeps its
// keys in the reference registry (sharded xsync maps, every state out of
// line) instead of the flat table.
var Reference func(cfg any) any

// IDs returns a copy of a floodgate.Config whose Limiter identifies a key
// by id(key) instead of its keyed 128-bit hash: tests force collisions
// with it. hi must be odd.
var IDs func(cfg any, id func(key string) (hi, lo uint64)) any

// ExclusivePair, where it is set (by shardedlog on arm64), makes the
// sliding log's 16-byte CAS use the LDAXP/STLXP loop even where the
// processor has LSE's CASPAL, so that tests run both forms.
var ExclusivePair func()
