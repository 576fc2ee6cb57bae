// Package flat maps keys to per-key state for floodgate's limiters.
//
// Flat is the registry a Limiter uses: sharded open-addressing tables of
// cache-line buckets, each slot a key's 128-bit identity (95 bits kept)
// beside its state word, so that a lookup reads one line and writes
// nothing (see Flat). A key is never stored: a Hasher with random keys of
// its own turns it into an ID, and two keys whose kept bits are equal
// share one state, which can make a limiter stricter for both, never let
// either pass more than its rule (see ID for the odds).
//
// Registry is the reference it replaced, kept beside it as each
// lock-free algorithm keeps its mutex twin: a set of shards, each an
// xsync.Map (a CLHT-style hash table: Load reads without writing shared
// memory, and writers lock one bucket of eight entries at a time), with
// shard headers read-only after New and padded to a line of their own.
// Sharding bounds the work of a single table resize: a shard grows on its
// own while the others keep inserting.
package flat
