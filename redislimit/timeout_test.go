package redislimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/outage"
	"github.com/floodgate-go/floodgate/internal/redistest"
)

// The bound of TestTimeoutBoundsEveryPath: a call that Redis does not
// answer ends within oneTimeout and a half of it. A call that waited
// twice would take two Timeouts at least, whatever the machine's load,
// and fail; the half is what a loaded 2-core machine under the race
// detector may add to one wait.
const oneTimeout = time.Second

// path is one way a caller reaches Redis: prepare runs with Redis up
// (what the call needs in place, and the script loaded), call with Redis
// stopped, and returns each of its callers' time and error.
type path struct {
	name    string
	lease   bool
	prepare func(t *testing.T, s *Store, ps []floodgate.StorePolicy) (call func() []timed)
}

// timed is one caller's call: how long it took, and its error.
type timed struct {
	took time.Duration
	err  error
}

// timeCall times fn.
func timeCall(fn func() error) timed {
	start := time.Now()
	err := fn()
	return timed{time.Since(start), err}
}

// concurrently runs fn from n goroutines at once, and returns each one's
// time.
func concurrently(n int, fn func(i int) error) []timed {
	out := make([]timed, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = timeCall(func() error { return fn(i) })
		}()
	}
	wg.Wait()
	return out
}

func one(fn func() error) []timed { return []timed{timeCall(fn)} }

func ask(p floodgate.StorePolicy, key string, n int64) floodgate.Ask {
	return floodgate.Ask{Policy: p, Key: key, N: n}
}

// decideErr is Decide's error alone.
func decideErr(s *Store, ctx context.Context, asks ...floodgate.Ask) error {
	_, _, err := s.Decide(ctx, asks, nil)
	return err
}

// paths are every way a caller waits on Redis: a decision of one policy
// and of several, alone and batched with 63 others, a Peek, a Charge, a
// Reserve and a Settle (which may need two round trips), a lease refill
// and the callers waiting on it, an in-flight slot's Acquire and Release,
// and a request of several calls that share its context (as a
// floodgate-rls request's decision, checks and charge do).
var paths = []path{
	{name: "Decide one", prepare: func(t *testing.T, s *Store, ps []floodgate.StorePolicy) func() []timed {
		ctx := context.Background()
		return func() []timed { return one(func() error { return decideErr(s, ctx, ask(ps[0], "k", 1)) }) }
	}},
	{name: "Decide many", prepare: func(t *testing.T, s *Store, ps []floodgate.StorePolicy) func() []timed {
		ctx := context.Background()
		return func() []timed {
			return one(func() error { return decideErr(s, ctx, ask(ps[0], "k", 1), ask(ps[1], "k", 1)) })
		}
	}},
	{name: "batched", prepare: func(t *testing.T, s *Store, ps []floodgate.StorePolicy) func() []timed {
		return func() []timed {
			return concurrently(64, func(i int) error {
				ctx := context.Background() // a caller whose context cannot end leads its batch itself
				if i%2 == 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, time.Hour) // one whose can, in a goroutine
					defer cancel()
				}
				return decideErr(s, ctx, ask(ps[i%2], fmt.Sprint("k", i%5), 1))
			})
		}
	}},
	{name: "Peek", prepare: func(t *testing.T, s *Store, ps []floodgate.StorePolicy) func() []timed {
		return func() []timed {
			return one(func() error { _, err := ps[0].Peek(context.Background(), "k"); return err })
		}
	}},
	{name: "Charge one", prepare: func(t *testing.T, s *Store, ps []floodgate.StorePolicy) func() []timed {
		return func() []timed {
			return one(func() error {
				_, err := s.Charge(context.Background(), []floodgate.Ask{ask(ps[0], "k", 5)}, nil)
				return err
			})
		}
	}},
	{name: "Charge many", prepare: func(t *testing.T, s *Store, ps []floodgate.StorePolicy) func() []timed {
		return func() []timed {
			return one(func() error {
				_, err := s.Charge(context.Background(), []floodgate.Ask{ask(ps[0], "k", 5), ask(ps[1], "k", 5)}, nil)
				return err
			})
		}
	}},
	{name: "Reserve", prepare: func(t *testing.T, s *Store, ps []floodgate.StorePolicy) func() []timed {
		return func() []timed {
			return one(func() error {
				var h floodgate.Hold
				_, _, err := s.Reserve(context.Background(), []floodgate.Ask{ask(ps[0], "k", 5), ask(ps[1], "k", 0)}, nil, &h)
				return err
			})
		}
	}},
	{name: "Settle", prepare: func(t *testing.T, s *Store, ps []floodgate.StorePolicy) func() []timed {
		// One ask's cost over its estimate (a charge), the other's under
		// it (a give-back): two round trips when Redis answers.
		var h floodgate.Hold
		if _, refused, err := s.Reserve(context.Background(), []floodgate.Ask{ask(ps[0], "k", 5), ask(ps[1], "k", 5)}, nil, &h); err != nil || refused >= 0 {
			t.Fatalf("Reserve: refused %d, %v", refused, err)
		}
		return func() []timed {
			return one(func() error {
				_, err := s.Settle(context.Background(), []floodgate.Ask{ask(ps[0], "k", 9), ask(ps[1], "k", 2)}, nil, &h)
				return err
			})
		}
	}},
	{name: "lease refill", lease: true, prepare: func(t *testing.T, s *Store, ps []floodgate.StorePolicy) func() []timed {
		return func() []timed {
			return one(func() error { return decideErr(s, context.Background(), ask(ps[0], "new", 1)) })
		}
	}},
	{name: "lease refill and its waiters", lease: true, prepare: func(t *testing.T, s *Store, ps []floodgate.StorePolicy) func() []timed {
		return func() []timed {
			return concurrently(16, func(i int) error {
				if i%4 == 0 {
					_, err := ps[0].Peek(context.Background(), "new")
					return err
				}
				return decideErr(s, context.Background(), ask(ps[0], "new", 1))
			})
		}
	}},
	{name: "lease Peek", lease: true, prepare: func(t *testing.T, s *Store, ps []floodgate.StorePolicy) func() []timed {
		return func() []timed {
			return one(func() error { _, err := ps[0].Peek(context.Background(), "new"); return err })
		}
	}},
	{name: "lease Decide many", lease: true, prepare: func(t *testing.T, s *Store, ps []floodgate.StorePolicy) func() []timed {
		return func() []timed {
			return one(func() error { return decideErr(s, context.Background(), ask(ps[0], "new", 1), ask(ps[1], "new", 1)) })
		}
	}},
	{name: "slot Acquire", prepare: func(t *testing.T, s *Store, ps []floodgate.StorePolicy) func() []timed {
		sp, err := s.SlotPolicy("slots", 10)
		if err != nil {
			t.Fatal(err)
		}
		return func() []timed {
			return one(func() error { _, _, err := sp.Acquire(context.Background(), "k"); return err })
		}
	}},
	{name: "slot Release", prepare: func(t *testing.T, s *Store, ps []floodgate.StorePolicy) func() []timed {
		sp, err := s.SlotPolicy("slots", 10)
		if err != nil {
			t.Fatal(err)
		}
		slot, ok, err := sp.Acquire(context.Background(), "k")
		if !ok || err != nil {
			t.Fatalf("Acquire: %v, %v", ok, err)
		}
		return func() []timed { return one(func() error { slot.Release(); return nil }) }
	}},
	{name: "a request of several calls", prepare: func(t *testing.T, s *Store, ps []floodgate.StorePolicy) func() []timed {
		return func() []timed {
			return one(func() error {
				// A decision, a check looked at after it, and a charge,
				// as floodgate-rls makes for one request: they share its
				// context, and the first failure answers the rest.
				ctx := outage.With(context.Background())
				err1 := decideErr(s, ctx, ask(ps[0], "k", 1))
				_, err2 := ps[1].Peek(ctx, "k")
				_, err3 := s.Charge(ctx, []floodgate.Ask{ask(ps[0], "k", 7)}, nil)
				return errors.Join(err1, err2, err3)
			})
		}
	}},
}

// TestTimeoutBoundsEveryPath stops Redis (SIGSTOP: its connections hang,
// as a stalled server's do) and makes each path's call: under FailLocal
// and FailError, every caller's call ends within one Timeout and a half,
// so that none waits twice; and each reached Redis and ran out of
// Timeout, so that the bound was tested. Under FailError the calls that
// decide (all but a slot's Release) fail with an error that wraps
// floodgate.ErrUnreached and reports a timeout.
//
// Before: a Settle whose asks needed both a charge and a give-back waited
// two Timeouts, one per round trip, as did a request's decision and the
// check after it.
func TestTimeoutBoundsEveryPath(t *testing.T) {
	for _, mode := range []FailureMode{FailLocal, FailError} {
		for _, pt := range paths {
			t.Run(mode.String()+"/"+pt.name, func(t *testing.T) {
				t.Parallel()
				srv := redistest.Start(t)
				cfg := Config{Timeout: oneTimeout, FailureMode: mode, BreakAfter: 1000}
				if pt.lease {
					cfg.Lease.Max = 100
				}
				s := mustStore(t, srv, cfg)
				var ps []floodgate.StorePolicy
				for _, name := range []string{"a", "b"} {
					ps = append(ps, mustPolicy(t, s, name, floodgate.TokenBucket, floodgate.Rule{Limit: 1000, Period: time.Hour}))
				}
				// Redis loads the scripts before it stops: a reload is part
				// of a call's Timeout, and is tested by TestFaults.
				if err := decideErr(s, context.Background(), ask(ps[0], "warm", 1), ask(ps[1], "warm", 1)); err != nil {
					t.Fatal(err)
				}
				for _, p := range ps {
					if err := decideErr(s, context.Background(), ask(p, "warm", 1)); err != nil {
						t.Fatal(err)
					}
				}
				call := pt.prepare(t, s, ps)
				before := s.Stats()
				srv.Pause()
				defer srv.Resume()
				for i, c := range call() {
					if c.took > oneTimeout*3/2 {
						t.Errorf("caller %d took %v, past one Timeout (%v) and a half", i, c.took, oneTimeout)
					}
					switch {
					case mode == FailError && pt.name != "slot Release":
						var to interface{ Timeout() bool }
						if !errors.Is(c.err, floodgate.ErrUnreached) || !errors.As(c.err, &to) || !to.Timeout() {
							t.Errorf("caller %d: %v, want an error that wraps floodgate.ErrUnreached, a timeout", i, c.err)
						}
						if errors.Is(c.err, context.DeadlineExceeded) {
							t.Errorf("caller %d: %v wraps context.DeadlineExceeded, which is a caller's", i, c.err)
						}
					case c.err != nil:
						t.Errorf("caller %d: %v", i, c.err)
					}
				}
				if after := s.Stats(); after.Calls == before.Calls {
					t.Fatalf("no call reached Redis: %+v", after)
				} else if after.Timeouts == before.Timeouts && pt.name != "slot Release" {
					t.Fatalf("no call ran out of Timeout: %+v", after)
				}
			})
		}
	}
}
