package redislimit

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/keystate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/internal/testhook"
	"github.com/redis/go-redis/v9"
)

// TestNewRejects checks that every bad configuration is an error from New
// that says what is wrong, and that none reaches a server.
func TestNewRejects(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer c.Close()
	ok := floodgate.Rule{Limit: 10, Period: time.Second}
	local := floodgate.Rule{Limit: 0, Period: time.Second}
	// An algorithm that floodgate.New takes, registered by the tests'
	// hook, has no Redis form. (Register fails harmlessly when -count runs
	// the test again.)
	_ = testhook.Register("redislimit_custom", func(floodgate.Rule) (keystate.Algorithm, error) { return custom{}, nil })
	cases := []struct {
		name   string
		client redis.UniversalClient
		cfg    Config
		want   string
	}{
		{"nil client", nil, Config{Rule: ok}, "needs a client"},
		{"zero limit", c, Config{Rule: floodgate.Rule{Period: time.Second}}, "Limit"},
		{"negative limit", c, Config{Rule: floodgate.Rule{Limit: -1, Period: time.Second}}, "Limit"},
		{"zero period", c, Config{Rule: floodgate.Rule{Limit: 1}}, "Period"},
		{"negative burst", c, Config{Rule: floodgate.Rule{Limit: 1, Period: time.Second, Burst: -1}}, "Burst"},
		{"overflowing rule", c, Config{Rule: floodgate.Rule{Limit: 1, Period: 1 << 62, Burst: 1 << 40}}, "burst window"},
		{"unknown algorithm", c, Config{Algorithm: "token-bucket", Rule: ok}, "unknown algorithm"},
		{"mutex twin", c, Config{Algorithm: "token_bucket_mutex", Rule: ok}, "mutex twin"},
		{"custom algorithm", c, Config{Algorithm: "redislimit_custom", Rule: ok}, "no Redis form"},
		{"log beyond 2^50 µs", c, Config{Algorithm: floodgate.SlidingLog, Rule: floodgate.Rule{Limit: 10, Period: 1 << 62}}, "2^50"},
		{"log with a burst", c, Config{Algorithm: floodgate.SlidingLog, Rule: floodgate.Rule{Limit: 2, Period: time.Second, Burst: 5}}, "Burst"},
		{"sub-µs log", c, Config{Algorithm: floodgate.SlidingLog, Rule: floodgate.Rule{Limit: 1, Period: 999}}, "below the 1µs"},
		{"window with a burst", c, Config{Algorithm: floodgate.FixedWindow, Rule: floodgate.Rule{Limit: 2, Period: time.Second, Burst: 5}}, "Burst"},
		{"below a microsecond per token", c, Config{Rule: floodgate.Rule{Limit: 2_000_000, Period: time.Second}}, "below the 1µs"},
		{"inexact step", c, Config{Rule: floodgate.Rule{Limit: 3, Period: 10 * time.Microsecond}}, "not a whole number of microseconds"},
		{"sub-µs window", c, Config{Algorithm: floodgate.FixedWindow, Rule: floodgate.Rule{Limit: 1, Period: 1500}}, "not a whole number"},
		{"sliding product", c, Config{Algorithm: floodgate.SlidingCounter, Rule: floodgate.Rule{Limit: 1_000_000, Period: 100 * 24 * time.Hour}}, "2^52"},
		{"bucket beyond the script's range", c, Config{Rule: floodgate.Rule{Limit: 1, Period: 1 << 40 * time.Microsecond, Burst: 1025}}, "script's range"},
		{"negative timeout", c, Config{Rule: ok, Timeout: -time.Second}, "Timeout"},
		{"negative breaker", c, Config{Rule: ok, BreakAfter: -1}, "BreakAfter"},
		{"negative probe", c, Config{Rule: ok, ProbeEvery: -time.Second}, "ProbeEvery"},
		{"negative local keys", c, Config{Rule: ok, LocalMaxKeys: -1}, "LocalMaxKeys"},
		{"unknown failure mode", c, Config{Rule: ok, FailureMode: 4}, "FailureMode(4)"},
		{"Local with FailError", c, Config{Rule: ok, FailureMode: FailError, Local: &ok}, "Local is the rule of FailLocal, and FailureMode is FailError"},
		{"Local without FailLocal", c, Config{Rule: ok, FailureMode: FailOpen, Local: &ok}, "Local is the rule of FailLocal"},
		{"bad Local", c, Config{Rule: ok, Local: &local}, "Local"},
		{"prefix with spaces", c, Config{Rule: ok, Prefix: " api"}, "Prefix"},
		{"client ignoring deadlines", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), Config{Rule: ok}, "ContextTimeoutEnabled"},
		{"cluster ignoring deadlines", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), Config{Rule: ok}, "ContextTimeoutEnabled"},
	}
	for _, tc := range cases {
		l, err := New(tc.client, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, %v; want an error containing %q", tc.name, l, err, tc.want)
		}
		if cl, ok := tc.client.(interface{ Close() error }); ok && tc.client != c {
			cl.Close()
		}
	}
	for _, alg := range redisAlgorithms {
		if _, err := New(c, Config{Algorithm: alg, Rule: ok}); err != nil {
			t.Errorf("%s: %v", alg, err)
		}
	}
	// The rounding New allows: a step of a millisecond or more, rounded
	// up to the next microsecond, slows the rule by under 0.1%.
	l, err := New(c, Config{Rule: floodgate.Rule{Limit: 3, Period: time.Second}})
	if err != nil || l.p.rs().interval != 333334 {
		t.Fatalf("3 per second: %v, interval %dµs; want 333334", err, l.p.rs().interval)
	}
}

// custom is an algorithm of the tests' own, for TestNewRejects.
type custom struct{}

func (custom) NewState(int64) keystate.State { return nil }

// TestInvalidCostReachesNoServer: a cost below 1 or above the capacity is
// a denial that never waits, with no server behind the client at all.
func TestInvalidCostReachesNoServer(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer c.Close()
	l := mustNew(t, c, Config{Rule: floodgate.Rule{Limit: 5, Period: time.Second}})
	for _, n := range []int64{0, -1, 6, math.MaxInt64} {
		d, err := l.AllowN(t.Context(), "k", n)
		if err != nil || d.Allowed || d.RetryAfter != floodgate.Never || d.Limit != 5 {
			t.Errorf("AllowN(%d) = %+v, %v", n, d, err)
		}
	}
	if s := l.Stats(); s.Calls != 0 || s.Fallbacks != 0 {
		t.Fatalf("invalid costs reached the server: %+v", s)
	}
}

// TestLeaseRefusesShortBatches: a bucket's Lease whose batch of Max
// cannot outlast its renewal is refused, by New and by SetRule, with the
// least Max that would do; so is a rule whose whole burst is that short.
// A Max just at the floor is taken, and leases on a real redis-server, as
// are the windows and the log with any Max.
func TestLeaseRefusesShortBatches(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer c.Close()
	million := floodgate.Rule{Limit: 1_000_000, Period: time.Second} // 1µs per unit
	const why = "(a batch must last 40ms, eight rounds of renewal of 5ms each, or TTL/2 if shorter)"
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"token bucket", Config{Rule: million, Lease: Lease{Max: 1024}},
			"redislimit: Lease.Max 1024 lasts 1.024ms at 1µs per unit, too short to save round trips " + why + "; use at least 40000"},
		{"leaky bucket, one below", Config{Algorithm: floodgate.LeakyBucket, Rule: million, Lease: Lease{Max: 39_999}},
			"redislimit: Lease.Max 39999 lasts 39.999ms at 1µs per unit, too short to save round trips " + why + "; use at least 40000"},
		{"short TTL", Config{Rule: floodgate.Rule{Limit: 100_000, Period: time.Second}, Lease: Lease{Max: 999, TTL: 20 * time.Millisecond}},
			"redislimit: Lease.Max 999 lasts 9.99ms at 10µs per unit, too short to save round trips (a batch must last 10ms, eight rounds of renewal of 1.25ms each, or TTL/2 if shorter); use at least 1000"},
		{"short burst", Config{Rule: floodgate.Rule{Limit: 1000, Period: 10 * time.Millisecond, Burst: 100}, Lease: Lease{Max: 1 << 20}},
			"redislimit: the rule's burst of 100 lasts 1ms at 10µs per unit, and no leased unit of a bucket outlasts it: too short to save round trips " + why + "; raise Burst to at least 4000, or turn lease mode off"},
	} {
		l, err := New(c, tc.cfg)
		if err == nil || err.Error() != tc.want {
			if l != nil {
				_ = l.Close()
			}
			t.Errorf("%s: New's error is\n\t%v\nwant\n\t%s", tc.name, err, tc.want)
		}
	}

	srv := redistest.Start(t)
	rc := client(t, srv)
	ctx := context.Background()
	for _, cfg := range []Config{
		{Rule: million, Lease: Lease{Max: 40_000}},
		{Algorithm: floodgate.LeakyBucket, Rule: floodgate.Rule{Limit: 100_000, Period: time.Second}, Lease: Lease{Max: 1000, TTL: 20 * time.Millisecond}},
		{Algorithm: floodgate.FixedWindow, Rule: million, Lease: Lease{Max: 1}},
		{Algorithm: floodgate.SlidingCounter, Rule: million, Lease: Lease{Max: 2}},
		{Algorithm: floodgate.SlidingLog, Rule: floodgate.Rule{Limit: 1000, Period: time.Millisecond}, Lease: Lease{Max: 1}},
	} {
		cfg.Prefix = "floor"
		l := mustNew(t, rc, cfg)
		for i := 0; i < 3; i++ {
			if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
				t.Fatalf("%s %+v: %+v, %v", cfg.Algorithm, cfg.Lease, d, err)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if s := l.Stats(); s.Leased == 0 || s.Errors != 0 {
			t.Fatalf("%s %+v: %+v; want a lease", cfg.Algorithm, cfg.Lease, s)
		}
	}

	// SetRule refuses a rule under which the Lease would be refused, and
	// keeps the rule in force.
	l := mustNew(t, rc, Config{Rule: floodgate.Rule{Limit: 1000, Period: time.Second}, Lease: Lease{Max: 1024}, Prefix: "floorset"})
	defer l.Close()
	want := "redislimit: Lease.Max 1024 lasts 1.024ms at 1µs per unit, too short to save round trips " + why + "; use at least 40000"
	if err := l.SetRule(million); err == nil || err.Error() != want {
		t.Fatalf("SetRule's error is\n\t%v\nwant\n\t%s", err, want)
	}
	if got := l.p.rs().rule; got != (floodgate.Rule{Limit: 1000, Period: time.Second}) {
		t.Fatalf("a refused SetRule left the rule %+v", got)
	}
}
