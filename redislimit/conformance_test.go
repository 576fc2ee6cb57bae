package redislimit

import (
	"math"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/storetest"
	"github.com/redis/go-redis/v9"
)

// TestConformance runs the Store conformance suite on Stores of one
// real redis-server, replicas that share their state, per request (with
// FailError, so that the outage's errors wrap ErrUnreached) and in lease
// mode (with FailLocal). The scripts and the leases take the suite's
// clock for Redis's (see redisClock), and the breaker never opens, so
// that the first call after an outage goes to Redis. The outage is
// Redis killed, and restarted empty.
func TestConformance(t *testing.T) {
	for _, mode := range []struct {
		name  string
		cfg   Config
		ahead bool
	}{
		{"PerRequest", Config{FailureMode: FailError}, false},
		{"Lease", Config{Lease: Lease{Max: 100}}, true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			srv := redistest.Start(t)
			storetest.Run(t, storetest.Harness{
				New: func(t *testing.T, clock *floodgate.ManualClock) floodgate.Store {
					cfg := mode.cfg
					cfg.Prefix, cfg.Clock, cfg.BreakAfter = "conformance", clock, math.MaxInt32
					// A dial that Redis refuses (the outage) is tried again
					// at once, not after 100 ms, five times over.
					c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, DialerRetryTimeout: time.Millisecond})
					t.Cleanup(func() { _ = c.Close() })
					return storeWith(t, c, cfg, func(s *Store) {
						s.redisClock = clock
						s.margin = int64(1000 * time.Hour / time.Millisecond) // the suite's clock is not Redis's
						if s.lease != nil {
							s.lease.inline = true // renewals at once, on the suite's clock
						}
						renewByHand(s)
					})
				},
				Shared:     true,
				Ahead:      mode.ahead,
				Resolution: time.Microsecond,
				Outage: func(t *testing.T) func() {
					srv.Kill()
					return srv.Restart
				},
			})
		})
	}
}
