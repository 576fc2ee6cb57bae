package inflight_test

import (
	"strconv"
	"testing"

	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// maxSpread is the most keys of a Limiter spread at once, as the package
// documents it.
const maxSpread = 64

// spreadLimiter returns a Limiter that spreads every key it creates, up
// to its bound, and parks every slot released (testhook.InFlightSpread).
func spreadLimiter(t *testing.T, cfg inflight.Config) *inflight.Limiter {
	t.Helper()
	l, err := inflight.New(testhook.InFlightSpread(cfg).(inflight.Config))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// spreadNow returns the keys spread now, and fails if the Limiter's count
// of them, which bounds them, is not the keys whose word is marked.
func spreadNow(t *testing.T, l *inflight.Limiter) int {
	t.Helper()
	n := testhook.InFlightSpreadKeys(l)
	if counted, _ := testhook.InFlightSpreadCounts(l); counted != n {
		t.Fatalf("%d keys spread, and the Limiter counts %d", n, counted)
	}
	return n
}

// TestSpreadKeysBounded: however many keys would spread, at most 64 of a
// Limiter have lanes at once (maxSpread); the others answer as before,
// through their word. Keys that go take their lanes with them, and make
// room for others.
func TestSpreadKeysBounded(t *testing.T) {
	l := spreadLimiter(t, inflight.Config{Limit: 2})
	var held []inflight.Slot
	for k := range 200 {
		key := "k" + strconv.Itoa(k)
		a, ok1 := l.TryAcquire(key)
		b, ok2 := l.TryAcquire(key)
		_, ok3 := l.TryAcquire(key)
		if !ok1 || !ok2 || ok3 || l.Held(key) != 2 {
			t.Fatalf("key %s: %v %v %v, %d held: want two slots and a refusal", key, ok1, ok2, ok3, l.Held(key))
		}
		b.Release() // parked on a lane, if the key has them
		held = append(held, a)
	}
	if n := spreadNow(t, l); n != maxSpread {
		t.Fatalf("%d keys spread of 200 that would: want the bound, %d", n, maxSpread)
	}
	for k, s := range held {
		key := "k" + strconv.Itoa(k)
		if l.Held(key) != 1 || !s.Release() || l.Held(key) != 0 {
			t.Fatalf("key %s: a slot held and released wrongly (%d held now)", key, l.Held(key))
		}
	}
	if n := l.EvictIdle(); n != 200 || spreadNow(t, l) != 0 {
		t.Fatalf("EvictIdle removed %d of 200 keys, and left %d spread", n, spreadNow(t, l))
	}
	for k := range 10 {
		s, _ := l.TryAcquire("again" + strconv.Itoa(k))
		s.Release()
	}
	if n := spreadNow(t, l); n != 10 {
		t.Fatalf("after every spread key went, 10 new keys: %d spread", n)
	}
}

// TestSweepUnspreadsCalmKeys: a spread key that holds a slot, but lent
// none from its lanes between two sweeps, loses its lanes at the second,
// with no change to what it holds or answers; one whose lane has a slot
// lent keeps them until the slot comes back; and a key that lost its
// lanes spreads again when it is made anew. Under a limit of 1, so that
// a full key lends from any lane, whichever P the test runs on.
func TestSweepUnspreadsCalmKeys(t *testing.T) {
	l := spreadLimiter(t, inflight.Config{Limit: 1})
	calm, ok1 := l.TryAcquire("calm") // from the word
	s, ok2 := l.TryAcquire("lent")    // from the word
	s.Release()                       // parked on a lane
	lent, ok3 := l.TryAcquire("lent") // full: lent by the lane
	if !ok1 || !ok2 || !ok3 || spreadNow(t, l) != 2 || l.Held("calm") != 1 || l.Held("lent") != 1 {
		t.Fatalf("set-up: %v %v %v, %d spread, calm holds %d, lent %d", ok1, ok2, ok3, spreadNow(t, l), l.Held("calm"), l.Held("lent"))
	}
	if n := l.Sweep(); n != 0 || spreadNow(t, l) != 1 {
		// calm's lanes lent nothing since New; lent's lent a slot.
		t.Fatalf("the first sweep removed %d keys and left %d spread: want calm unspread, lent spread", n, spreadNow(t, l))
	}
	if _, unspread := testhook.InFlightSpreadCounts(l); unspread != 1 || l.Held("calm") != 1 {
		t.Fatalf("%d keys unspread, calm holds %d: want 1, and its slot kept", unspread, l.Held("calm"))
	}
	if n := l.Sweep(); n != 0 || spreadNow(t, l) != 1 {
		t.Fatalf("a sweep while lent's lane has a slot lent: %d removed, %d spread; want lent to keep its lanes", n, spreadNow(t, l))
	}
	// calm answers through its word now: full, then free once released.
	if _, ok := l.TryAcquire("calm"); ok {
		t.Fatal("calm, unspread, gave a second slot under a limit of 1")
	}
	if !calm.Release() || calm.Release() || l.Held("calm") != 0 {
		t.Fatalf("calm's slot released wrongly: %d held", l.Held("calm"))
	}
	again, ok := l.TryAcquire("calm")
	if !ok || !again.Release() {
		t.Fatal("calm, free again, refused a slot")
	}
	if !lent.Release() || lent.Release() || s.Release() || l.Held("lent") != 0 {
		t.Fatalf("lent's slots released wrongly: %d held", l.Held("lent"))
	}
	if n := l.Sweep(); n != 1 || spreadNow(t, l) != 0 || l.Len() != 1 {
		// lent holds nothing, and was not acquired since the last sweep.
		t.Fatalf("a sweep after lent's last slot came back: %d removed, %d spread, %d left; want lent removed with its lanes", n, spreadNow(t, l), l.Len())
	}
	for l.Len() > 0 {
		l.Sweep()
	}
	s, _ = l.TryAcquire("calm") // made anew: spread again
	if spreadNow(t, l) != 1 || !s.Release() {
		t.Fatalf("a key made anew: %d spread, want 1", spreadNow(t, l))
	}
}
