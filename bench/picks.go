package bench

import "math/rand/v2"

// PickLen is the length of every pick sequence, a power of two.
const PickLen = 1 << 22

// Picks returns PickLen indexes into n keys, drawn uniformly ("uniform")
// or by Zipf(s=1.1, v=1) ("zipf"), from a seed fixed by n: the same
// sequence on every call, for every implementation.
func Picks(n int, dist string) []uint32 {
	r := rand.New(rand.NewPCG(uint64(n), 0x5eed))
	next := func() uint64 { return uint64(r.IntN(n)) }
	if dist == "zipf" && n > 1 {
		next = rand.NewZipf(r, 1.1, 1, uint64(n-1)).Uint64
	}
	seq := make([]uint32, PickLen)
	for i := range seq {
		seq[i] = uint32(next())
	}
	return seq
}
