package floodgate

import (
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/flat"
	"github.com/floodgate-go/floodgate/internal/shardlog"
	"github.com/floodgate-go/floodgate/internal/testhook"
	"github.com/floodgate-go/floodgate/internal/word"
)

// TestSweeper drives the sweeper with a tick channel of the test's own:
// keys idle for IdleTTL on the manual clock are evicted, busier ones stay,
// and Close stops the goroutine.
func TestSweeper(t *testing.T) {
	clock := NewManualClock(0)
	l, err := New(Config{Rule: Rule{Limit: 10, Period: time.Second}, Clock: clock, IdleTTL: Never})
	if err != nil {
		t.Fatal(err)
	}
	tick := make(chan time.Time)
	done := make(chan int)
	l.startSweep(time.Minute, tick, done)

	l.AllowN("quiet", 1)
	l.AllowN("busy", 1)
	clock.Advance(time.Minute) // quiet has been full for 59.9s: not yet idle a minute
	l.AllowN("busy", 1)
	tick <- time.Time{}
	if n := <-done; n != 0 {
		t.Fatalf("swept %d keys before any was idle for the TTL", n)
	}
	clock.Advance(time.Second)
	tick <- time.Time{}
	if n := <-done; n != 1 || l.Len() != 1 {
		t.Fatalf("swept %d, Len %d; want quiet evicted, busy kept", n, l.Len())
	}
	if _, i := l.flat.Find(l.hasher.ID("busy")); i < 0 {
		t.Fatal("the busy key was evicted")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal("a second Close must be harmless:", err)
	}
}

// TestSweeperStarts checks that New starts a sweeper for IdleTTL > 0 and
// that Close stops it (the swept channel closes).
func TestSweeperStarts(t *testing.T) {
	l, err := New(Config{Rule: Rule{Limit: 10, Period: time.Second}, IdleTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if l.stop == nil {
		t.Fatal("no sweeper started")
	}
	l.Close()
	select {
	case <-l.swept:
	default:
		t.Fatal("Close returned before the sweeper exited")
	}
}

// TestEvictionRaceUnit replays the race by hand on the states held as
// objects: a request loads a state, the state is evicted and the key is
// created again; the request that held the orphan must not consume from it
// but move on to the live state.
func TestEvictionRaceUnit(t *testing.T) {
	for _, alg := range []string{testhook.TokenBucketMutex, testhook.FixedWindowMutex, SlidingLog} {
		clock := NewManualClock(0)
		l, err := New(Config{Algorithm: alg, Rule: Rule{Limit: 2, Period: time.Hour}, Clock: clock, twins: true})
		if err != nil {
			t.Fatal(err)
		}
		l.Allow("k")
		clock.Advance(2 * time.Hour)
		id := l.hasher.ID("k")
		orphan := l.state(id, clock.Now()) // a request loaded this ...
		if l.EvictIdle() != 1 {
			t.Fatal("k is idle after two hours")
		}
		l.AllowN("k", 2) // ... a new state for k is created and emptied ...
		// ... and the old request now reaches the orphan.
		if _, live := orphan.AllowN(clock.Now(), 1); live {
			t.Fatalf("%s: the evicted state still grants", alg)
		}
		if d := l.AllowN("k", 1); d.Allowed {
			t.Fatalf("%s: k passed 3 in one period across an eviction", alg)
		}
		// The limiter's own path: a retired state is replaced by the live one.
		s := l.successor(id, orphan, clock.Now())
		if d, _ := s.AllowN(clock.Now(), 1); d.Allowed {
			t.Fatalf("%s: the successor of the orphan is a fresh state, not the live one", alg)
		}
	}
}

// TestForcedCollision gives 100 keys one identity, as if the keyed hash
// collided for all of them: they then share one slot and one allowance,
// on either engine. A collision can make a limiter stricter, never let
// more through.
func TestForcedCollision(t *testing.T) {
	for _, alg := range []string{TokenBucket, LeakyBucket, FixedWindow, SlidingCounter, SlidingLog, testhook.TokenBucketMutex} {
		clock := NewManualClock(0)
		l, err := New(Config{Algorithm: alg, Rule: Rule{Limit: 4, Period: time.Hour}, Clock: clock, twins: true})
		if err != nil {
			t.Fatal(err)
		}
		id := flat.ID{Hi: 0x1234567 | 1, Lo: 42}
		passed := 0
		for range 100 { // 100 clients whose keys all hash to id
			var ok bool
			if l.kind == objects {
				ok, _ = l.takeObject(id, clock.Now())
			} else {
				ok, _, _ = l.onWord(id, clock.Now(), opTake, 1, nil)
			}
			if ok {
				passed++
			}
		}
		if passed != 4 || l.Len() != 1 {
			t.Errorf("%s: 100 colliding keys passed %d (Len %d), want one allowance of 4 in one slot", alg, passed, l.Len())
		}
	}
}

// TestSketchCollision: two keys share their sketch cells but not their
// identity (found by searching keys with the limiter's own hasher). The
// first spends its allowance and is evicted at the bound; the second,
// new, then starts from what the first left: stricter, never looser.
func TestSketchCollision(t *testing.T) {
	clock := NewManualClock(0)
	l, err := New(Config{Rule: Rule{Limit: 2, Period: time.Hour}, Clock: clock, MaxKeys: 1})
	if err != nil {
		t.Fatal(err)
	}
	victim := l.hasher.ID("a0")
	mask := uint64(len(newSketch(1, nil).cells) - 1)
	cells := func(id flat.ID) [2]uint64 { return [2]uint64{id.Lo & mask, id.Hi >> 32 & mask} }
	innocent := ""
	for i := 0; innocent == ""; i++ { // about 2^20 tries for a 1,024-cell sketch
		k := "v" + strconv.Itoa(i)
		if id := l.hasher.ID(k); id != victim && cells(id) == cells(victim) {
			innocent = k
		}
	}
	l.AllowN("a0", 2) // spends its whole allowance
	l.Allow("x")      // takes the one place: a0 is evicted
	if _, i := l.flat.Find(victim); i >= 0 || l.Stats().EvictedAtBound != 1 {
		t.Fatal("a0 was not evicted at the bound")
	}
	if d := l.Peek(innocent); d.Allowed && d.Remaining == 1 {
		t.Fatalf("an innocent key whose cells collide with a spent one starts fresh: %+v", d)
	}
}

// TestEvictionRaceInline replays the same race on the flat table's inline
// words: a request found a key's slot, the key is evicted and created
// again; the word the request found grants nothing, and the request finds
// the key's new slot.
func TestEvictionRaceInline(t *testing.T) {
	for _, alg := range []string{TokenBucket, FixedWindow, SlidingCounter} {
		clock := NewManualClock(0)
		l, err := New(Config{Algorithm: alg, Rule: Rule{Limit: 2, Period: time.Hour}, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		l.Allow("k")
		clock.Advance(2 * time.Hour)
		id := l.hasher.ID("k")
		orphanTable, orphan := l.flat.Find(id) // a request found this slot ...
		if l.EvictIdle() != 1 {
			t.Fatalf("%s: k is idle after two hours", alg)
		}
		l.AllowN("k", 2) // ... k is created again and emptied ...
		var st word.Status
		if alg == TokenBucket {
			_, st = rulesOf(orphanTable).bucket.TakeWord(orphanTable.Word(orphan), orphanTable.Origin, clock.Now(), 1)
		} else {
			_, st = rulesOf(orphanTable).window.TakeWord(orphanTable.Word(orphan), orphanTable.Origin, clock.Now(), 1)
		}
		if st != word.Gone {
			t.Fatalf("%s: the evicted word answered %v, not Gone", alg, st)
		}
		if allowed, _, _ := l.onWord(id, clock.Now(), opTake, 1, nil); allowed {
			t.Fatalf("%s: k passed 3 in one period across an eviction", alg)
		}
	}
}

// TestObjectForms checks what the flat table's slots point at: the
// sliding log and its twin directly (one load fewer on every request),
// every other state out of line through a box; and that each form gives
// back the state it was given, through a request, a reset (a successor)
// and an eviction.
func TestObjectForms(t *testing.T) {
	served := logForm
	if !shardlog.LockFree() {
		served = mutexLogForm // "sliding_log" is the twin here
	}
	for _, c := range []struct {
		alg  string
		want form
	}{
		{SlidingLog, served},
		{testhook.SlidingLogMutex, mutexLogForm},
		{testhook.TokenBucketMutex, boxed},
		{testhook.LeakyBucketMutex, boxed},
	} {
		clock := NewManualClock(0)
		l, err := New(Config{Algorithm: c.alg, Rule: Rule{Limit: 2, Period: time.Hour}, Clock: clock, twins: true})
		if err != nil {
			t.Fatal(err)
		}
		if l.form != c.want {
			t.Fatalf("%s: form %d, want %d", c.alg, l.form, c.want)
		}
		s := l.state(l.hasher.ID("k"), clock.Now())
		if got := l.stateAt(l.pointerTo(s)); got != s {
			t.Fatalf("%s: a slot's pointer names %p, not the state %p", c.alg, got, s)
		}
		for i := range 3 {
			if got := l.Allow("k"); got != (i < 2) {
				t.Fatalf("%s: request %d of a limit of 2: Allow = %v", c.alg, i+1, got)
			}
		}
		l.Reset("k") // retires s: the next request moves to its successor
		if _, live := s.Take(clock.Now(), 1); live {
			t.Fatalf("%s: the reset state still grants", c.alg)
		}
		if !l.Allow("k") {
			t.Fatalf("%s: after Reset k starts afresh", c.alg)
		}
		clock.Advance(time.Hour)
		if n := l.EvictIdle(); n != 1 {
			t.Fatalf("%s: EvictIdle removed %d keys, want 1", c.alg, n)
		}
	}
}
