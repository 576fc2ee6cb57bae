package window

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/word"
)

// TestSettleWord: SettleWord leaves the word as RefundWord does for the
// same grant's instant and answers what PeekValue answers of it at the
// settlement's, its peeked unit not taken, over random requests, charges
// and give-backs, in and out of debt, within the grant's window and after
// it; and it gives nothing back, and says so, on a mark or a reading
// outside the range. Both kinds.
func TestSettleWord(t *testing.T) {
	for _, kind := range []Kind{Fixed, Sliding} {
		p := mustParams(t, kind, 10, time.Second)
		rng := rand.New(rand.NewPCG(7, 42))
		var a, b atomic.Uint64
		now := int64(time.Hour)
		origin := p.Origin(now)
		for i := range 20_000 {
			now += rng.Int64N(int64(200 * time.Millisecond))
			n := rng.Int64N(12) + 1
			switch rng.IntN(3) {
			case 0:
				p.AllowWord(&a, origin, now, n)
				p.AllowWord(&b, origin, now, n)
			case 1:
				p.ChargeWord(&a, origin, now, n)
				p.ChargeWord(&b, origin, now, n)
			default:
				at := now - rng.Int64N(int64(1500*time.Millisecond)) // the grant's instant
				got, ok := p.SettleWord(&a, origin, at, now, n)
				if p.RefundWord(&b, origin, at, n) != word.Live || !ok {
					t.Fatalf("%v step %d: SettleWord ok %v", kind, i, ok)
				}
				want := p.PeekValue(b.Load(), origin, now)
				if want.Allowed {
					want.Remaining++
				}
				want.Allowed = true
				if got != want || a.Load() != b.Load() {
					t.Fatalf("%v step %d: SettleWord(%d) answered %+v, word %#x; RefundWord and PeekValue %+v, word %#x", kind, i, n, got, a.Load(), want, b.Load())
				}
			}
		}
		for _, mark := range []uint64{word.Moved, word.Dead} {
			a.Store(mark)
			if _, ok := p.SettleWord(&a, origin, now, now, 1); ok || a.Load() != mark {
				t.Fatalf("%v: SettleWord on the mark %#x: ok %v, word %#x", kind, mark, ok, a.Load())
			}
		}
	}
}
