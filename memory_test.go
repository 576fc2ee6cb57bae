package floodgate_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/heaptest"
)

// What holding reservations may cost, as SECURITY.md states it: nothing
// beyond what their keys cost held or not, within their policies'
// bounds. A key's entry in the flat table is a third of a 64-byte bucket
// line and a 4-byte serial, at the half load a table is rebuilt at: 51
// bytes, within keyBytes with its allocation's rounding; a policy's
// sketch is 8 bytes a cell, a cell a key of MaxKeys rounded up to a power
// of two (sketchBytes for MaxKeys 10,000), and its Limiter 64 KiB at
// most. A WaitN's goroutine costs waiterBytes beside (the goroutine and
// its wake on the clock; its stack apart).
const (
	keyBytes    = 64
	sketchBytes = 8 * 16384
	waiterBytes = 1024
)

// TestHeldReservationsMemory holds 10,000 reservations, each of a key of
// its own, taken a thousand at a time between rounds of 100,000 ids that
// come and go (each reserved and settled, then evicted at MaxKeys 10,000
// by later ones): 1M ids in all, while the first reservations are held.
// It finds the heap grown by the policies and what the reservations keep
// within keyBytes a held reservation, sketchBytes and 64 KiB, a policy
// (and waiterBytes a WaitN): a reservation keeps nothing of the tables
// its key was in, and costs what its key costs. Before, a held
// reservation kept the table its grant landed in, and with it every
// table its shard made after it (each points to the one that replaced
// it): 8.4 KB a reservation and policy here, growing with the ids for as
// long as it was held.
//
// Three forms: a LocalStore's Reserve of two policies, a token bucket and
// a fixed window (httplimit's and grpclimit's After policies hold one for
// a whole request); a Limiter's Reserve; and WaitN, whose reservation is
// held while its caller waits. Each is then settled or cancelled. Not
// under the race detector, whose own allocations make a heap figure
// mean nothing: make test runs it without -race.
func TestHeldReservationsMemory(t *testing.T) {
	if raceDetector {
		t.Skip("a heap figure under the race detector means nothing: make test runs this test without -race")
	}
	const maxKeys, rounds, churn = 10_000, 10, 100_000
	ctx := context.Background()
	budget := floodgate.Rule{Limit: 1000, Period: time.Minute}
	for _, form := range []string{"store", "limiter", "wait"} {
		t.Run(form, func(t *testing.T) {
			clock := floodgate.NewManualClock(int64(time.Hour))
			var holds []floodgate.Hold
			var reservations []floodgate.Reservation
			switch form {
			case "store":
				holds = make([]floodgate.Hold, maxKeys)
			case "limiter":
				reservations = make([]floodgate.Reservation, maxKeys)
			}
			before := heaptest.Live()

			policies, waiter := 1, uint64(0)
			period := budget.Period               // after which an id that came and went is forgotten
			var hold func(k int, key string) bool // takes reservation k, of key, and keeps it
			var come func(id string)              // an id that comes and goes
			var settle func(k int)                // settles or cancels reservation k
			var waiting func() int                // the WaitNs waiting
			var errs chan error
			switch form {
			case "store":
				s := floodgate.NewLocalStore(floodgate.LocalStoreConfig{Clock: clock, MaxKeys: maxKeys, IdleTTL: floodgate.Never})
				t.Cleanup(func() { s.Close() })
				tokens := newPolicy(t, s, "tokens", floodgate.TokenBucket, budget)
				window := newPolicy(t, s, "window", floodgate.FixedWindow, budget)
				policies = 2
				asks := func(key string, n int64) []floodgate.Ask {
					return []floodgate.Ask{{Policy: tokens, Key: key, N: n}, {Policy: window, Key: key, N: n}}
				}
				hold = func(k int, key string) bool {
					d, _, err := s.Reserve(ctx, asks(key, 500), nil, &holds[k])
					if err != nil {
						t.Fatal(err)
					}
					return d.Allowed
				}
				come = func(id string) {
					var h floodgate.Hold
					if _, _, err := s.Reserve(ctx, asks(id, 10), nil, &h); err != nil {
						t.Fatal(err)
					}
					if !h.Admitted {
						return // refused: its key was made all the same
					}
					if _, err := s.Settle(ctx, asks(id, 3), nil, &h); err != nil {
						t.Fatal(err)
					}
				}
				settle = func(k int) {
					if _, err := s.Settle(ctx, asks("held-"+strconv.Itoa(k), 100), nil, &holds[k]); err != nil {
						t.Fatal(err)
					}
				}
			case "limiter":
				l := newLimiter(t, floodgate.Config{Rule: budget, Clock: clock, MaxKeys: maxKeys})
				hold = func(k int, key string) bool {
					reservations[k] = l.Reserve(key, 500)
					return reservations[k].Decision().Allowed
				}
				come = func(id string) {
					if r := l.Reserve(id, 10); r.Decision().Allowed {
						if _, err := r.Settle(3); err != nil {
							t.Fatal(err)
						}
					}
				}
				settle = func(k int) {
					if _, err := reservations[k].Settle(100); err != nil {
						t.Fatal(err)
					}
				}
			case "wait":
				// A key of 100 requests in 100 hours: a Charge takes them
				// all (or leaves the key owing, if the sketch made it
				// spent), and a WaitN then reserves 100 more and waits at
				// least 100 hours for them, until the test cancels it.
				l := newLimiter(t, floodgate.Config{Rule: floodgate.Rule{Limit: 100, Period: 100 * time.Hour}, Clock: clock, MaxKeys: maxKeys})
				period = time.Hour
				waiter = waiterBytes
				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				errs = make(chan error, maxKeys)
				hold = func(_ int, key string) bool {
					if _, err := l.Charge(key, 100); err != nil {
						t.Fatal(err)
					}
					go func() { errs <- l.WaitN(wctx, key, 100) }()
					return true
				}
				come = func(id string) { l.Allow(id) }
				waiting = clock.Waiting
				cancelled := 0
				settle = func(int) {
					if cancelled == 0 {
						cancel()
					}
					if err := <-errs; !errors.Is(err, context.Canceled) {
						t.Fatalf("a WaitN cancelled while it waited: %v", err)
					}
					cancelled++
				}
			}

			// Keys to hold: new ones, a thousand after each round of ids,
			// so that they are taken from every generation of the
			// tables. The clock moves on a period first, so that the ids
			// of the round, which the sketch remembers as spent once
			// evicted, are fresh again, and no new key takes after them.
			held, came := 0, 0
			for r := range rounds {
				for range churn {
					come("id-" + strconv.Itoa(came))
					came++
				}
				clock.Advance(period)
				for ; held < maxKeys*(r+1)/rounds; held++ {
					if !hold(held, "held-"+strconv.Itoa(held)) {
						t.Fatalf("a reservation of a new key, held-%d, was refused", held)
					}
				}
				if waiting != nil {
					// Every WaitN holds its reservation before the next
					// round: wait on the clock's count of its waiters.
					deadline := time.Now().Add(time.Minute)
					for waiting() < held {
						if time.Now().After(deadline) {
							t.Fatalf("%d of %d WaitNs wait after a minute", waiting(), held)
						}
						runtime.Gosched()
					}
				}
			}
			after := heaptest.Live()

			limit := uint64(policies)*(uint64(held)*keyBytes+sketchBytes+64<<10) + uint64(held)*waiter
			grew := after - min(after, before)
			per := float64(grew) / float64(held*policies)
			t.Logf("%s: %d ids came and went, %d reservations held of %d policies: %d bytes (%.1f a reservation and policy; the bound %d, %.1f)",
				form, came, held, policies, grew, per, limit, float64(limit)/float64(held*policies))
			if grew > limit {
				t.Errorf("%d reservations held of %d policies hold %d bytes (%.1f a reservation and policy), above %d", held, policies, grew, per, limit)
			}
			runtime.KeepAlive(holds)
			runtime.KeepAlive(reservations)
			for k := range held {
				settle(k)
			}
		})
	}
}

// newPolicy returns s's new policy name, of alg and rule.
func newPolicy(t *testing.T, s *floodgate.LocalStore, name, alg string, rule floodgate.Rule) floodgate.StorePolicy {
	t.Helper()
	p, err := s.Policy(name, alg, rule)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
