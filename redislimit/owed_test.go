package redislimit

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestOwedAcrossSetRule: a key charged into debt on Redis and then
// converted by a change of rule owes what a key of the in-process
// Limiter owes after the same charge and change on the same clock, at
// every reading until long after the debt is paid, on every algorithm:
// the scripts' conversions keep the debt, in units, as the in-process
// ones do (they used to drop it, so that a bucket set to a slower rule
// admitted at once). A denial writes the key converted, with a TTL that
// outlasts the debt, as a charge's does.
func TestOwedAcrossSetRule(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	rule := floodgate.Rule{Limit: 10, Period: time.Second}
	rules := []floodgate.Rule{
		{Limit: 5, Period: time.Second},      // slower: the debt lasts longer
		{Limit: 20, Period: time.Second},     // faster
		{Limit: 10, Period: 3 * time.Second}, // a longer period
		{Limit: 2, Period: 100 * time.Millisecond},
	}
	for _, alg := range redisAlgorithms {
		for i, next := range rules {
			name := alg + " to " + strconv.FormatInt(next.Limit, 10) + "/" + next.Period.String()
			clock := floodgate.NewManualClock(epoch + 300*int64(time.Millisecond))
			l := replica(t, c, Config{Algorithm: alg, Rule: rule, Prefix: "owed" + strconv.Itoa(i)}, clock)
			ref, err := floodgate.New(floodgate.Config{Algorithm: alg, Rule: rule, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			dr, err := ref.Charge("d", 30)
			if err != nil {
				t.Fatal(err)
			}
			dd, err := l.s.Charge(ctx, []floodgate.Ask{{Policy: l.p, Key: "d", N: 30}}, nil)
			if err != nil || !sameDecision(dd, dr) {
				t.Fatalf("%s: charged 30 of 10: Redis %+v, %v; in process %+v", name, dd, err, dr)
			}
			ttlCovers(t, c, l.redisKey("d"), dr, name+", charged")
			clock.Advance(100 * time.Millisecond)
			for _, set := range []func(floodgate.Rule) error{ref.SetRule, l.SetRule} {
				if err := set(next); err != nil {
					t.Fatal(err)
				}
			}
			// The first call after the change, a denial, writes the key
			// converted.
			dr = ref.AllowN("d", 1)
			if dd, err := l.AllowN(ctx, "d", 1); err != nil || dr.Allowed || dr.Owed == 0 || !sameDecision(dd, dr) {
				t.Fatalf("%s: the first request after the change: Redis %+v, %v; in process %+v", name, dd, err, dr)
			}
			ttlCovers(t, c, l.redisKey("d"), dr, name+", converted")
			for step := range 240 { // twelve seconds: the slowest debt's end, and after
				dr := ref.Peek("d")
				dd, err := l.Peek(ctx, "d")
				if err != nil || !sameDecision(dd, dr) {
					t.Fatalf("%s +%d×50ms: Redis %+v, %v; in process %+v", name, step, dd, err, dr)
				}
				clock.Advance(50 * time.Millisecond)
			}
			if d := ref.Peek("d"); !d.Allowed || d.Owed != 0 {
				t.Fatalf("%s: the key still owes: %+v", name, d)
			}
			if s := l.Stats(); s.Errors != 0 || s.Fallbacks != 0 {
				t.Fatalf("%s: Redis failed: %+v", name, s)
			}
		}
	}
}

// sameDecision reports whether a Decision of Redis, whose clock counts
// microseconds, is the in-process one: the same verdict, limit, remaining
// and debt, and waits that differ by less than a microsecond.
func sameDecision(a, b floodgate.Decision) bool {
	near := func(x, y time.Duration) bool { return x-y < time.Microsecond && y-x < time.Microsecond }
	return a.Allowed == b.Allowed && a.Limit == b.Limit && a.Remaining == b.Remaining && a.Owed == b.Owed &&
		near(a.RetryAfter, b.RetryAfter) && near(a.ResetAfter, b.ResetAfter)
}

// ttlCovers requires the key's TTL in Redis to outlast what d says the
// key owes: Redis keeps the key, and so its debt, at least until it is
// full again, ResetAfter from now (Redis's own clock runs meanwhile: the
// TTL's margin of a second covers the test's few milliseconds).
func ttlCovers(t *testing.T, c *redis.Client, key string, d floodgate.Decision, what string) {
	t.Helper()
	ttl, err := c.PTTL(context.Background(), key).Result()
	if err != nil || ttl < d.ResetAfter {
		t.Fatalf("%s: the key's TTL is %v, %v; it owes %d, and is full again after %v", what, ttl, err, d.Owed, d.ResetAfter)
	}
}
