package floodgate_test

import (
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testhook"
	"go.uber.org/goleak"
)

// closeTogether calls stop from 8 goroutines at once, then once more.
func closeTogether(stop func()) {
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stop()
		}()
	}
	wg.Wait()
	stop()
}

// TestCloseIsIdempotent: Close from many goroutines, and again, returns nil
// every time and leaves no sweeper behind. After Close the Limiter goes on
// deciding exactly as before (the documented behaviour), and EvictIdle
// still evicts; only the background sweep is gone.
func TestCloseIsIdempotent(t *testing.T) {
	// Other tests' Limiters that were never closed sweep until the
	// collector takes them (the sweep holds its Limiter weakly): only
	// this test's goroutines are its own to check.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, alg := range every {
		clock := floodgate.NewManualClock(0)
		l, err := floodgate.New(testhook.Twins(floodgate.Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 3, Period: time.Hour},
			Clock: clock, IdleTTL: time.Minute}).(floodgate.Config))
		if err != nil {
			t.Fatal(err)
		}
		l.Allow("before")
		var errs sync.Map
		closeTogether(func() {
			if err := l.Close(); err != nil {
				errs.Store(err, true)
			}
		})
		errs.Range(func(k, _ any) bool { t.Errorf("%s: Close = %v", alg, k); return true })
		for i := 0; i < 5; i++ {
			if got, want := l.Allow("after"), i < 3; got != want {
				t.Fatalf("%s: Allow %d after Close = %v, want %v", alg, i, got, want)
			}
		}
		if d := l.AllowN("before", 2); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("%s: a key from before Close: %+v", alg, d)
		}
		clock.Advance(2 * time.Hour)
		if n := l.EvictIdle(); n != 2 {
			t.Fatalf("%s: EvictIdle after Close evicted %d, want 2", alg, n)
		}
	}
}

// TestStopIsIdempotent: a CoarseClock's and a TSCClock's Stop, from many
// goroutines and again, end their goroutine; later readings go on (the
// coarse clock's frozen at its last sample, never going back; the TSC
// clock's extrapolated from its last anchor).
func TestStopIsIdempotent(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	coarse := floodgate.NewCoarseClock(time.Millisecond)
	before := coarse.Now()
	closeTogether(coarse.Stop)
	if a, b := coarse.Now(), coarse.Now(); a < before || a != b {
		t.Fatalf("CoarseClock after Stop read %d then %d (before Stop: %d)", a, b, before)
	}
	tsc := floodgate.NewTSCClock()
	before = tsc.Now()
	closeTogether(tsc.Stop)
	if a, b := tsc.Now(), tsc.Now(); a < before || b < a {
		t.Fatalf("TSCClock after Stop read %d then %d (before Stop: %d)", a, b, before)
	}
}
