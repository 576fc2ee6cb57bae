package floodgate_test

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/internal/countinfo"
	"github.com/floodgate-go/floodgate/internal/testhook"
	"github.com/floodgate-go/floodgate/internal/testmain"
)

// every is each built-in algorithm and twin.
var every = []string{
	floodgate.TokenBucket, testhook.TokenBucketMutex, floodgate.LeakyBucket, testhook.LeakyBucketMutex,
	floodgate.FixedWindow, testhook.FixedWindowMutex, floodgate.SlidingCounter, testhook.SlidingCounterMutex,
	floodgate.SlidingLog, testhook.SlidingLogMutex,
}

func TestMaxKeysRejects(t *testing.T) {
	rule := floodgate.Rule{Limit: 10, Period: time.Second}
	if _, err := floodgate.New(floodgate.Config{Rule: rule, MaxKeys: -1}); err == nil {
		t.Error("a negative MaxKeys must be an error")
	}
	if err := testhook.Register("test_unbounded", newQuota); err != nil {
		t.Fatal(err)
	}
	_, err := floodgate.New(floodgate.Config{Algorithm: "test_unbounded", Rule: rule, MaxKeys: 10})
	if err == nil {
		t.Fatal("MaxKeys with an algorithm that cannot remember an evicted state must be an error")
	}
	if msg := err.Error(); !strings.Contains(msg, "registered") || !strings.Contains(msg, "set MaxKeys to 0") {
		t.Errorf("the error does not say why, nor what to set: %v", err)
	}
}

// TestMaxKeysRemembers: at the bound, a key that spent its allowance is
// evicted to make room, and comes back with no more than it left with;
// Len never passes the bound. The clock is frozen, so nothing refills.
func TestMaxKeysRemembers(t *testing.T) {
	for _, alg := range every {
		t.Run(alg, func(t *testing.T) {
			const maxKeys = 64 // one shard of 64
			clock := floodgate.NewManualClock(int64(time.Hour))
			l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 3, Period: time.Minute}, Clock: clock, MaxKeys: maxKeys})
			admitted := map[string]int{}
			for round := range 3 {
				for i := range 10 * maxKeys {
					key := "k" + strconv.Itoa(i)
					if l.Allow(key) {
						admitted[key]++
					}
					if n := l.Len(); n > maxKeys {
						t.Fatalf("round %d: Len %d above MaxKeys %d", round, n, maxKeys)
					}
				}
			}
			for key, n := range admitted {
				if n > 3 {
					t.Fatalf("%s was admitted %d times under a frozen clock: eviction gave it a fresh allowance", key, n)
				}
			}
			st := l.Stats()
			if st.EvictedAtBound < 2*10*maxKeys || st.Keys != l.Len() {
				t.Fatalf("Stats %+v: want at least %d evictions at the bound", st, 2*10*maxKeys)
			}
		})
	}
}

// TestMaxKeysIdleFirst: at the bound, idle keys make room before busy
// ones, so a flood of one-request keys does not push out a client that is
// in the middle of its allowance while idle keys remain.
func TestMaxKeysIdleFirst(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	l := newLimiter(t, floodgate.Config{Rule: floodgate.Rule{Limit: 10, Period: time.Second}, Clock: clock, MaxKeys: 64})
	for i := range 64 {
		l.Allow("idle-" + strconv.Itoa(i))
	}
	clock.Advance(time.Second) // every key is full again
	l.AllowN("busy", 5)
	l.Allow("new")
	if d := l.Peek("busy"); d.Remaining != 4 {
		t.Fatalf("the busy key was evicted or changed: %+v", d)
	}
}

func TestStats(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	l := newLimiter(t, floodgate.Config{
		Rule:   floodgate.Rule{Limit: 2, Period: time.Second},
		Global: &floodgate.Rule{Limit: 3, Period: time.Hour},
		Clock:  clock, Stats: true, MaxKeys: floodgate.Unbounded,
	})
	l.Allow("a")
	l.Allow("a")
	l.Allow("a")     // denied by its own rule
	l.AllowN("b", 1) // the third global unit
	l.AllowN("b", 1) // denied by the global cap
	l.Allow("c")     // denied by the global cap
	clock.Advance(time.Hour)
	l.EvictIdle()
	want := floodgate.Stats{Allowed: 3, Denied: 3, DeniedByGlobal: 2, Keys: 0, Evicted: 3}
	if got := l.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
	off := newLimiter(t, floodgate.Config{Rule: floodgate.Rule{Limit: 2, Period: time.Second}, Clock: clock})
	off.Allow("a")
	if got := off.Stats(); got.Allowed != 0 || got.Keys != 1 {
		t.Fatalf("without Config.Stats: %+v, want no decision counts and Keys 1", got)
	}
}

// TestStatsEvictionReasons fills a bound with keys, some spent and some
// fresh again, then makes room: a fresh key goes first and costs nothing
// to forget (EvictedFresh); a spent one is remembered (EvictedAtBound
// only). Both engines count alike.
func TestStatsEvictionReasons(t *testing.T) {
	for _, alg := range []string{floodgate.TokenBucket, floodgate.SlidingLog} {
		t.Run(alg, func(t *testing.T) {
			clock := floodgate.NewManualClock(0)
			l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 1, Period: time.Second},
				Clock: clock, MaxKeys: 1})
			if got := l.Stats(); got.MaxKeys != 1 {
				t.Fatalf("MaxKeys = %d, want 1", got.MaxKeys)
			}
			l.Allow("a")
			l.Allow("b") // a is spent: remembered
			clock.Advance(2 * time.Second)
			l.Allow("c") // b is fresh again: forgotten for free
			got := l.Stats()
			if got.EvictedAtBound != 2 || got.EvictedFresh != 1 || got.Evicted != 0 || got.Keys != 1 {
				t.Fatalf("Stats = %+v, want 2 evicted at the bound, 1 of them fresh, 1 key", got)
			}
		})
	}
}

// TestRebase moves a clock past the range an inline word can hold
// relative to its table's origin (2^60 ticks: 39 hours at the finest
// scale), so that the table moves its origin, with keys in every state:
// their decisions carry across exactly.
func TestRebase(t *testing.T) {
	for _, alg := range []string{floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingCounter} {
		// 7919 per second: a tick of 1/7919 ns, so 2^60 ticks is 40 hours.
		rule := floodgate.Rule{Limit: 7919, Period: time.Second}
		if alg == floodgate.SlidingCounter {
			rule = floodgate.Rule{Limit: 8_000_000, Period: time.Millisecond} // 2^15 windows: 32s
		}
		a := floodgate.NewManualClock(0)
		b := floodgate.NewManualClock(0)
		la := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: rule, Clock: a})
		lb := newLimiter(t, floodgate.Config{Algorithm: alg + "_mutex", Rule: rule, Clock: b})
		step := 5 * time.Hour
		if alg == floodgate.SlidingCounter {
			step = 3 * time.Second
		}
		for i := range 40 {
			for k := range 20 {
				key := "k" + strconv.Itoa(k)
				n := int64(1 + (i*k)%int(rule.Limit/2))
				if da, db := la.AllowN(key, n), lb.AllowN(key, n); da != db {
					t.Fatalf("%s round %d key %s: %+v, twin %+v", alg, i, key, da, db)
				}
			}
			a.Advance(step + time.Duration(i))
			b.Advance(step + time.Duration(i))
		}
		if la.Len() != 20 || lb.Len() != 20 {
			t.Fatalf("%s: Len %d, twin %d", alg, la.Len(), lb.Len())
		}
	}
}

// TestMaxKeysHeapBound: after a flood of 60,000 one-request keys through
// a limiter bounded at 10,000, the heap it holds is within MaxKeys × a
// budget per key (64 bytes for a state inline in the table, 320 for one
// out of line), plus the sketch (8 bytes a cell) and 1 MiB. The quick
// form floods it with 30,000.
func TestMaxKeysHeapBound(t *testing.T) {
	keys := 60_000
	if testmain.Quick() {
		keys = 30_000
	}
	for _, alg := range []string{floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingLog, testhook.TokenBucketMutex} {
		const maxKeys = 10_000
		perKey := uint64(64)
		if alg == floodgate.SlidingLog || alg == testhook.TokenBucketMutex {
			perKey = 320
		}
		names := make([]string, keys)
		for i := range names {
			names[i] = "flood-" + strconv.Itoa(i)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 5, Period: time.Second}, Clock: floodgate.NewManualClock(0), MaxKeys: maxKeys})
		for _, k := range names {
			l.Allow(k)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		held := after.HeapAlloc - min(after.HeapAlloc, before.HeapAlloc)
		limit := maxKeys*perKey + 8*16384 + 1<<20
		if held > limit {
			t.Errorf("%s: %d bytes held after the flood, above %d", alg, held, limit)
		}
		t.Logf("%s: %d bytes held for %d keys (%.1f per key of the bound)", alg, held, l.Len(), float64(held)/maxKeys)
		runtime.KeepAlive(l)
		runtime.KeepAlive(names)
	}
}

// TestAppendCounts checks the Samples a Limiter reports against a known
// sequence: the results add up to the decisions, denied excluding the
// global cap's refusals, no Sample carries a key, and Stats' fields are
// the sums of series that its documentation's table gives.
func TestAppendCounts(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	l := newLimiter(t, floodgate.Config{
		Rule:   floodgate.Rule{Limit: 2, Period: time.Second},
		Global: &floodgate.Rule{Limit: 3, Period: time.Hour},
		Clock:  clock, Stats: true, MaxKeys: 1,
	})
	l.Allow("a")
	l.Allow("a")
	l.Allow("a") // denied by its own rule
	l.Allow("b") // the third global unit; a is spent and remembered (bound)
	l.Allow("c") // denied by the global cap; b is spent and remembered (bound)
	got := map[string]int64{}
	for _, s := range l.AppendCounts(nil) {
		if s.Route != "" || s.Policy != "" {
			t.Fatalf("sample %+v has a route or policy", s)
		}
		got[countinfo.Of(s.Metric).Prometheus+"/"+s.Label] = s.Value
	}
	want := map[string]int64{
		"floodgate_requests_total/allowed":       3,
		"floodgate_requests_total/denied":        1,
		"floodgate_requests_total/denied_global": 1,
		"floodgate_keys/":                        1,
		"floodgate_keys_max/":                    1,
		"floodgate_evictions_total/idle":         0,
		"floodgate_evictions_total/bound":        2,
		"floodgate_evictions_total/fresh":        0,
	}
	if len(got) != len(want) {
		t.Errorf("got %d series %v, want %d", len(got), got, len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	// Stats' fields are the series' sums that its table gives.
	l.Allow("d") // a new key: c, never granted, was a new key's state (fresh)
	clock.Advance(2 * time.Hour)
	l.EvictIdle()
	got = map[string]int64{}
	for _, s := range l.AppendCounts(nil) {
		got[countinfo.Of(s.Metric).Prometheus+"/"+s.Label] = s.Value
	}
	st := l.Stats()
	for _, c := range []struct {
		field string
		stat  int64
		sum   int64
	}{
		{"Allowed", st.Allowed, got["floodgate_requests_total/allowed"]},
		{"Denied", st.Denied, got["floodgate_requests_total/denied"] + got["floodgate_requests_total/denied_global"]},
		{"DeniedByGlobal", st.DeniedByGlobal, got["floodgate_requests_total/denied_global"]},
		{"Keys", int64(st.Keys), got["floodgate_keys/"]},
		{"MaxKeys", int64(st.MaxKeys), got["floodgate_keys_max/"]},
		{"Evicted", st.Evicted, got["floodgate_evictions_total/idle"]},
		{"EvictedAtBound", st.EvictedAtBound, got["floodgate_evictions_total/bound"] + got["floodgate_evictions_total/fresh"]},
		{"EvictedFresh", st.EvictedFresh, got["floodgate_evictions_total/fresh"]},
	} {
		if c.stat != c.sum {
			t.Errorf("Stats.%s = %d, the series' sum %d", c.field, c.stat, c.sum)
		}
	}
	if st.EvictedFresh == 0 || st.Evicted == 0 {
		t.Errorf("the sequence was meant to evict a fresh key and an idle one: %+v", st)
	}
	off := newLimiter(t, floodgate.Config{Rule: floodgate.Rule{Limit: 2, Period: time.Second}, Clock: clock, MaxKeys: floodgate.Unbounded})
	for _, s := range off.AppendCounts(nil) {
		if s.Metric == counts.Requests || s.Metric == counts.KeysMax {
			t.Errorf("without Stats and MaxKeys: unexpected %+v", s)
		}
	}
}
