package redislimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// budgetSlack is what a call may take beyond its budget before the test
// calls it a wait past the budget: scheduling on a loaded 2-core machine
// under the race detector. A client that ignored the budget would wait
// for go-redis's ReadTimeout, 3s.
const budgetSlack = 750 * time.Millisecond

// TestFaults takes Redis away in each of the ways it goes in production,
// under each FailureMode: paused (SIGSTOP: connections hang), killed
// (connections refused), restarted empty (its script cache gone), and
// SCRIPT FLUSH. In every case each call ends within its budget, the mode
// decides as it promises, the breaker stops calling Redis after BreakAfter
// failures and probes once ProbeEvery has passed, and decisions resume on
// Redis once it is back.
func TestFaults(t *testing.T) {
	for _, mode := range []FailureMode{FailLocal, FailOpen, FailClosed, FailError} {
		t.Run(mode.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			c := client(t, srv)
			ctx := context.Background()
			clock := floodgate.NewManualClock(0)
			const budget = 250 * time.Millisecond
			cfg := Config{Rule: floodgate.Rule{Limit: 10, Period: time.Hour}, Timeout: budget, FailureMode: mode,
				Clock: clock, BreakAfter: 3, ProbeEvery: time.Second}
			if mode == FailLocal {
				cfg.Local = &floodgate.Rule{Limit: 2, Period: time.Hour}
			}
			var reported []error
			cfg.OnError = func(err error) { reported = append(reported, err) }
			l := mustNew(t, c, cfg)

			want := l.Stats()
			check := func(stage string) {
				t.Helper()
				if got := l.Stats(); got != want {
					t.Fatalf("%s: Stats = %+v, want %+v", stage, got, want)
				}
			}
			fromRedis := func(stage string, remaining ...int64) floodgate.Decision {
				t.Helper()
				d, err := l.Allow(ctx, "k")
				if err != nil {
					t.Fatalf("%s: %v", stage, err)
				}
				want.Calls++
				check(stage)
				if len(remaining) == 2 && (d.Remaining < remaining[0] || d.Remaining > remaining[1]) {
					t.Fatalf("%s: %+v; want Remaining in [%d, %d]", stage, d, remaining[0], remaining[1])
				}
				return d
			}
			// outage makes calls while Redis is away; the first `failing`
			// of them reach it and fail.
			localGrants := 0
			outage := func(stage string, calls, failing int) {
				t.Helper()
				for i := 0; i < calls; i++ {
					start := time.Now()
					d, err := l.Allow(ctx, "k")
					if took := time.Since(start); took > budget+budgetSlack {
						t.Fatalf("%s: call %d took %v, past its budget of %v", stage, i, took, budget)
					}
					if mode == FailError {
						if !errors.Is(err, floodgate.ErrUnreached) || d.Allowed || !d.Unreached || d.RetryAfter != time.Second {
							t.Fatalf("%s: FailError answered %+v, %v; want a refusal with ErrUnreached", stage, d, err)
						}
					} else if err != nil {
						t.Fatalf("%s: call %d: %v", stage, i, err)
					}
					switch mode {
					case FailOpen:
						if !d.Allowed {
							t.Fatalf("%s: FailOpen denied: %+v", stage, d)
						}
					case FailClosed:
						if d.Allowed || d.RetryAfter != time.Second {
							t.Fatalf("%s: FailClosed answered %+v; want a denial with RetryAfter = ProbeEvery", stage, d)
						}
					case FailLocal:
						if wantAllowed := localGrants < 2; d.Allowed != wantAllowed {
							t.Fatalf("%s: FailLocal after %d local grants answered %+v (Local allows 2)", stage, localGrants, d)
						}
						if d.Allowed {
							localGrants++
						}
					}
					if i < failing {
						want.Calls++
						want.Errors++
					}
					want.Fallbacks++
				}
				want.Opens++
			}

			want.Loads++ // the first call on a server sends the script
			fromRedis("healthy", 9, 9)
			fromRedis("healthy", 8, 8)

			// Paused: every call that reaches Redis waits out its budget.
			srv.Pause()
			outage("paused", 6, 3)
			want.Timeouts += 3
			check("paused")
			if len(reported) != 3 {
				t.Fatalf("OnError saw %d errors; want 3", len(reported))
			}
			srv.Resume()
			// The breaker holds until ProbeEvery has passed on the clock.
			clock.Advance(999 * time.Millisecond)
			outage("resumed, breaker still open", 1, 0)
			want.Opens--
			check("resumed, breaker still open")
			clock.Advance(time.Millisecond)
			// The probe goes to Redis. The three timed-out scripts may have
			// run once Redis woke (that is why none is retried): they
			// charged up to three more.
			probe := fromRedis("probe after the pause", 10-2-3-1, 10-2-1)
			fromRedis("closed again", probe.Remaining-1, probe.Remaining-1)

			// Killed: connections are refused at once.
			srv.Kill()
			before := want.Timeouts
			outage("killed", 4, 3)
			// A refused dial fails at once, but go-redis dials again with
			// a backoff, so a call may end by its budget: either is a
			// failure within the budget.
			if got := l.Stats().Timeouts; got < before || got > before+3 {
				t.Fatalf("killed: %d timeouts among 3 failed calls", got-before)
			} else {
				want.Timeouts = got
			}
			check("killed")
			// Restarted empty: no data, no scripts. The probe reloads.
			srv.Restart()
			clock.Advance(time.Second)
			want.Loads++
			fromRedis("probe after the restart", 9, 9)

			// SCRIPT FLUSH: the next call reloads, and nothing fails.
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			want.Loads++
			fromRedis("after SCRIPT FLUSH", 8, 8)
		})
	}
}

// TestCallerGaveUp: a context that ends before the call is the caller's,
// not Redis's failure: the call is denied with the context's error, under
// every FailureMode, and the breaker counts nothing.
func TestCallerGaveUp(t *testing.T) {
	srv := redistest.Start(t)
	for _, mode := range []FailureMode{FailLocal, FailOpen, FailClosed, FailError} {
		l := mustNew(t, client(t, srv), Config{Rule: floodgate.Rule{Limit: 1, Period: time.Hour}, FailureMode: mode, Prefix: mode.String()})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for i := 0; i < 5; i++ {
			d, err := l.Allow(ctx, "k")
			if !errors.Is(err, context.Canceled) || d.Allowed {
				t.Fatalf("%v: Allow with a cancelled context = %+v, %v", mode, d, err)
			}
		}
		if s := l.Stats(); s.Calls != 0 || s.Errors != 0 || s.Opens != 0 || s.Fallbacks != 0 || s.Abandoned != 5 {
			t.Fatalf("%v: Stats = %+v", mode, s)
		}
		if d, err := l.Allow(context.Background(), "k"); err != nil || !d.Allowed {
			t.Fatalf("%v: Allow after the cancelled calls = %+v, %v", mode, d, err)
		}
	}
}

// TestShortDeadlinesNeverOpenTheBreaker is the attack of a client that
// sets its own deadline (gRPC's grpc-timeout): 16 goroutines send 25
// calls each with a deadline of 10µs, shorter than a round trip, against
// a healthy server and a rule of 5 an hour. Under every FailureMode the
// breaker never opens, no failure is counted, the attacker passes no more
// than the rule (before, FailOpen passed 300 of 300 once three calls had
// opened the breaker), and a client without a deadline is then decided
// on Redis.
func TestShortDeadlinesNeverOpenTheBreaker(t *testing.T) {
	srv := redistest.Start(t)
	for _, mode := range []FailureMode{FailLocal, FailOpen, FailClosed, FailError} {
		t.Run(mode.String(), func(t *testing.T) {
			l := mustNew(t, client(t, srv), Config{Rule: floodgate.Rule{Limit: 5, Period: time.Hour}, FailureMode: mode,
				Prefix: "deadline-" + mode.String()})
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < 16; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 25; i++ {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Microsecond)
						if d, _ := l.Allow(ctx, "attacker"); d.Allowed {
							admitted.Add(1)
						}
						cancel()
					}
				}()
			}
			wg.Wait()
			// An abandoned call may still be on its way: its batch is sent
			// by a goroutine that its caller did not wait for.
			waitUntil(t, "no batch in flight", 10*time.Second, func() bool { q, in := batchState(&l.s.batch); return q == 0 && in == 0 })
			l.s.refunds.Wait() // and their refunds, each a round trip that Calls counts
			s := l.Stats()
			if s.Opens != 0 || s.Errors != 0 || s.Fallbacks != 0 {
				t.Fatalf("the attacker's deadlines counted against Redis: %+v", s)
			}
			if s.Abandoned == 0 {
				t.Fatalf("no call was abandoned: the test's deadlines did not bite: %+v", s)
			}
			if got := admitted.Load(); got > 5 {
				t.Fatalf("the attacker passed %d of 400 calls against a rule of 5 an hour", got)
			}
			d, err := l.Allow(context.Background(), "fresh")
			if err != nil || !d.Allowed || d.Remaining != 4 {
				t.Fatalf("a fresh client without a deadline: %+v, %v; want admitted on Redis", d, err)
			}
			if after := l.Stats(); after.Calls != s.Calls+1 || after.Fallbacks != 0 {
				t.Fatalf("the fresh client was not decided on Redis: %+v", after)
			}
		})
	}
}

// TestKeyErrorsOpenNoBreaker: a key that something else wrote (a list, so
// that GET fails with WRONGTYPE; a string the script cannot read) makes
// that key's calls fail on Redis. They are answered by the FailureMode
// and counted as key errors, but the breaker stays closed: every other
// key is still decided on Redis.
func TestKeyErrorsOpenNoBreaker(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	l := mustNew(t, c, Config{Rule: floodgate.Rule{Limit: 10, Period: time.Hour}, FailureMode: FailClosed})
	if err := c.RPush(ctx, l.redisKey("list"), "x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, l.redisKey("garbage"), "not a state", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var reported []error
	l.s.set.onError = func(err error) { reported = append(reported, err) }
	for i := 0; i < 10; i++ {
		for _, k := range []string{"list", "garbage"} {
			if d, err := l.Allow(ctx, k); err != nil || d.Allowed {
				t.Fatalf("%s: %+v, %v; want FailClosed's denial", k, d, err)
			}
		}
	}
	s := l.Stats()
	if s.Opens != 0 || s.Errors != 20 || s.KeyErrors != 20 || s.Fallbacks != 20 {
		t.Fatalf("Stats = %+v; want 20 key errors and a closed breaker", s)
	}
	if len(reported) != 20 || !redis.HasErrorPrefix(reported[0], "WRONGTYPE") {
		t.Fatalf("OnError saw %d errors, the first %v", len(reported), reported[0])
	}
	if d, err := l.Allow(ctx, "other"); err != nil || !d.Allowed || d.Remaining != 9 {
		t.Fatalf("another key: %+v, %v; want it decided on Redis", d, err)
	}
	if after := l.Stats(); after.Calls != s.Calls+1 || after.Fallbacks != s.Fallbacks {
		t.Fatalf("another key did not reach Redis: %+v", after)
	}
}

// TestOutageUnderLoad pauses Redis under 64 goroutines: every call ends
// within its budget, and once the breaker opens no call reaches Redis, so
// the outage costs only the calls already in flight.
func TestOutageUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	const budget = 200 * time.Millisecond
	l := mustNew(t, client(t, srv), Config{Rule: floodgate.Rule{Limit: 1000, Period: time.Hour}, Timeout: budget,
		Clock: floodgate.NewManualClock(0)})
	if _, err := l.Allow(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	const goroutines, calls = 64, 20
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				start := time.Now()
				if _, err := l.Allow(context.Background(), "k"); err != nil {
					errs <- err
					return
				}
				if took := time.Since(start); took > budget+budgetSlack {
					errs <- fmt.Errorf("a call took %v, past its budget of %v", took, budget)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s := l.Stats()
	// In flight when the breaker opens: one call per goroutine, and the
	// ones that failed before the third failure were back for one more.
	if s.Opens != 1 || s.Fallbacks != goroutines*calls || s.Calls > 1+goroutines+defaultBreakAfter-1 {
		t.Fatalf("Stats = %+v; want one opening, every call a fallback, and at most %d calls to Redis", s, 1+goroutines+defaultBreakAfter-1)
	}
}

// TestFailErrorNamesTheCause: FailError's error wraps
// floodgate.ErrUnreached and says why Redis did not decide, by its
// Timeout method and its text: a stalled server ran out of Timeout (a
// timeout, and never context.DeadlineExceeded, which is a caller's); a
// killed one refused or broke the connection (no timeout); and while the
// breaker is open, the failure that opened it. (The client dials once:
// go-redis's default DialerRetries would dial a killed server again
// until the call's Timeout, and report the context's error.)
func TestFailErrorNamesTheCause(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	l := mustNew(t, c, Config{Rule: floodgate.Rule{Limit: 10, Period: time.Hour}, Timeout: 200 * time.Millisecond,
		FailureMode: FailError, BreakAfter: 2, Clock: floodgate.NewManualClock(0)})
	ctx := context.Background()
	if _, err := l.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	check := func(stage string, timeout bool, text string) {
		t.Helper()
		d, err := l.Allow(ctx, "k")
		var to interface{ Timeout() bool }
		switch {
		case d.Allowed || !d.Unreached:
			t.Fatalf("%s: %+v, want a refusal, Unreached", stage, d)
		case !errors.Is(err, floodgate.ErrUnreached) || !errors.As(err, &to):
			t.Fatalf("%s: %v, want an error that wraps floodgate.ErrUnreached, with a Timeout method", stage, err)
		case to.Timeout() != timeout || errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("%s: %v: Timeout() = %v, want %v, and no context.DeadlineExceeded", stage, err, to.Timeout(), timeout)
		case !strings.Contains(err.Error(), text):
			t.Fatalf("%s: %q, want it to say %q", stage, err, text)
		}
	}
	srv.Pause()
	check("paused", true, "redislimit: Redis did not decide: ")
	check("paused again: the breaker opens", true, "redislimit: Redis did not decide: ")
	check("breaker open", true, "the circuit breaker is open, after ")
	srv.Resume()
	srv.Kill()
	l.s.breaker.succeed(false) // closed, as a probe would leave it on a Redis that answered
	check("killed", false, "connect: connection refused")
}

// TestFailLocalChargeOwes: while Redis is away, FailLocal takes a
// Charge into its in-process limiter as Redis would, past what the key
// holds, so that the key owes there and its checks refuse: a token
// budget's checks and costs (a Peek, then a Charge of 600 on a budget of
// 1,000) pass two streams, then none. Before, the fallback answered a
// charge as a request (AllowN), which takes nothing from a key holding
// less than the cost: the checks passed without end. For one policy's
// charge and for several at once (the multi-policy script's).
func TestFailLocalChargeOwes(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	s, err := NewStore(c, Config{FailureMode: FailLocal, Timeout: time.Second, Clock: floodgate.NewManualClock(0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	budget := floodgate.Rule{Limit: 1000, Period: time.Hour}
	a := mustPolicy(t, s, "a", floodgate.TokenBucket, budget)
	b := mustPolicy(t, s, "b", floodgate.FixedWindow, budget)
	ctx := context.Background()
	srv.Kill()
	for name, asks := range map[string][]floodgate.Ask{"one policy": {ask(a, "k", 600)}, "two policies": {ask(a, "j", 600), ask(b, "j", 600)}} {
		streams := 0
		for range 10 {
			d, err := asks[0].Policy.Peek(ctx, asks[0].Key)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				break
			}
			streams++
			each := make([]floodgate.Decision, len(asks))
			if _, err := s.Charge(ctx, asks, each); err != nil {
				t.Fatal(err)
			}
		}
		if streams != 2 {
			t.Errorf("%s: %d streams of 600 passed their checks on a budget of 1,000, want 2 (the second leaves the key owing)", name, streams)
		}
	}
	if st := s.Stats(); st.Opens == 0 || st.Fallbacks == 0 {
		t.Fatalf("Redis killed, yet %+v", st)
	}
}
