// Package hook lets floodgate's own tests and its benchmark harness build
// a Limiter in ways that users must not: on the reference registry, or
// with keys identified by a function of the test's choosing. The root
// package sets both variables in its init; a floodgate.Config goes in and
// comes out as an any, since this package cannot name the type.
package hook

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
