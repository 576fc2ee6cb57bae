package redislimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
)

// batchState is b's queue length and batches in flight.
func batchState(b *batcher) (queued, inflight int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue), b.inflight
}

// TestBatchAdmitsExactlyTheRule: 64 goroutines on one hot key, through a
// Limiter and through a Store's two policies, each deciding in batches,
// admit exactly the rule (500 an hour; the Store's tighter policy, 300),
// with no failure, in no more round trips than decisions.
func TestBatchAdmitsExactlyTheRule(t *testing.T) {
	srv := redistest.Start(t)
	const goroutines, each = 64, 20
	hammer := func(decide func() (bool, error)) (admitted int64) {
		var n atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					ok, err := decide()
					if err != nil {
						t.Error(err)
						return
					}
					if ok {
						n.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		return n.Load()
	}
	t.Run("Limiter", func(t *testing.T) {
		l := mustNew(t, client(t, srv), Config{Rule: floodgate.Rule{Limit: 500, Period: time.Hour}, Timeout: 5 * time.Second})
		got := hammer(func() (bool, error) {
			d, err := l.Allow(context.Background(), "hot")
			return d.Allowed, err
		})
		s := l.Stats()
		if got != 500 || s.Errors != 0 || s.Fallbacks != 0 || s.Calls > goroutines*each {
			t.Fatalf("admitted %d of %d, want 500; Stats %+v", got, goroutines*each, s)
		}
		t.Logf("%d decisions in %d round trips", goroutines*each, s.Calls)
	})
	t.Run("Store", func(t *testing.T) {
		st := mustStore(t, srv, Config{Timeout: 5 * time.Second})
		a, err := st.Policy("a", floodgate.TokenBucket, floodgate.Rule{Limit: 500, Period: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		b, err := st.Policy("b", floodgate.FixedWindow, floodgate.Rule{Limit: 300, Period: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ps := []floodgate.StorePolicy{a, b}
		got := hammer(func() (bool, error) {
			d, _, err := st.Decide(context.Background(), asksOf("hot", 1, ps, nil), nil)
			return d.Allowed, err
		})
		s := st.Stats()
		if got != 300 || s.Errors != 0 || s.Fallbacks != 0 || s.Calls > goroutines*each {
			t.Fatalf("admitted %d of %d, want 300; Stats %+v", got, goroutines*each, s)
		}
		t.Logf("%d decisions in %d round trips", goroutines*each, s.Calls)
	})
}

// TestBatchCallerGivesUp: a caller whose context ends while its call is in
// flight, or queued for the next batch, returns the context's error at
// once; the batches go on to their own deadline, and the other calls are
// decided on Redis; the queued call is never sent, and the call in
// flight, which Redis ran, is given back: neither keeps a charge.
func TestBatchCallerGivesUp(t *testing.T) {
	srv := redistest.Start(t)
	l := mustNew(t, client(t, srv), Config{Rule: floodgate.Rule{Limit: 100, Period: time.Hour}, Timeout: 10 * time.Second})
	if _, err := l.Allow(context.Background(), "warm"); err != nil { // dial, load the script
		t.Fatal(err)
	}
	type answer struct {
		d   floodgate.Decision
		err error
	}
	allow := func(ctx context.Context, key string) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			d, err := l.Allow(ctx, key)
			ch <- answer{d, err}
		}()
		return ch
	}
	state := func(queued, inflight int) func() bool {
		return func() bool { q, in := batchState(&l.s.batch); return q == queued && in == inflight }
	}
	srv.Pause()
	defer srv.Resume()

	// In flight: two lone calls fill the batches in flight; the first
	// has a deadline, which ends while Redis holds its call: its caller
	// returns at once, and its batch goes on.
	short, cancelShort := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelShort()
	lone := allow(short, "lone")
	waitUntil(t, "the first lone call in flight", 10*time.Second, state(0, 1))
	others := []<-chan answer{allow(context.Background(), "other")}
	waitUntil(t, "the second lone call in flight", 10*time.Second, state(0, 2))
	if a := <-lone; !errors.Is(a.err, context.DeadlineExceeded) || a.d.Allowed {
		t.Fatalf("the lone call: %+v, %v; want a denial with its deadline", a.d, a.err)
	}
	if q, in := batchState(&l.s.batch); q != 0 || in != 2 {
		t.Fatalf("%d queued, %d batches in flight: the lone caller's deadline ended its batch", q, in)
	}

	// Queued: the quitter's call waits first in the queue behind the two
	// batches in flight; the next batch goes to one of the others.
	ctx, cancel := context.WithCancel(context.Background())
	quitter := allow(ctx, "quitter")
	waitUntil(t, "the quitter queued", 10*time.Second, state(1, 2))
	for i := 0; i < 2; i++ {
		others = append(others, allow(context.Background(), "other"))
	}
	waitUntil(t, "3 calls queued", 10*time.Second, state(3, 2))
	cancel()
	if a := <-quitter; !errors.Is(a.err, context.Canceled) || a.d.Allowed {
		t.Fatalf("the quitter queued: %+v, %v; want a denial with context.Canceled", a.d, a.err)
	}

	srv.Resume()
	for i, ch := range others {
		if a := <-ch; a.err != nil || !a.d.Allowed {
			t.Fatalf("call %d beside the quitters: %+v, %v; want admitted", i, a.d, a.err)
		}
	}
	waitUntil(t, "no batch in flight", 10*time.Second, state(0, 0))
	waitUntil(t, "the refund", 10*time.Second, func() bool { return l.Stats().Refunded == 1 })
	s := l.Stats()
	if s.Abandoned != 2 || s.Errors != 0 || s.Fallbacks != 0 || s.Opens != 0 {
		t.Fatalf("Stats %+v; want 2 abandoned, 1 refunded, no failure", s)
	}
	for _, key := range []string{"lone", "quitter"} {
		if d, err := l.Peek(context.Background(), key); err != nil || d.Remaining != 99 {
			t.Fatalf("%s: %+v, %v; want 99 left after a peeked request: the abandoned call kept its charge", key, d, err)
		}
	}
}

// TestBatchReloadsLostScripts: after SCRIPT FLUSH, a batch in which the
// Store's multi-policy script is lost and its policy's own script is not
// (loaded again by hand) sends the lost ones again whole, counts each in
// Loads, and decides every call on Redis.
func TestBatchReloadsLostScripts(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	st := mustStore(t, srv, Config{Timeout: 10 * time.Second})
	a, err := st.Policy("a", floodgate.TokenBucket, floodgate.Rule{Limit: 100, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Policy("b", floodgate.TokenBucket, floodgate.Rule{Limit: 100, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	both, one := []floodgate.StorePolicy{a, b}, []floodgate.StorePolicy{a}
	decide := func(ps []floodgate.StorePolicy) <-chan error {
		ch := make(chan error, 1)
		go func() {
			d, _, err := st.Decide(context.Background(), asksOf("k", 1, ps, nil), nil)
			if err == nil && !d.Allowed {
				err = errors.New("denied")
			}
			ch <- err
		}()
		return ch
	}
	for _, ps := range [][]floodgate.StorePolicy{both, one} { // dial, load both scripts
		if err := <-decide(ps); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptLoad(ctx, gcraScript.src).Err(); err != nil {
		t.Fatal(err)
	}
	before := st.Stats()
	srv.Pause()
	defer srv.Resume()
	var calls []<-chan error
	for i := 0; i < 2; i++ { // the two batches in flight, one policy each
		calls = append(calls, decide(one))
		waitUntil(t, "a batch in flight", 10*time.Second, func() bool { q, in := batchState(&st.batch); return q == 0 && in == i+1 })
	}
	for i := 0; i < 6; i++ { // the next batch: three of each
		calls = append(calls, decide([][]floodgate.StorePolicy{both, one}[i%2]))
	}
	waitUntil(t, "6 calls queued", 10*time.Second, func() bool { q, _ := batchState(&st.batch); return q == 6 })
	srv.Resume()
	for i, ch := range calls {
		if err := <-ch; err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	s := st.Stats()
	if s.Loads-before.Loads != 3 || s.Calls-before.Calls != 3 || s.Errors != 0 || s.Fallbacks != 0 {
		t.Fatalf("Stats before %+v, after %+v; want 3 loads in 3 round trips, no failure", before, s)
	}
}

// TestBatchFailsWithinTimeout: with Redis paused, a batch of calls fails
// within Timeout, and each caller gets its FailureMode's answer.
func TestBatchFailsWithinTimeout(t *testing.T) {
	srv := redistest.Start(t)
	const timeout, callers = 200 * time.Millisecond, 8
	for _, mode := range []FailureMode{FailLocal, FailOpen, FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			l := mustNew(t, client(t, srv), Config{Rule: floodgate.Rule{Limit: 100, Period: time.Hour}, Timeout: timeout,
				FailureMode: mode, BreakAfter: 1000, Prefix: mode.String()})
			if _, err := l.Allow(context.Background(), "warm"); err != nil {
				t.Fatal(err)
			}
			srv.Pause()
			defer srv.Resume()
			var wg sync.WaitGroup
			for g := 0; g < callers; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					start := time.Now()
					d, err := l.Allow(context.Background(), "k")
					if took := time.Since(start); took > timeout+budgetSlack {
						t.Errorf("a call took %v, Timeout %v", took, timeout)
					}
					if err != nil || d.Allowed != (mode != FailClosed) {
						t.Errorf("%v: %+v, %v", mode, d, err)
					}
				}()
			}
			wg.Wait()
			s := l.Stats()
			if s.Errors != callers || s.Timeouts != callers || s.Fallbacks != callers || s.Abandoned != 0 {
				t.Fatalf("Stats %+v; want %d timeouts answered by %v", s, callers, mode)
			}
			t.Logf("%d callers in %d round trips", callers, s.Calls-1)
		})
	}
}
