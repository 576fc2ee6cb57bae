package memcachelimit

import (
	"math"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/memcachetest"
	"github.com/floodgate-go/floodgate/storetest"
)

// settler is a Store seen as a floodgate.Settler alone: storetest treats
// a Store with a SlotPolicy method as a SlotStore, and this one's
// refuses (see TestSlotPolicyRefused).
type settler struct{ floodgate.Settler }

// newClient is a gomemcache client of addr, closed when t ends.
func newClient(t testing.TB, addr string) *memcache.Client {
	c := memcache.New(addr)
	c.Timeout = time.Second
	c.MaxIdleConns = 64
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newStore is a Store on c with cfg, closed when t ends.
func newStore(t testing.TB, c *memcache.Client, cfg Config) *Store {
	t.Helper()
	s, err := NewStore(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestConformance runs the Store conformance suite on Stores of one
// real memcached, replicas that share their state, their clock the
// suite's: with FailError, so that the outage's errors wrap
// ErrUnreached, and with FailLocal, whose outage is decided in process.
// The breaker never opens, so that the first call after an outage goes
// to memcached. The outage is memcached killed, and restarted empty.
func TestConformance(t *testing.T) {
	for _, mode := range []FailureMode{FailError, FailLocal} {
		t.Run(mode.String(), func(t *testing.T) {
			srv := memcachetest.Start(t)
			storetest.Run(t, storetest.Harness{
				New: func(t *testing.T, clock *floodgate.ManualClock) floodgate.Store {
					c := newClient(t, srv.Addr())
					s := newStore(t, c, Config{Prefix: "conformance:", Clock: clock, FailureMode: mode, BreakAfter: math.MaxInt32})
					return settler{s}
				},
				Shared: true,
				Outage: func(t *testing.T) func() {
					srv.Kill()
					return srv.Restart
				},
			})
		})
	}
}

// TestSlotPolicyRefused: SlotPolicy refuses, with an error that says
// why.
func TestSlotPolicyRefused(t *testing.T) {
	s := newStore(t, memcache.New("127.0.0.1:1"), Config{})
	var _ floodgate.SlotStore = s
	p, err := s.SlotPolicy("inflight", 5)
	if p != nil || err == nil {
		t.Fatalf("SlotPolicy: %v, %v; want a refusal", p, err)
	}
	t.Log(err)
}
