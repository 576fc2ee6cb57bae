package bucket

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/word"
)

// TestSettleWord: SettleWord leaves the word as RefundWord does and
// answers what PeekValue answers of it, its peeked unit not taken, over
// random requests, charges and give-backs in and out of debt; and it
// gives nothing back, and says so, on a mark or a reading past the range.
func TestSettleWord(t *testing.T) {
	p := mustParams(t, 10, time.Second, 10)
	rng := rand.New(rand.NewPCG(7, 42))
	var a, b atomic.Uint64
	now := int64(time.Hour)
	for i := range 20_000 {
		now += rng.Int64N(int64(300 * time.Millisecond))
		n := rng.Int64N(12) + 1
		switch rng.IntN(3) {
		case 0:
			p.AllowWord(&a, 0, now, n)
			p.AllowWord(&b, 0, now, n)
		case 1:
			p.ChargeWord(&a, 0, now, n)
			p.ChargeWord(&b, 0, now, n)
		default:
			got, ok := p.SettleWord(&a, 0, now, n)
			if p.RefundWord(&b, n) != word.Live || !ok {
				t.Fatalf("step %d: SettleWord ok %v", i, ok)
			}
			want := p.PeekValue(b.Load(), 0, now)
			if want.Allowed {
				want.Remaining++
			}
			want.Allowed = true
			if got != want || a.Load() != b.Load() {
				t.Fatalf("step %d: SettleWord(%d) answered %+v, word %d; RefundWord and PeekValue %+v, word %d", i, n, got, a.Load(), want, b.Load())
			}
		}
	}
	for _, mark := range []uint64{word.Moved, word.Dead} {
		a.Store(mark)
		if _, ok := p.SettleWord(&a, 0, now, 1); ok || a.Load() != mark {
			t.Fatalf("SettleWord on the mark %#x: ok %v, word %#x", mark, ok, a.Load())
		}
	}
	a.Store(12345)
	if _, ok := p.SettleWord(&a, 0, p.maxRel+1, 1); ok || a.Load() != 12345 {
		t.Fatalf("SettleWord past the range: ok %v, word %d", ok, a.Load())
	}
}
