package redislimit

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestDeadlinesOrder: the bookkeeper's heap pops its deadlines soonest
// first, whatever the order and repeats of their pushes, interleaved
// with pops.
func TestDeadlinesOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var h deadlines
		var want []int64
		for range r.IntN(64) + 1 {
			if len(h) > 0 && r.IntN(3) == 0 {
				slices.Sort(want)
				if got := h.pop().at; got != want[0] {
					t.Fatalf("round %d: popped %d, want %d", round, got, want[0])
				}
				want = want[1:]
				continue
			}
			at := r.Int64N(16)
			h.push(deadline{at: at})
			want = append(want, at)
		}
		slices.Sort(want)
		for _, w := range want {
			if got := h.pop().at; got != w {
				t.Fatalf("round %d: popped %d, want %d", round, got, w)
			}
		}
		if len(h) != 0 {
			t.Fatalf("round %d: %d left", round, len(h))
		}
	}
}
