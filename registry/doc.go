// Package registry is a concurrent map from string keys to counters that
// bounds the keys it holds: the flat table in which floodgate keeps its
// limiters' state, with a word per key. A reader takes no lock and writes
// nothing shared; a change to an existing key is one compare-and-swap on
// its word, and allocates nothing. Only adding or removing a key takes a
// lock, of one shard of the table.
//
// A Map holds at most the number of keys it was made with, whatever ids
// its callers are sent: a new key at the bound evicts an existing one,
// the one with the smallest value of a small random sample (a key at 0
// first), so that a flood of new keys costs little memory and rarely
// evicts the keys that count the most.
//
// The keys themselves are not stored. Each key becomes a 128-bit keyed
// hash, with random keys of each Map's own, of which the table keeps 95
// bits: two keys whose kept bits are equal share one value. With a
// billion keys held at once, the chance that any two collide is about
// 10^-11. So a Map cannot list its keys.
package registry
