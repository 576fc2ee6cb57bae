package redislimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestScriptNow: the scripts production runs, sent nowTIME, decide on
// Redis's own clock; sent a test's now, on that; and a malformed now is an
// error reply that names it, with nothing written.
func TestScriptNow(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	redisTime := func() int64 {
		tm, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMicro()
	}
	const testNow = int64(1_700_000_000_000_000) // 2023: far from Redis's clock
	for _, alg := range redisAlgorithms {
		// The reply's k is the script's now, as each kind reports it: the
		// buckets' now, the windows' index of its window (T = 1 ms), the
		// log's stamp of a lease, a hold (T) after it on a new key.
		l := mustNew(t, c, Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 1, Period: time.Millisecond}, Prefix: "now"})
		span := func(now int64) (lo, hi int64) {
			switch l.p.kind {
			case kindFixedWindow, kindSlidingCounter:
				return now / l.p.rs().interval, now / l.p.rs().interval
			case kindLog:
				return now + l.p.rs().hold, now + l.p.rs().hold
			}
			return now, now
		}
		if l.s.redisClock != nil || l.s.scriptNow() != nowTIME {
			t.Fatalf("%s: a Limiter from New sends now %d, not TIME", alg, l.s.scriptNow())
		}
		before := redisTime()
		r, err := l.p.decide(ctx, l.p.redisKey("time"), "time", call{n: 1})
		after := redisTime()
		if err != nil || !r.redis || !r.d.Allowed {
			t.Fatalf("%s: %+v, %v, %+v", alg, r, err, l.Stats())
		}
		lo, _ := span(before)
		_, hi := span(after)
		if r.k < lo || r.k > hi {
			t.Fatalf("%s: sent TIME, the script's now gave k = %d, outside [%d, %d] of Redis's clock", alg, r.k, lo, hi)
		}

		r, err = decideAt(ctx, l, "manual", call{n: 1}, testNow)
		if want, _ := span(testNow); err != nil || !r.redis || r.k != want {
			t.Fatalf("%s: sent now %d: k = %d, want %d (%v)", alg, testNow, r.k, want, err)
		}

		// A malformed now, through the production path (EVALSHA, EVAL on
		// NOSCRIPT): an error reply that lists it, and no key.
		l.s.redisClock = nil
		for _, bad := range []any{"nan", "inf", "-2", "1.5", "", "x", "TIME", "1e300", strconv.FormatInt(1<<52+1, 10)} {
			args := l.p.args(l.p.redisKey("bad-now"), call{n: 1, rs: l.p.rs()})
			args[3+argNow] = bad
			_, err := l.s.eval(ctx, func(ctx context.Context, cmd redis.Cmder) error { return c.Process(ctx, cmd) }, args, l.p.script.src)
			if err == nil || !strings.Contains(err.Error(), "floodgate: bad arguments") || !strings.Contains(err.Error(), fmt.Sprintf(", %v, ", bad)) {
				t.Errorf("%s: now %q: got %v, want a floodgate error that lists it", alg, bad, err)
			}
		}
		if n, err := c.Exists(ctx, l.redisKey("bad-now")).Result(); err != nil || n != 0 {
			t.Fatalf("%s: a refused now wrote the key: %d, %v", alg, n, err)
		}
	}
}

// TestScriptsShareOneLayout: the three scripts read their arguments with
// the one block they share, which reads the fields in the order of
// argN..argParam, names the kinds and TIME with scriptKind's and
// nowTIME's values, and starts the history at argHistory.
func TestScriptsShareOneLayout(t *testing.T) {
	for name, s := range map[string]*script{"gcra": gcraScript, "window": windowScript, "log": logScript} {
		if !strings.Contains(s.src, argsSource) || strings.Contains(s.src, "--[[args]]") {
			t.Errorf("%s.lua does not read its arguments with the shared block", name)
		}
	}
	shared := argsSource
	fields := regexp.MustCompile(`(?m)^  n, dry, want, give, gk, now, kind, interval, capacity, margin, param =$`)
	if !fields.MatchString(shared) {
		t.Fatal("the block does not read the fields as named")
	}
	names := []string{"n", "dry", "want", "give", "gk", "now", "kind", "interval", "capacity", "margin", "param"}
	consts := []int{argN, argDry, argWant, argGive, argGK, argNow, argKind, argInterval, argCapacity, argMargin, argParam}
	for i, name := range names {
		if consts[i] != i+1 {
			t.Errorf("%s is ARGV[%d] in the scripts, ARGV[%d] in Go", name, i+1, consts[i])
		}
		if !strings.Contains(shared, fmt.Sprintf("num(A[%d])", i+1)) || !strings.Contains(shared, fmt.Sprintf("-- ARGV[%d] ", i+1)) {
			t.Errorf("ARGV[%d] (%s) is not read and documented", i+1, name)
		}
	}
	for _, want := range []string{
		fmt.Sprintf("local BUCKET, FIXED_WINDOW, SLIDING_COUNTER, SLIDING_LOG = %d, %d, %d, %d\n", kindBucket, kindFixedWindow, kindSlidingCounter, kindLog),
		fmt.Sprintf("local TIME = %d\n", nowTIME),
		fmt.Sprintf("local on = %d\n", argHistory),
	} {
		if !strings.Contains(shared, want) {
			t.Errorf("the block lacks %q", want)
		}
	}
}

// TestArgsAllocations: a call's arguments cost what they did before now
// was one of them: the slice, the key, and its boxing (the log's and the
// windows' gk, a large number, one more); the rule's are boxed once, and
// production's now is too.
func TestArgsAllocations(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer c.Close()
	for _, alg := range redisAlgorithms {
		l := mustNew(t, c, Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 1000, Period: time.Hour}})
		if a := testing.AllocsPerRun(100, func() { _ = l.p.args(l.p.redisKey("client-42"), call{n: 1, rs: l.p.rs()}) }); a > 4 {
			t.Errorf("%s: a request's arguments take %v allocations; want at most 4", alg, a)
		}
		if a := testing.AllocsPerRun(100, func() {
			_ = l.p.args(l.p.redisKey("client-42"), call{give: 3, gk: 1_700_000_000_000_000, rs: l.p.rs()})
		}); a > 5 {
			t.Errorf("%s: a return's arguments take %v allocations; want at most 5", alg, a)
		}
	}
}

// TestFastPathMatchesGeneral holds each script's fast path (no history,
// no lease) to its general path, call by call: the same calls on two keys,
// one sent as production sends it and one with a history that changes
// nothing (a first triple cut short at 0: every key was written after it),
// which takes the general path. The replies, the values written and their
// TTLs must agree, through grants, denials, peeks, a clock that steps
// back, and keys written under another rule (which the fast path leaves to
// the general one).
func TestFastPathMatchesGeneral(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 11))
	for _, alg := range redisAlgorithms {
		l := mustNew(t, c, Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 5, Period: 10 * time.Millisecond}, Prefix: "fast"})
		other := mustNew(t, c, Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 3, Period: 10 * time.Millisecond}, Prefix: "fast"})
		clock := floodgate.NewManualClock(0)
		l.s.redisClock, other.s.redisClock = clock, clock
		// run is the call, and the key's value and TTL read in the same
		// pipeline, right after the script: at most rtt after it.
		run := func(l *Limiter, key string, cl call, general bool) (v []int64, value string, ttl, rtt time.Duration) {
			args := l.p.args(l.p.redisKey(key), cl)
			if general {
				args = append(args, int64(0), int64(0), int64(0))
			}
			args[0], args[1] = "eval", l.p.script.src
			p := c.Pipeline()
			script, get, pttl := p.Do(ctx, args...), p.Get(ctx, l.redisKey(key)), p.PTTL(ctx, l.redisKey(key))
			start := time.Now()
			if _, err := p.Exec(ctx); err != nil && err != redis.Nil {
				t.Fatalf("%s: %v", alg, err)
			}
			v, err := script.Int64Slice()
			if err != nil {
				t.Fatalf("%s: %v", alg, err)
			}
			return v, get.Val(), pttl.Val(), time.Since(start)
		}
		now := int64(1_700_000_000_000_000)
		last := ""
		for i := range 1500 {
			switch r := rng.IntN(20); {
			case r == 0:
				now -= rng.Int64N(10_000) // Redis's clock steps back
			case r == 1:
				now += rng.Int64N(50_000)
			default:
				now += rng.Int64N(3_000)
			}
			clock.Set(now * 1000)
			lim := l
			if rng.IntN(20) == 0 {
				lim = other
			}
			cl := call{n: 1 + rng.Int64N(lim.p.rs().capacity), dry: rng.IntN(10) == 0, rs: lim.p.rs()}
			fast, a, ta, ra := run(lim, "a", cl, false)
			general, b, tb, rb := run(lim, "b", cl, true)
			if fmt.Sprint(fast) != fmt.Sprint(general) {
				t.Fatalf("%s: call %d (%+v at %d): the fast path answered %v, the general one %v", alg, i, cl, now, fast, general)
			}
			// A TTL read right after a write is the one the script set,
			// less up to a millisecond and the pipeline's round trip (a
			// loaded machine may pause the server between the two); after
			// no write, it is an older one's.
			if d, tol := ta-tb, time.Millisecond+max(ra, rb); a != b || a != last && (d > tol || d < -tol) {
				t.Fatalf("%s: call %d (%+v at %d): the fast path left %x (TTL %v), the general one %x (TTL %v)", alg, i, cl, now, a, ta, b, tb)
			}
			last = a
		}
	}
}

// TestShortForm: the scripts' short form (n, kind, interval, capacity)
// reads as the whole layout with the common call's values, production's
// plain requests are sent in it (and only they), and a bad short form is
// an error reply that names its four fields.
func TestShortForm(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	read := argsSource + "\nreturn {n, dry, want, give, gk, now, kind, interval, capacity, margin, param, on}\n"
	short, err := c.Eval(ctx, read, []string{"k"}, 3, 2, 1000, 10).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	whole, err := c.Eval(ctx, read, []string{"k"}, 3, 0, 0, 0, 0, -1, 2, 1000, 10, 1000, 0).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(short[:11]) != fmt.Sprint(whole[:11]) || short[11] != 5 || whole[11] != 12 {
		t.Fatalf("the short form reads as %v, the whole as %v", short, whole)
	}
	for _, s := range []*script{gcraScript, windowScript} {
		err := c.Eval(ctx, s.src, []string{"k"}, "x", 0, 1000, 10).Err()
		if err == nil || !strings.Contains(err.Error(), "bad arguments (n, kind, interval, capacity[, dry]): x, 0, 1000, 10") {
			t.Errorf("a bad short form: %v", err)
		}
	}
	for _, alg := range redisAlgorithms {
		l := mustNew(t, c, Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 10, Period: time.Second}})
		rs := l.p.rs()
		plain := l.p.shortArgs(l.p.redisKey("k"), call{n: 1, rs: rs})
		if (plain != nil) != (alg != floodgate.SlidingLog) || plain != nil && len(plain) != 8 {
			t.Errorf("%s: a plain request's arguments %v", alg, plain)
		}
		for _, cl := range []call{{n: 1, dry: true, rs: rs}, {n: 1, want: 5, rs: rs}, {give: 2, rs: rs}} {
			if a := l.p.shortArgs(l.p.redisKey("k"), cl); a != nil {
				t.Errorf("%s: %+v in the short form", alg, cl)
			}
		}
		if err := l.SetRule(floodgate.Rule{Limit: 20, Period: time.Second}); err != nil {
			t.Fatal(err)
		}
		if a := l.p.shortArgs(l.p.redisKey("k"), call{n: 1, rs: l.p.rs()}); a != nil {
			t.Errorf("%s: a request under a rule with a history in the short form", alg)
		}
		// The short form decides as the whole: a real round trip each.
		l2 := mustNew(t, c, Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 3, Period: time.Hour}, Prefix: "short"})
		for i := range 5 {
			d, err := l2.Allow(ctx, "client")
			if err != nil || d.Allowed != (i < 3) || d.Allowed && d.Remaining != int64(2-i) {
				t.Fatalf("%s: request %d: %+v, %v", alg, i, d, err)
			}
		}
	}
}
