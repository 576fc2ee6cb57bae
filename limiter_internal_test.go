package floodgate

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/hook"
	"github.com/floodgate-go/floodgate/internal/word"
	"github.com/floodgate-go/floodgate/shardedlog"
)

// TestSweeper drives the sweeper with a tick channel of the test's own:
// keys idle for IdleTTL on the manual clock are evicted, busier ones stay,
// and Close stops the goroutine.
func TestSweeper(t *testing.T) {
	clock := NewManualClock(0)
	l, err := New(Config{Rule: Rule{Limit: 10, Period: time.Second}, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	tick := make(chan time.Time)
	done := make(chan int)
	l.stop, l.swept = make(chan struct{}), make(chan struct{})
	go l.sweep(time.Minute, tick, done)

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
	if _, i := l.flat.Find(l.id("busy")); i < 0 {
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

// TestEvictionRaceUnit replays the race by hand on the reference
// registry: a request loads a state, the state is evicted and the key is
// created again; the request that held the orphan must not consume from it
// but move on to the live state.
func TestEvictionRaceUnit(t *testing.T) {
	for _, alg := range []string{TokenBucket, hook.TokenBucketMutex} {
		clock := NewManualClock(0)
		l, err := New(Config{Algorithm: alg, Rule: Rule{Limit: 2, Period: time.Hour}, Clock: clock, reference: true, twins: true})
		if err != nil {
			t.Fatal(err)
		}
		l.Allow("k")
		clock.Advance(time.Hour)
		orphan, _ := l.ref.Load("k") // a request loaded this ...
		if l.EvictIdle() != 1 {
			t.Fatal("k is idle after an hour")
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
		s := l.ref.Replace("k", orphan, orphan.Successor(clock.Now()))
		if d, _ := s.AllowN(clock.Now(), 1); d.Allowed {
			t.Fatalf("%s: Replace installed a fresh state over the live one", alg)
		}
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
		id := l.id("k")
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
	if !shardedlog.LockFree() {
		served = mutexLogForm // "sliding_log" is the twin here
	}
	for _, c := range []struct {
		alg  string
		want form
	}{
		{SlidingLog, served},
		{hook.SlidingLogMutex, mutexLogForm},
		{hook.TokenBucketMutex, boxed},
		{hook.LeakyBucketMutex, boxed},
	} {
		clock := NewManualClock(0)
		l, err := New(Config{Algorithm: c.alg, Rule: Rule{Limit: 2, Period: time.Hour}, Clock: clock, twins: true})
		if err != nil {
			t.Fatal(err)
		}
		if l.form != c.want {
			t.Fatalf("%s: form %d, want %d", c.alg, l.form, c.want)
		}
		s := l.state("k", l.id("k"), clock.Now())
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
