package stress

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// TestSetRuleFrozenClock changes the rule, again and again, while 64
// goroutines race on a few keys (with GOMAXPROCS above the cores) on a
// frozen clock, where nothing refills: a key's allowance can only fall,
// and each change leaves it at most the new capacity. So a key never
// passes more in all than the first rule's capacity, and never more after
// change j returned than change j's capacity. With a global cap, which
// runs out halfway and refunds every grant after that, the refunds must
// not lift a key past either bound.
func TestSetRuleFrozenClock(t *testing.T) {
	forEach(t, func(t *testing.T, a algorithm) {
		if a.reference {
			t.Skip("the reference limiter has no SetRule")
		}
		caps := []int64{4000, 1000, 3000, 200, 5000, 50, 2500}
		if quick() {
			caps = []int64{400, 100, 300, 20, 500, 5, 250}
		}
		rules := make([]floodgate.Rule, len(caps))
		for j, c := range caps {
			if a.family == bucket {
				rules[j] = floodgate.Rule{Limit: []int64{1000, 10, 1}[j%3], Period: time.Second, Burst: c}
			} else {
				rules[j] = floodgate.Rule{Limit: c, Period: []time.Duration{time.Second, 10 * time.Second, time.Hour}[j%3]}
			}
		}
		for _, global := range []bool{false, true} {
			t.Run(fmt.Sprintf("global=%v", global), func(t *testing.T) {
				keys := keyNames(4)
				cfg := floodgate.Config{Algorithm: a.name, Rule: rules[0], Clock: floodgate.NewManualClock(12345)}
				if global {
					cfg.Global = &floodgate.Rule{Limit: 1, Period: time.Hour, Burst: caps[0] * int64(len(keys)) / 3}
				}
				l := mustLimiter(t, a, cfg)
				var admitted [4]atomic.Int64
				for k, key := range keys { // every key is held from the first rule on
					if l.Allow(key) {
						admitted[k].Add(1)
					}
				}
				var attempts atomic.Int64
				var stop atomic.Bool
				var wg sync.WaitGroup
				for g := range goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := rand.New(rand.NewPCG(uint64(g), 3))
						for !stop.Load() {
							k := r.IntN(len(keys))
							switch n := int64(r.IntN(4)); n {
							case 0:
								l.Peek(keys[k])
							case 1:
								if l.Allow(keys[k]) {
									admitted[k].Add(1)
								}
							default:
								if l.AllowN(keys[k], n).Allowed {
									admitted[k].Add(n)
								}
							}
							attempts.Add(1)
						}
					}()
				}
				// Each phase asks at least twice what all keys could hold.
				phase := int64(2 * len(keys) * int(caps[0]))
				snaps := make([][4]int64, len(rules))
				for j := 1; j < len(rules); j++ {
					for attempts.Load() < int64(j)*phase {
						runtime.Gosched()
					}
					if err := l.SetRule(rules[j]); err != nil {
						t.Fatal(err)
					}
					for k := range keys {
						snaps[j][k] = admitted[k].Load()
					}
				}
				for attempts.Load() < int64(len(rules))*phase {
					runtime.Gosched()
				}
				stop.Store(true)
				wg.Wait()
				for k, key := range keys {
					final := admitted[k].Load()
					if final > caps[0] {
						t.Errorf("%s passed %d in all, above the first capacity %d", key, final, caps[0])
					}
					for j := 1; j < len(rules); j++ {
						if after := final - snaps[j][k]; after > caps[j] {
							t.Errorf("%s passed %d after change %d returned, above its capacity %d", key, after, j, caps[j])
						}
					}
				}
			})
		}
	})
}
