package flat

import (
	"hash/maphash"
	"math/bits"
)

// ID is a key's identity in a Flat table: a 128-bit keyed hash of the
// key, of which the table keeps 95 bits (Hi but its lowest bit, which is
// always 1, and the low 32 bits of Lo); the rest only chose where the key
// lives. The key itself is not stored. Two keys whose kept bits are equal
// share one state, so they share one allowance: a collision can make a
// limiter stricter for both, never let either pass more than the rule.
// With a random seed per limiter, the chance that any two of 10^9 keys
// held at once collide is about (10^9)² / 2^96 ≈ 1.3 × 10^-11.
type ID struct {
	// Hi and Lo are the hash's two halves; Hi is always odd.
	Hi, Lo uint64
}

// Hasher makes IDs with random keys of its own. A key of at most 16 bytes
// (an address, most ids) is read as two words that hold every byte of it,
// and each half of the ID is one 128-bit multiply of those words with two
// random keys, folded, then offset by a random key of the key's length:
// keys of one length differ in the words, and keys of two lengths whose
// words agree (a word reads up to 8 bytes, so "1000" and "10000" share
// theirs) differ by random offsets. A longer key takes two passes of
// hash/maphash (AES-based where the CPU has AES) with two seeds. Either
// way, nothing but the random keys tells where a key lands, and the key
// is not stored.
type Hasher struct {
	a, b           maphash.Seed
	k1, k2, k3, k4 uint64
	byLen          [17][2]uint64 // the offsets of each length up to 16
}

// NewHasher returns a Hasher with fresh random keys.
func NewHasher() *Hasher {
	a, b := maphash.MakeSeed(), maphash.MakeSeed()
	h := &Hasher{a: a, b: b,
		k1: maphash.String(a, "k1"), k2: maphash.String(a, "k2"),
		k3: maphash.String(b, "k3"), k4: maphash.String(b, "k4")}
	for n := range h.byLen {
		h.byLen[n] = [2]uint64{maphash.Comparable(a, n), maphash.Comparable(b, n)}
	}
	return h
}

// ID returns key's identity. Hi is always odd, so that 0 and tombHi never
// stand for a key.
func (h *Hasher) ID(key string) ID {
	n := len(key)
	var a, b uint64
	switch {
	case n > 16:
		return ID{Hi: maphash.String(h.a, key) | 1, Lo: maphash.String(h.b, key)}
	case n >= 8:
		a, b = le64(key), le64(key[n-8:])
	case n >= 4:
		a, b = le32(key), le32(key[n-4:])
	case n > 0:
		a = uint64(key[0])<<16 | uint64(key[n>>1])<<8 | uint64(key[n-1])
	}
	h1, l1 := bits.Mul64(a^h.k1, b^h.k2)
	h2, l2 := bits.Mul64(a^h.k3, b^h.k4)
	off := &h.byLen[n]
	return ID{Hi: (h1 ^ l1 ^ off[0]) | 1, Lo: h2 ^ l2 ^ off[1]}
}

func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func le32(s string) uint64 {
	_ = s[3]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
}
