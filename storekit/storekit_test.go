package storekit_test

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/storekit"
)

// TestOwing: the answer that owes most, then the fewest remaining, then
// the longest ResetAfter, the first of equals; the shadows' only when
// every ask is a shadow.
func TestOwing(t *testing.T) {
	s := time.Second
	enforced, shadow := floodgate.Ask{}, floodgate.Ask{Shadow: true}
	for _, c := range []struct {
		name string
		asks []floodgate.Ask
		all  []floodgate.Decision
		want int
	}{
		{"owes most", []floodgate.Ask{enforced, enforced, enforced},
			[]floodgate.Decision{{Remaining: 0, ResetAfter: 9 * s}, {Owed: 2, Remaining: 5}, {Owed: 1}}, 1},
		{"fewest remaining", []floodgate.Ask{enforced, enforced},
			[]floodgate.Decision{{Remaining: 3, ResetAfter: 9 * s}, {Remaining: 2, ResetAfter: s}}, 1},
		{"longest reset", []floodgate.Ask{enforced, enforced, enforced},
			[]floodgate.Decision{{Remaining: 2, ResetAfter: s}, {Remaining: 2, ResetAfter: 3 * s}, {Remaining: 2, ResetAfter: 3 * s}}, 1},
		{"shadows aside", []floodgate.Ask{shadow, enforced, enforced},
			[]floodgate.Decision{{Owed: 9}, {Remaining: 4}, {Remaining: 5}}, 1},
		{"all shadows", []floodgate.Ask{shadow, shadow},
			[]floodgate.Decision{{Remaining: 4}, {Owed: 1, Remaining: 5}}, 1},
		{"none", nil, nil, 0},
	} {
		if got := storekit.Owing(c.asks, c.all); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// TestVerdict: the refusing enforced ask's answer; with only a shadow
// refusing, the most restrictive enforced one; with none, the most
// restrictive of all, what is owed left aside.
func TestVerdict(t *testing.T) {
	enforced, shadow := floodgate.Ask{}, floodgate.Ask{Shadow: true}
	asks := []floodgate.Ask{enforced, shadow, enforced}
	all := []floodgate.Decision{{Remaining: 4}, {Remaining: 0}, {Remaining: 2, Owed: 0}}
	for _, c := range []struct{ refused, want int }{{-1, 1}, {0, 0}, {1, 2}, {2, 2}} {
		if got := storekit.Verdict(asks, all, c.refused); got != c.want {
			t.Errorf("refused %d: %d, want %d", c.refused, got, c.want)
		}
	}
	if got := storekit.Verdict([]floodgate.Ask{shadow, shadow}, all[:2], 1); got != 1 {
		t.Errorf("every ask a shadow, 1 refusing: %d, want 1", got)
	}
}

// TestCheckSettle: floodgate's own errors, before anything is charged.
func TestCheckSettle(t *testing.T) {
	asks := []floodgate.Ask{{N: 3}}
	for _, c := range []struct {
		why  string
		asks []floodgate.Ask
		h    *floodgate.Hold
		want error
	}{
		{"a nil Hold", asks, nil, floodgate.ErrNotReserved},
		{"a zero Hold", asks, &floodgate.Hold{}, floodgate.ErrNotReserved},
		{"a settled Hold", asks, &floodgate.Hold{Admitted: true, Settled: true, N: 1}, floodgate.ErrSettled},
	} {
		if err := storekit.CheckSettle(c.asks, c.h); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.why, err, c.want)
		}
	}
	h := &floodgate.Hold{Admitted: true, N: 1}
	for _, bad := range [][]floodgate.Ask{nil, {{N: 1}, {N: 1}}, {{N: -1}}} {
		if err := storekit.CheckSettle(bad, h); err == nil || errors.Is(err, floodgate.ErrSettled) || errors.Is(err, floodgate.ErrNotReserved) {
			t.Errorf("asks %+v: %v; want an error of their own", bad, err)
		}
	}
	if err := storekit.CheckSettle(asks, h); err != nil {
		t.Errorf("a Hold of one ask, settled to 3: %v", err)
	}
}

// holder counts the Releases that reach it.
type holder struct{ n int }

func (h *holder) Release() bool { h.n++; return h.n == 1 }

// TestHeldSlot: a held slot's Release is its holder's, once true; a nil
// holder is the zero Slot.
func TestHeldSlot(t *testing.T) {
	h := new(holder)
	s := storekit.HeldSlot(h)
	c := s
	if s.IsZero() || !s.Release() || s.Release() || c.Release() || h.n != 3 {
		t.Fatalf("a held slot: %d releases reached its holder", h.n)
	}
	if z := storekit.HeldSlot(nil); !z.IsZero() || z.Release() {
		t.Error("the Slot of a nil holder: not the zero Slot")
	}
}

// TestNoAllocs: what a Store calls on every request allocates nothing:
// a held slot's Slot (beyond what its holder is), Settle's checks, and
// the picks of the request's answer.
func TestNoAllocs(t *testing.T) {
	h := new(holder)
	asks := []floodgate.Ask{{N: 2}, {N: 1, Shadow: true}}
	all := []floodgate.Decision{{Remaining: 3}, {Remaining: 1}}
	hold := &floodgate.Hold{Admitted: true, N: 2}
	var sink int
	for name, f := range map[string]func(){
		"HeldSlot":    func() { _ = storekit.HeldSlot(h) },
		"CheckSettle": func() { _ = storekit.CheckSettle(asks, hold) },
		"Verdict":     func() { sink += storekit.Verdict(asks, all, -1) },
		"Owing":       func() { sink += storekit.Owing(asks, all) },
		"Plan": func() {
			var p storekit.Plan
			_ = p.Prepare(len(asks), func(i, j int) bool { return false }, func(i int) bool { return asks[i].Shadow },
				func(i int) int64 { return asks[i].N }, func(int) int64 { return 5 })
			sink += p.Refusal(-1)
		},
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations a call, want 0", name, n)
		}
	}
	_ = sink
}
