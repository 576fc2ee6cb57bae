package memcachelimit

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/memcachetest"
)

// TestFailureModes: with memcached killed, each FailureMode answers as
// it says; the breaker opens after BreakAfter failures, after which no
// call is sent, every error reaches OnError, and once memcached is back
// the first call after ProbeEvery decides on it again.
func TestFailureModes(t *testing.T) {
	const limit = 3
	rule := floodgate.Rule{Limit: limit, Period: time.Hour}
	for _, mode := range []FailureMode{FailLocal, FailOpen, FailClosed, FailError} {
		t.Run(mode.String(), func(t *testing.T) {
			srv := memcachetest.Start(t)
			clock := floodgate.NewManualClock(t0)
			var onError atomic.Int64
			s := newStore(t, newClient(t, srv.Addr()), Config{Clock: clock, FailureMode: mode, BreakAfter: 2, ProbeEvery: time.Second,
				OnError: func(error) { onError.Add(1) }})
			p := mustPolicy(t, s, "fail", floodgate.FixedWindow, rule)
			if d := allow(t, s, p, "warm"); !d.Allowed || d.Unreached {
				t.Fatalf("with memcached up: %+v", d)
			}
			srv.Kill()
			ctx := context.Background()
			admitted := 0
			for i := range limit + 2 {
				d, refused, err := s.Decide(ctx, []floodgate.Ask{{Policy: p, Key: "k", N: 1}}, nil)
				switch mode {
				case FailOpen:
					if err != nil || !d.Allowed || !d.Unreached || refused != -1 {
						t.Fatalf("request %d: %+v, %d, %v; want an Unreached admission", i, d, refused, err)
					}
				case FailClosed:
					if err != nil || d.Allowed || !d.Unreached || refused != 0 || d.RetryAfter != time.Second {
						t.Fatalf("request %d: %+v, %d, %v; want an Unreached refusal, RetryAfter the probe interval", i, d, refused, err)
					}
				case FailError:
					if !errors.Is(err, floodgate.ErrUnreached) || d.Allowed || refused != 0 {
						t.Fatalf("request %d: %+v, %d, %v; want a refusal with an error that wraps ErrUnreached", i, d, refused, err)
					}
				case FailLocal:
					if err != nil {
						t.Fatalf("request %d: %v", i, err)
					}
				}
				if d.Allowed {
					admitted++
				}
			}
			// A charge answers as a request of N would: FailClosed
			// refuses it (charging nothing), FailOpen admits it.
			cd, cerr := s.Charge(ctx, []floodgate.Ask{{Policy: p, Key: "c", N: 1}}, nil)
			switch mode {
			case FailClosed:
				if cerr != nil || cd.Allowed || !cd.Unreached {
					t.Errorf("Charge with memcached down: %+v, %v; want an Unreached refusal", cd, cerr)
				}
			case FailOpen:
				if cerr != nil || !cd.Allowed || !cd.Unreached {
					t.Errorf("Charge with memcached down: %+v, %v; want an Unreached admission", cd, cerr)
				}
			}
			if mode == FailLocal && admitted != limit {
				t.Errorf("FailLocal admitted %d of %d with memcached down; want the rule in process, %d", admitted, limit+2, limit)
			}
			if _, err := p.Peek(ctx, "k"); (err != nil) != (mode == FailError) {
				t.Errorf("Peek with memcached down: %v", err)
			}
			st := s.Stats()
			if st.Opens != 1 || onError.Load() != 2 || st.Errors != 2 || st.Fallbacks != limit+4 {
				t.Errorf("Stats %+v, OnError called %d times; want the breaker opened once after 2 errors, and %d fallbacks", st, onError.Load(), limit+4)
			}
			calls := st.Calls
			_, _, _ = s.Decide(ctx, []floodgate.Ask{{Policy: p, Key: "k", N: 1}}, nil)
			if got := s.Stats().Calls; got != calls {
				t.Errorf("with the breaker open, a call was sent (Calls %d, then %d)", calls, got)
			}
			srv.Restart()
			clock.Advance(time.Second) // the probe's turn
			// The probe may find the pooled connection that the kill broke;
			// the next probe, a ProbeEvery later, dials again.
			deadline := time.Now().Add(30 * time.Second)
			for {
				d, _, err := s.Decide(ctx, []floodgate.Ask{{Policy: p, Key: "after", N: 1}}, nil)
				if err == nil && !d.Unreached {
					if !d.Allowed {
						t.Errorf("memcached back: %+v; want a first request of a new key admitted", d)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("memcached back, and still not reached after 30 s: %+v, %v", d, err)
				}
				clock.Advance(time.Second)
			}
		})
	}
}

// TestTimeout: a memcached that answers nothing (paused) fails each call
// within the client's timeout, with an error whose Timeout method says
// so, counted in Stats.Timeouts.
func TestTimeout(t *testing.T) {
	srv := memcachetest.Start(t)
	c := newClient(t, srv.Addr())
	c.Timeout = 100 * time.Millisecond
	s := newStore(t, c, Config{Clock: floodgate.NewManualClock(t0), FailureMode: FailError, Timeout: 100 * time.Millisecond})
	p := mustPolicy(t, s, "timeout", floodgate.TokenBucket, floodgate.Rule{Limit: 5, Period: time.Second})
	allow(t, s, p, "k")
	srv.Pause()
	defer srv.Resume()
	_, _, err := s.Decide(context.Background(), []floodgate.Ask{{Policy: p, Key: "k", N: 1}}, nil)
	var te interface{ Timeout() bool }
	if !errors.Is(err, floodgate.ErrUnreached) || !errors.As(err, &te) || !te.Timeout() {
		t.Fatalf("Decide with memcached paused: %v; want an error that wraps ErrUnreached and reports a timeout", err)
	}
	if st := s.Stats(); st.Timeouts != 1 {
		t.Errorf("Stats.Timeouts %d; want 1", st.Timeouts)
	}
}

// TestAbandoned: a caller whose context has ended is refused with its
// context's error, charged nothing, and counted against no breaker.
func TestAbandoned(t *testing.T) {
	srv := memcachetest.Start(t)
	s := newStore(t, newClient(t, srv.Addr()), Config{Clock: floodgate.NewManualClock(t0), BreakAfter: 1})
	p := mustPolicy(t, s, "abandoned", floodgate.FixedWindow, floodgate.Rule{Limit: 2, Period: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 3 {
		d, _, err := s.Decide(ctx, []floodgate.Ask{{Policy: p, Key: "k", N: 1}}, nil)
		if !errors.Is(err, context.Canceled) || d.Allowed {
			t.Fatalf("Decide with a cancelled context: %+v, %v", d, err)
		}
	}
	if got := drain(t, s, p, "k", 2); got != 2 {
		t.Errorf("%d admitted after the cancelled requests; want 2, none charged", got)
	}
	if st := s.Stats(); st.Abandoned != 3 || st.Opens != 0 {
		t.Errorf("Stats %+v; want 3 abandoned and the breaker closed", st)
	}
}

// TestCounts: AppendCounts reports the Store's decisions by result, its
// round trips and its breaker, as package counts names them.
func TestCounts(t *testing.T) {
	srv := memcachetest.Start(t)
	s := newStore(t, newClient(t, srv.Addr()), Config{Clock: floodgate.NewManualClock(t0)})
	p := mustPolicy(t, s, "counts", floodgate.FixedWindow, floodgate.Rule{Limit: 2, Period: time.Hour})
	drain(t, s, p, "k", 2)
	got := map[string]int64{}
	for _, c := range s.AppendCounts(nil) {
		got[c.Metric.String()+"/"+c.Label] += c.Value
	}
	if got["Requests/allowed"] != 2 || got["Requests/denied"] != 1 || got["StoreCalls/"] != s.Stats().Calls || got["StoreCalls/"] < 3 {
		t.Errorf("AppendCounts %v; want 2 allowed, 1 denied, and the Store's calls", got)
	}
}
