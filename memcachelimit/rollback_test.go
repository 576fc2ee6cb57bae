package memcachelimit

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/memcachetest"
)

// TestRollback: a request of two policies, decided admitted on the
// states it read, finds at its second write that another replica took
// the last unit in between (the write takes the cost again on the
// key's state as it is then): the second ask now refuses, so the first
// ask's charge, already written, is given back, and the request is
// refused and charged nothing, as if never decided.
func TestRollback(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg, func(t *testing.T) {
			srv := memcachetest.Start(t)
			clock := floodgate.NewManualClock(t0)
			c := newClient(t, srv.Addr())
			a := newStore(t, c, Config{Prefix: "rollback:", Clock: clock, FailureMode: FailError})
			b := newStore(t, c, Config{Prefix: "rollback:", Clock: clock, FailureMode: FailError})
			wide := floodgate.Rule{Limit: 10, Period: time.Hour}
			narrow := floodgate.Rule{Limit: 1, Period: time.Hour}
			pa, qa := mustPolicy(t, a, "p", alg, wide), mustPolicy(t, a, "q", alg, narrow)
			qb := mustPolicy(t, b, "q", alg, narrow)
			a.beforeWrite = func() {
				a.beforeWrite = nil
				if !allow(t, b, qb, "k").Allowed {
					t.Error("the other replica's request of q was refused")
				}
			}
			each := make([]floodgate.Decision, 2)
			d, refused, err := a.Decide(context.Background(), []floodgate.Ask{{Policy: pa, Key: "k", N: 1}, {Policy: qa, Key: "k", N: 1}}, each)
			if err != nil || d.Allowed || refused != 1 {
				t.Fatalf("the raced request: %+v, refused %d, %v; want refused by q (1)", d, refused, err)
			}
			if st := a.Stats(); st.RolledBack != 1 {
				t.Errorf("Stats %+v; want one grant given back", st)
			}
			peek, err := pa.Peek(context.Background(), "k")
			if err != nil || peek.Remaining != 9 {
				t.Errorf("p after the refused request: %+v, %v; want all 10 (Remaining 9 after the peeked one): nothing charged", peek, err)
			}
			if each[0] != peek {
				t.Errorf("p's answer %+v; want what it answers now, %+v", each[0], peek)
			}
		})
	}
}

// TestVanished: a key that vanishes between its read and its write
// (expired, evicted, deleted: memcached answers the cas NOT_FOUND) is
// read again and written anew, as a lost race is.
func TestVanished(t *testing.T) {
	srv := memcachetest.Start(t)
	clock := floodgate.NewManualClock(t0)
	c := newClient(t, srv.Addr())
	s := newStore(t, c, Config{Prefix: "vanished:", Clock: clock, FailureMode: FailError})
	rule := floodgate.Rule{Limit: 10, Period: time.Hour}
	p, q := mustPolicy(t, s, "p", floodgate.FixedWindow, rule), mustPolicy(t, s, "q", floodgate.FixedWindow, rule)
	asks := []floodgate.Ask{{Policy: p, Key: "k", N: 1}, {Policy: q, Key: "k", N: 1}}
	if _, refused, err := s.Decide(context.Background(), asks, nil); err != nil || refused != -1 {
		t.Fatalf("a first request: refused %d, %v", refused, err)
	}
	pk := p.(*policy).key("k")
	s.beforeStore = func(key string) {
		if key != pk {
			return
		}
		s.beforeStore = nil
		if err := c.Delete(pk); err != nil {
			t.Errorf("deleting p's key: %v", err)
		}
	}
	d, refused, err := s.Decide(context.Background(), asks, nil)
	if err != nil || refused != -1 || !d.Allowed {
		t.Fatalf("the request whose key vanished: %+v, refused %d, %v; want admitted", d, refused, err)
	}
	if st := s.Stats(); st.CASConflicts != 1 || st.Errors != 0 {
		t.Errorf("Stats %+v; want one conflict and no error", st)
	}
	if peek, err := p.Peek(context.Background(), "k"); err != nil || peek.Remaining != 8 {
		t.Errorf("p after: %+v, %v; want one request charged on a fresh key (Remaining 8 after the peeked one)", peek, err)
	}
}
