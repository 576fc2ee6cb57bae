package floodgate

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/testhook"
)

// waitAlgorithms are the limiters that reserve: each bucket and its twin.
var waitAlgorithms = []struct {
	name string
	make func(t testing.TB, cfg Config) *Limiter
}{
	{TokenBucket, waitLimiter(TokenBucket)},
	{testhook.TokenBucketMutex, waitLimiter(testhook.TokenBucketMutex)},
	{LeakyBucket, waitLimiter(LeakyBucket)},
	{testhook.LeakyBucketMutex, waitLimiter(testhook.LeakyBucketMutex)},
}

func waitLimiter(alg string) func(testing.TB, Config) *Limiter {
	return func(t testing.TB, cfg Config) *Limiter {
		cfg.Algorithm = alg
		return mustLimiter(t, cfg)
	}
}

// blocked waits, spinning, until n wakes are pending on clock.
func blocked(t *testing.T, clock *ManualClock, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a bound on a broken test, not a wait for time to pass
	for clock.Waiting() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters blocked, want %d", clock.Waiting(), n)
		}
		runtime.Gosched()
	}
}

// waitAsync runs WaitN in a goroutine and returns its result's channel.
func waitAsync(ctx context.Context, l *Limiter, key string, n int64) <-chan error {
	done := make(chan error, 1)
	go func() { done <- l.WaitN(ctx, key, n) }()
	return done
}

func pending(done <-chan error) bool {
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// TestWait: with tokens Wait passes at once; without, it blocks until the
// clock reaches the instant its tokens are there, and not a nanosecond
// before; waiters pass one interval apart, in order; and what they took is
// spent.
func TestWait(t *testing.T) {
	for _, a := range waitAlgorithms {
		t.Run(a.name, func(t *testing.T) {
			clock := NewManualClock(0)
			l := a.make(t, Config{Rule: Rule{Limit: 1, Period: time.Second, Burst: 2}, Clock: clock})
			ctx := context.Background()
			for range 2 {
				if err := l.Wait(ctx, "k"); err != nil {
					t.Fatal(err)
				}
			}
			first := waitAsync(ctx, l, "k", 1)
			blocked(t, clock, 1)
			second := waitAsync(ctx, l, "k", 1)
			blocked(t, clock, 2)
			clock.Advance(999 * time.Millisecond)
			if !pending(first) {
				t.Fatal("passed before its token was there")
			}
			clock.Advance(time.Millisecond)
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			if !pending(second) {
				t.Fatal("the second waiter passed with the first")
			}
			if l.Allow("k") {
				t.Fatal("Allow found a token the waiters had reserved")
			}
			clock.Advance(time.Second)
			if err := <-second; err != nil {
				t.Fatal(err)
			}
			if l.Allow("k") {
				t.Fatal("a token the second waiter took was still there")
			}
			clock.Advance(time.Second)
			if !l.Allow("k") {
				t.Fatal("the next token did not come")
			}
		})
	}
}

// TestWaitCancel: a wait cancelled while it is the last reservation gives
// back exactly what it took; one cancelled behind a later waiter gives
// back nothing, and no request then passes before its time.
func TestWaitCancel(t *testing.T) {
	for _, a := range waitAlgorithms {
		t.Run(a.name, func(t *testing.T) {
			clock := NewManualClock(0)
			l := a.make(t, Config{Rule: Rule{Limit: 1, Period: time.Second}, Clock: clock})
			l.Allow("k")
			before := l.Peek("k")
			ctx, cancel := context.WithCancel(context.Background())
			done := waitAsync(ctx, l, "k", 1)
			blocked(t, clock, 1)
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled wait returned %v", err)
			}
			if clock.Waiting() != 0 {
				t.Fatal("a cancelled wait left its wake")
			}
			if after := l.Peek("k"); after != before {
				t.Fatalf("cancel gave back %+v, want the state before the wait %+v", after, before)
			}

			// A, then B behind it; A cancels: B keeps its time, and the
			// token A reserved stays spent.
			actx, acancel := context.WithCancel(context.Background())
			aDone := waitAsync(actx, l, "k", 1)
			blocked(t, clock, 1)
			bDone := waitAsync(context.Background(), l, "k", 1)
			blocked(t, clock, 2)
			acancel()
			<-aDone
			clock.Advance(time.Second)
			if l.Allow("k") {
				t.Fatal("a new request took the slot of the cancelled waiter, beside B")
			}
			if !pending(bDone) {
				t.Fatal("B passed in A's slot")
			}
			clock.Advance(time.Second)
			if err := <-bDone; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWaitErrors: what can never pass, or pass in time, fails at once and
// consumes nothing; a window cannot wait.
func TestWaitErrors(t *testing.T) {
	clock := NewManualClock(0)
	l := mustLimiter(t, Config{Rule: Rule{Limit: 1, Period: time.Hour, Burst: 3}, Clock: clock})
	l.AllowN("k", 3)
	before := l.Peek("k")
	short, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for _, tc := range []struct {
		ctx  context.Context
		n    int64
		want error
	}{
		{context.Background(), 0, ErrExceedsCapacity},
		{context.Background(), 4, ErrExceedsCapacity},
		{short, 2, ErrExceedsDeadline}, // needs two hours
	} {
		if err := l.WaitN(tc.ctx, "k", tc.n); !errors.Is(err, tc.want) {
			t.Errorf("WaitN(n=%d) = %v, want %v", tc.n, err, tc.want)
		}
	}
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	if err := l.Wait(done, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("a done context: %v", err)
	}
	if after := l.Peek("k"); after != before {
		t.Fatalf("a failed Wait consumed: %+v, before %+v", after, before)
	}
	if clock.Waiting() != 0 {
		t.Fatal("a failed Wait left a wake")
	}
	for _, alg := range []string{FixedWindow, SlidingCounter, SlidingLog, testhook.FixedWindowMutex} {
		w := mustLimiter(t, Config{Algorithm: alg, Rule: Rule{Limit: 1, Period: time.Hour}, Clock: clock})
		if err := w.Wait(context.Background(), "k"); !errors.Is(err, ErrCannotWait) {
			t.Errorf("%s: %v", alg, err)
		}
	}
}

// TestWaitGlobal: the global cap is reserved too, the wait is the longer
// one, and a cancel gives both back.
func TestWaitGlobal(t *testing.T) {
	clock := NewManualClock(0)
	l := mustLimiter(t, Config{Rule: Rule{Limit: 100, Period: time.Second},
		Global: &Rule{Limit: 1, Period: time.Second}, Clock: clock})
	if err := l.Wait(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	done := waitAsync(context.Background(), l, "b", 1) // b's own bucket is full; the cap is not
	blocked(t, clock, 1)
	clock.Advance(time.Second - 1)
	if !pending(done) {
		t.Fatal("passed before the cap's token came")
	}
	clock.Advance(1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if l.Allow("c") {
		t.Fatal("the cap's token was spent twice")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done = waitAsync(ctx, l, "d", 1)
	blocked(t, clock, 1)
	cancel()
	<-done
	clock.Advance(time.Second)
	if !l.Allow("d") {
		t.Fatal("the cancelled wait kept the cap's token, or d's own")
	}
}

// TestWaitStress: many goroutines wait on one key while others cancel
// them at random and others take tokens with Allow, GOMAXPROCS above the
// cores. With the clock frozen, every wait either reserves or fails, and
// the tokens spent lie between what passed or still waits and that plus
// the cancelled waits (a cancel gives back at most its own, never twice). Then, moving the clock an interval
// at a time, no more pass by each instant than the rule allows, and every
// pending wait passes.
func TestWaitStress(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4 * runtime.NumCPU()))
	for _, a := range waitAlgorithms {
		t.Run(a.name, func(t *testing.T) {
			const waiters, burst = 256, 8
			clock := NewManualClock(0)
			l := a.make(t, Config{Rule: Rule{Limit: 1, Period: time.Millisecond, Burst: burst}, Clock: clock})
			var passed, cancelled, allowed atomic.Int64
			var wg sync.WaitGroup
			cancels := make([]context.CancelFunc, waiters)
			ctxs := make([]context.Context, waiters)
			for i := range ctxs {
				ctxs[i], cancels[i] = context.WithCancel(context.Background())
			}
			var done [waiters]atomic.Bool
			for i := range waiters {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer done[i].Store(true)
					switch err := l.Wait(ctxs[i], "hot"); {
					case err == nil:
						passed.Add(1)
					case errors.Is(err, context.Canceled):
						cancelled.Add(1)
					default:
						t.Errorf("wait %d: %v", i, err)
					}
				}()
			}
			// Grants race the reservations: Allow takes what is there.
			var granted sync.WaitGroup
			for range 4 {
				granted.Add(1)
				go func() {
					defer granted.Done()
					for range 64 {
						if l.Allow("hot") {
							allowed.Add(1)
						}
					}
				}()
			}
			// Cancel a third of the waits at random, racing their reservations.
			var cancelledSet [waiters]bool
			for _, i := range rand.Perm(waiters)[:waiters/3] {
				cancelledSet[i] = true
				cancels[i]()
			}
			granted.Wait()
			// Settled: every cancelled wait has returned, and every other one
			// has returned or blocked. The others cannot move on while the
			// clock stands still, and the returns are counted before the
			// wakes, so that none is counted twice.
			settled := func() bool {
				returned := 0
				for i := range done {
					if done[i].Load() {
						returned++
					} else if cancelledSet[i] {
						return false
					}
				}
				return returned+clock.Waiting() == waiters
			}
			deadline := time.Now().Add(time.Minute) // a bound on a broken test, not a wait for time to pass
			for !settled() {
				if time.Now().After(deadline) {
					t.Fatalf("waits not settled: %d blocked", clock.Waiting())
				}
				runtime.Gosched()
			}
			blockedNow := int64(clock.Waiting())
			spent := int64(l.Peek("hot").ResetAfter / time.Millisecond) // the clock stands at 0: the debt is all that was spent
			immediate := passed.Load() + allowed.Load()
			if low, high := blockedNow+immediate, blockedNow+immediate+cancelled.Load(); spent < low || spent > high {
				t.Fatalf("%d tokens spent; %d waits pending, %d passed, %d cancelled: want %d to %d", spent, blockedNow, immediate, cancelled.Load(), low, high)
			}
			for step := int64(1); clock.Waiting() > 0; step++ {
				clock.Advance(time.Millisecond)
				runtime.Gosched()
				if got, most := passed.Load()+allowed.Load(), burst+step; got > most {
					t.Fatalf("%d passed by %dms, above the rule's %d", got, step, most)
				}
				if step > 4*waiters {
					t.Fatalf("wakes still pending at %dms", step)
				}
			}
			wg.Wait()
			if passed.Load()+cancelled.Load() != waiters {
				t.Fatalf("%d passed and %d cancelled of %d waits", passed.Load(), cancelled.Load(), waiters)
			}
			for _, c := range cancels {
				c()
			}
		})
	}
}
