package stress

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/chaos"
)

// flood streams distinct new keys from its own goroutines while legitimate
// goroutines hammer a few keys; a sampler checks Len all along. Flood keys
// come back now and then (each goroutine asks again for its key of
// maxKeys/4 keys earlier: by then its 8 streams have brought twice the
// bound of new keys), so that a key evicted at the bound is asked again.
// onAdmit sees each admission.
func flood(t *testing.T, l *floodgate.Limiter, maxKeys, floodKeys int, clock func() int64, onAdmit func(key string, now int64, d floodgate.Decision)) {
	const legitKeys, legitG, floodG = 100, 32, 8
	legitMin := perRound(2_000, 0)
	floodBack := maxKeys / 4
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var samples, over atomic.Int64
	wg.Add(1)
	go func() { // the sampler
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if l.Len() > maxKeys {
				over.Add(1)
			}
			samples.Add(1)
			runtime.Gosched()
		}
	}()
	var work sync.WaitGroup
	var floodDone atomic.Bool
	for g := range legitG {
		work.Add(1)
		go func() {
			defer work.Done()
			r := rand.New(rand.NewPCG(uint64(g), 11))
			// Until the flood ends, with a yield between requests so that
			// 32 of them leave the flood its share of the cores, and at
			// least 2,000 requests each (200 in the quick form).
			for i := 0; !floodDone.Load() || i < legitMin; i++ {
				runtime.Gosched()
				key := "legit-" + strconv.Itoa(r.IntN(legitKeys))
				now := clock()
				if d := l.AllowAt(key, now, 1); d.Allowed {
					onAdmit(key, now, d)
				}
			}
		}()
	}
	var floodWG sync.WaitGroup
	for g := range floodG {
		floodWG.Add(1)
		go func() {
			defer floodWG.Done()
			per := floodKeys / floodG
			for i := range per {
				for _, j := range []int{i, i - floodBack} {
					if j < 0 {
						continue
					}
					key := "flood-" + strconv.Itoa(g) + "-" + strconv.Itoa(j)
					now := clock()
					if d := l.AllowAt(key, now, 1); d.Allowed {
						onAdmit(key, now, d)
					}
				}
			}
		}()
	}
	floodWG.Wait()
	floodDone.Store(true)
	work.Wait()
	close(stop)
	wg.Wait()
	if over.Load() > 0 {
		t.Fatalf("Len exceeded MaxKeys %d in %d of %d samples", maxKeys, over.Load(), samples.Load())
	}
	if samples.Load() < 10 {
		t.Fatalf("the sampler ran only %d times", samples.Load())
	}
	if st := l.Stats(); st.EvictedAtBound == 0 {
		t.Fatalf("no key was evicted at the bound: %+v", st)
	}
}

// floodSize is the bound and the stream of new keys: MaxKeys 10,000 and
// 48,000 keys, enough to cycle the bound more than four times, and
// 2,000,000 under -long. Under the chaos tag, where every CAS yields, the
// short form, and -short (for emulation), shrink to a bound of 2,000 and
// 12,000 keys: the same cycling, in the time CI has. The quick form (make
// test) cycles a bound of 1,000 six times.
func floodSize() (maxKeys, keys int) {
	switch {
	case *long:
		return 10_000, 2_000_000
	case chaos.Enabled, testing.Short():
		return 2_000, 12_000
	case quick():
		return 1_000, 6_000
	}
	return 10_000, 48_000
}

// TestMaxKeysFrozenFlood: a frozen clock, MaxKeys 10,000, 32 goroutines
// on 100 legitimate keys and a stream of distinct new keys (see
// floodSize), some asked again after they were surely evicted. Nothing
// refills, so every key, legitimate or not, admits at most its capacity
// in all, and Len never passes MaxKeys.
func TestMaxKeysFrozenFlood(t *testing.T) {
	forEach(t, func(t *testing.T, a algorithm) {
		if a.reference {
			t.Skip("the reference limiter has no MaxKeys")
		}
		maxKeys, n := floodSize()
		rule := floodgate.Rule{Limit: 5, Period: time.Hour}
		clock := floodgate.NewManualClock(1 << 40)
		l := mustLimiter(t, a, floodgate.Config{Algorithm: a.name, Rule: rule, Clock: clock, MaxKeys: maxKeys})
		var mu sync.Mutex
		admitted := map[string]int64{}
		flood(t, l, maxKeys, n, clock.Now, func(key string, _ int64, _ floodgate.Decision) {
			mu.Lock()
			admitted[key]++
			mu.Unlock()
		})
		for key, got := range admitted {
			if got > rule.Capacity() {
				t.Fatalf("%s admitted %d under a frozen clock, above its capacity %d", key, got, rule.Capacity())
			}
		}
	})
}

// TestMaxKeysMovingFlood is the flood with a clock that moves while it
// runs: each legitimate key's admissions, by request time, must keep the
// algorithm's invariant (the stress ledger's check), and so must the flood
// keys that came back.
func TestMaxKeysMovingFlood(t *testing.T) {
	forEach(t, func(t *testing.T, a algorithm) {
		if a.reference {
			t.Skip("the reference limiter has no MaxKeys")
		}
		maxKeys, n := floodSize()
		rule := floodgate.Rule{Limit: 50, Period: 100 * time.Millisecond}
		if a.family == bucket {
			rule.Burst = 5
		}
		clock := floodgate.NewManualClock(1 << 40)
		var ticks atomic.Int64
		now := func() int64 {
			if ticks.Add(1)%64 == 0 {
				clock.Advance(37 * time.Microsecond)
			}
			return clock.Now()
		}
		l := mustLimiter(t, a, floodgate.Config{Algorithm: a.name, Rule: rule, Clock: clock, MaxKeys: maxKeys})
		var mu sync.Mutex
		times := map[string][]int64{}
		flood(t, l, maxKeys, n, now, func(key string, at int64, d floodgate.Decision) {
			if a.family == logged {
				// The log charges a reading that was overtaken at the
				// newest entry's time; ResetAfter tells which.
				at += int64(d.ResetAfter) - int64(rule.Period)
			}
			mu.Lock()
			times[key] = append(times[key], at)
			mu.Unlock()
		})
		for key, ts := range times {
			log := newLedger(a.family, rule)
			for _, at := range sortedCopy(ts) {
				log.add(at, 1)
			}
			if err := log.check(); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
		}
	})
}
