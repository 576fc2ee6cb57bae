package redislimit

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/internal/testmain"
	"github.com/redis/go-redis/v9"
)

// TestLogMatchesInProcessFull is the differential test for the log with
// its windows full: one key, long runs of requests at about the rule's
// rate and above it, limits up to a few hundred, weighted costs, peeks and
// Redis's clock stepping back, so that the log trims, merges and answers
// denials from hundreds of entries. Every Decision must be the in-process
// log's.
func TestLogMatchesInProcessFull(t *testing.T) {
	trials, ops := 10, 1500
	if testmain.Quick() {
		trials, ops = 4, 1000
	}
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 12))
	periods := []time.Duration{50 * time.Microsecond, time.Millisecond, 7 * time.Millisecond, time.Second, time.Hour}
	decisions := 0
	for trial := 0; trial < trials; trial++ {
		rule := floodgate.Rule{Limit: int64(1 + rng.IntN(300)), Period: periods[rng.IntN(len(periods))]}
		l := mustNew(t, c, Config{Algorithm: floodgate.SlidingLog, Rule: rule, Prefix: fmt.Sprintf("logdiff%d", trial)})
		l.s.margin = int64(time.Hour / time.Millisecond)
		l.p.box(l.p.rs())
		clock := floodgate.NewManualClock(0)
		ref, err := floodgate.New(floodgate.Config{Algorithm: floodgate.SlidingLog, Rule: effective(t, l, floodgate.SlidingLog, rule), Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		start := int64(1_700_000_000_000_000) + rng.Int64N(1_000_000_000)
		now := start
		gap := max(1, l.p.rs().interval/rule.Limit) // µs between requests at the rule's rate
		for i := 0; i < ops; i++ {
			switch r := rng.IntN(100); {
			case r < 60:
				now += rng.Int64N(gap + 1)
			case r < 90:
				now += rng.Int64N(gap/4 + 1)
			case r < 95:
				now += rng.Int64N(l.p.rs().interval + 1)
			default:
				now = max(start, now-rng.Int64N(l.p.rs().interval/2+1))
			}
			clock.Set(now)
			var got, want floodgate.Decision
			var r reply
			if rng.IntN(8) == 0 {
				r, err = decideAt(ctx, l, "k", call{n: 1, dry: true}, now)
				want = ref.Peek("k")
			} else {
				n := int64(1)
				if rng.IntN(4) == 0 {
					n = 1 + rng.Int64N(rule.Limit)
				}
				r, err = decideAt(ctx, l, "k", call{n: n}, now)
				want = ref.AllowN("k", n)
			}
			if err != nil || !r.redis {
				t.Fatalf("the script failed: %v, %+v", err, l.Stats())
			}
			got = r.d
			want.RetryAfter, want.ResetAfter = scale(want.RetryAfter), scale(want.ResetAfter)
			if got != want {
				t.Fatalf("%+v, op %d at %d µs: script %+v, in-process %+v", rule, i, now, got, want)
			}
			decisions++
		}
		// The key holds only what counts, at most Limit entries, and a
		// ring at most twice their number (or 3 more).
		if count, ring := logShape(t, c, l.redisKey("k")); count > rule.Limit || ring > max(2*count, count+3) {
			t.Fatalf("%+v: the key holds %d entries in a ring of %d", rule, count, ring)
		}
	}
	t.Logf("%d decisions identical", decisions)
}

// TestLogLease drives the log's lease arguments directly: a grant is one
// entry stamped hold ahead that every window counts, a return takes units
// from that entry only (and writes nothing when it finds none), and the
// key lives until its last entry has left the window.
func TestLogLease(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	rule := floodgate.Rule{Limit: 100, Period: 10 * time.Second} // T = 10^7 µs
	l := mustNew(t, c, Config{Algorithm: floodgate.SlidingLog, Rule: rule})
	l.p.rs().hold = 2_000_000 // 2 s
	l.p.box(l.p.rs())
	const t0 = int64(1_700_000_000_000_000)
	key := l.redisKey("k")
	do := func(cl call, now int64) reply {
		t.Helper()
		r, err := decideAt(ctx, l, "k", cl, now)
		if err != nil || !r.redis {
			t.Fatalf("%+v at %d: %v, %+v", cl, now, err, l.Stats())
		}
		return r
	}
	// 10 requests, then a cost of 2 wanting 40: r = 88 after it, so 11.
	for i := int64(0); i < 10; i++ {
		do(call{n: 1}, t0+i)
	}
	r := do(call{n: 2, want: 40}, t0+10)
	if !r.d.Allowed || r.extra != 11 || r.horizon != 2_000_000 || r.k != t0+10+2_000_000 || r.d.Remaining != 100-12-11 {
		t.Fatalf("the grant: %+v", r)
	}
	stamp := r.k
	// The TTL covers the leased entry's whole window: stamp + T from now.
	if ttl, err := c.PTTL(ctx, key).Result(); err != nil || ttl < 12*time.Second {
		t.Fatalf("TTL %v, %v after a lease stamped 2 s ahead in a 10 s window", ttl, err)
	}
	// The leased units count in every window until stamp + T: just after
	// the requests' entries have left, 11 still count. (ResetAfter is as
	// the peeked request would leave it: full again T after it.)
	if p := do(call{n: 1, dry: true}, t0+10+10_000_000); p.d.Remaining != 100-11-1 || p.d.ResetAfter != 10*time.Second {
		t.Fatalf("after the requests left: %+v", p.d)
	}
	// A second grant at the same stamp shares the entry.
	r2 := do(call{n: 1, want: 40}, t0+10)
	if r2.k != stamp || r2.extra != (100-23-1)/8 {
		t.Fatalf("the second grant: %+v", r2)
	}
	held := r.extra + r2.extra
	entries := func() int64 {
		count, _ := logShape(t, c, key)
		return count
	}
	if got := entries(); got != 11+1 { // 11 request instants, one lease entry
		t.Fatalf("%d entries; want 12", got)
	}
	// A return to another stamp touches nothing, and writes nothing.
	before, _ := c.Get(ctx, key).Result()
	do(call{give: 5, gk: stamp - 1}, t0+20)
	do(call{give: 5, gk: t0 + 1_000_000}, t0+20) // nor there
	if after, _ := c.Get(ctx, key).Result(); after != before {
		t.Fatal("a return that found no entry changed the key")
	}
	// Returns to the stamp take units from that entry only, never more
	// than it holds, keep the TTL, and the entry goes when empty.
	ttl0, _ := c.PTTL(ctx, key).Result()
	do(call{give: 5, gk: stamp}, t0+20)
	if p := do(call{n: 1, dry: true}, t0+20); p.d.Remaining != 100-13-(held-5)-1 {
		t.Fatalf("after returning 5: %+v", p.d)
	}
	do(call{give: 100, gk: stamp}, t0+20)
	if p := do(call{n: 1, dry: true}, t0+20); p.d.Remaining != 100-13-1 {
		t.Fatalf("after returning everything: %+v", p.d)
	}
	if got := entries(); got != 11 {
		t.Fatalf("%d entries after the lease's entry emptied; want 11", got)
	}
	if ttl, _ := c.PTTL(ctx, key).Result(); ttl > ttl0 || ttl < ttl0-time.Second {
		t.Fatalf("a return changed the TTL from %v to %v", ttl0, ttl)
	}
	// A request charged at a lease's stamp shares its entry; the return
	// of the lease's units leaves the request's.
	if r := do(call{n: 1, want: 1}, t0+10); r.extra != 1 || r.k != stamp { // 14 requested, 1 leased
		t.Fatalf("the third grant: %+v", r)
	}
	do(call{n: 3}, stamp)               // charged at stamp: its entry holds 4
	do(call{give: 1, gk: stamp}, stamp) // the lease's unit goes back
	if p := do(call{n: 1, dry: true}, stamp); p.d.Remaining != 100-17-1 {
		t.Fatalf("after a return to an instant a request shares: %+v", p.d)
	}
}

// logHeader is the bytes of a log's header: newest, base, head, count,
// and the rule's T and N.
const logHeader = 32

// logShape reads a log's header: the entries it holds, and its ring's
// size.
func logShape(t *testing.T, c redis.UniversalClient, key string) (count, ring int64) {
	t.Helper()
	ctx := context.Background()
	size, err := c.StrLen(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	head, err := c.GetRange(ctx, key, 0, logHeader-1).Result()
	if err != nil || size < logHeader || (size-logHeader)%12 != 0 || len(head) != logHeader {
		t.Fatalf("%s holds %d bytes, %v", key, size, err)
	}
	return int64(binary.LittleEndian.Uint32([]byte(head[16:]))), (size - logHeader) / 12
}

// TestLogMemory checks the figures the documentation gives: MEMORY USAGE
// of a log's key with one entry and with 100 (each request at an instant
// of its own).
func TestLogMemory(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	l := mustNew(t, c, Config{Algorithm: floodgate.SlidingLog, Rule: floodgate.Rule{Limit: 100, Period: time.Hour}})
	const t0 = int64(1_700_000_000_000_000)
	for i, want := range map[int64]int64{1: 168, 100: 1384} {
		key := fmt.Sprint("mem", i)
		for j := int64(0); j < i; j++ {
			if r, err := decideAt(ctx, l, key, call{n: 1}, t0+j); err != nil || !r.d.Allowed {
				t.Fatalf("%+v, %v", r, err)
			}
		}
		got, err := c.MemoryUsage(ctx, l.redisKey(key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		count, ring := logShape(t, c, l.redisKey(key))
		t.Logf("%d entries (a ring of %d): MEMORY USAGE %d bytes", count, ring, got)
		if got > want+want/8 {
			t.Errorf("%d entries: MEMORY USAGE %d bytes; the documentation says %d", i, got, want)
		}
	}
}

// logModel is the log script's specification in plain Go, lease arguments and
// all: the entries in time order, and the latest instant charged.
type logModel struct {
	T, N, hold int64
	newest     int64
	entries    []logEntry // time order, one per stamp
}

type logEntry struct{ stamp, cost int64 }

func (m *logModel) add(stamp, cost int64) {
	i := 0
	for i < len(m.entries) && m.entries[i].stamp < stamp {
		i++
	}
	if i < len(m.entries) && m.entries[i].stamp == stamp {
		m.entries[i].cost += cost
		return
	}
	m.entries = append(m.entries[:i], append([]logEntry{{stamp, cost}}, m.entries[i:]...)...)
}

// call returns the script's seven values for c at now, and changes the
// model as the script changes the key.
func (m *logModel) call(c call, now int64, exists bool) [7]int64 {
	if !exists {
		m.newest, m.entries = now, nil
	}
	if c.give > 0 {
		for i, e := range m.entries {
			if e.stamp == c.gk {
				m.entries[i].cost -= min(c.give, e.cost)
				if m.entries[i].cost == 0 {
					m.entries = append(m.entries[:i], m.entries[i+1:]...)
				}
				break
			}
		}
	}
	if c.n == 0 {
		return [7]int64{1, 0, 0, 0, 0, 0, 0}
	}
	ch := max(now, m.newest)
	w, last := int64(0), m.newest
	for _, e := range m.entries {
		if e.stamp > ch-m.T {
			w += e.cost
		}
		last = max(last, e.stamp)
	}
	if w+c.n <= m.N {
		left := m.N - w - c.n
		if c.dry {
			return [7]int64{1, left, 0, max(ch, last) + m.T - now, 0, m.hold, ch + m.hold}
		}
		extra := int64(0)
		if c.want > 0 {
			extra = min(c.want, left/8)
		}
		kept := m.entries[:0]
		for _, e := range m.entries {
			if e.stamp > ch-m.T {
				kept = append(kept, e)
			}
		}
		m.entries, m.newest = kept, ch
		m.add(ch, c.n)
		if extra > 0 {
			m.add(ch+m.hold, extra)
		}
		return [7]int64{1, left - extra, 0, m.entries[len(m.entries)-1].stamp + m.T - now, extra, m.hold, ch + m.hold}
	}
	need, gone, retry := w+c.n-m.N, int64(0), int64(0)
	for _, e := range m.entries {
		if e.stamp > ch-m.T {
			if gone += e.cost; gone >= need {
				retry = max(0, e.stamp+m.T-now)
				break
			}
		}
	}
	return [7]int64{0, max(0, m.N-w), retry, max(0, last+m.T-now), 0, m.hold, ch + m.hold}
}

// TestLogScriptMatchesModel drives the log's script with random requests, peeks,
// leases and returns (to the stamps it leased at, and to others), with
// Redis's clock stepping back at times, and holds every reply, the key's
// decoded entries and its TTL to the specification: logModel.
func TestLogScriptMatchesModel(t *testing.T) {
	trials, ops := 20, 300
	if testmain.Quick() {
		trials = 10
	}
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 8))
	checked := 0
	for trial := 0; trial < trials; trial++ {
		rule := floodgate.Rule{Limit: int64(1 + rng.IntN(60)), Period: time.Duration(1+rng.IntN(500)) * time.Millisecond}
		l := mustNew(t, c, Config{Algorithm: floodgate.SlidingLog, Rule: rule, Prefix: fmt.Sprintf("logmodel%d", trial)})
		l.s.margin = int64(time.Hour / time.Millisecond)
		l.p.rs().hold = 1 + rng.Int64N(l.p.rs().interval)
		l.p.box(l.p.rs())
		m := &logModel{T: l.p.rs().interval, N: rule.Limit, hold: l.p.rs().hold}
		key := l.redisKey("k")
		now := int64(1_700_000_000_000_000) + rng.Int64N(1_000_000_000)
		var stamps []int64 // the lease stamps replies gave
		for i := 0; i < ops; i++ {
			switch r := rng.IntN(20); {
			case r < 12:
				now += rng.Int64N(l.p.rs().interval/rule.Limit + 1)
			case r < 14:
				now += rng.Int64N(2*l.p.rs().interval + 1)
			case r < 15:
				now -= rng.Int64N(l.p.rs().interval/4 + 1)
			}
			var cl call
			switch r := rng.IntN(10); {
			case r < 2 && len(stamps) > 0: // a return alone
				cl = call{give: 1 + rng.Int64N(rule.Limit), gk: stamps[rng.IntN(len(stamps))]}
			case r < 3:
				cl = call{n: 1, dry: true}
			default:
				cl = call{n: 1 + rng.Int64N(min(rule.Limit, 3))}
				if rng.IntN(2) == 0 {
					cl.want = rng.Int64N(40)
				}
				if rng.IntN(4) == 0 {
					cl.give, cl.gk = 1+rng.Int64N(rule.Limit), now+rng.Int64N(l.p.rs().hold+1) // mostly nothing there
					if len(stamps) > 0 && rng.IntN(2) == 0 {
						cl.gk = stamps[rng.IntN(len(stamps))]
					}
				}
			}
			exists, err := c.Exists(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			ttl0, _ := c.PTTL(ctx, key).Result()
			want := m.call(cl, now, exists == 1)
			r, err := decideAt(ctx, l, "k", cl, now)
			if err != nil || !r.redis {
				t.Fatalf("the script failed: %v, %+v", err, l.Stats())
			}
			got := [7]int64{b2i(r.d.Allowed), r.d.Remaining, int64(r.d.RetryAfter / time.Microsecond), int64(r.d.ResetAfter / time.Microsecond), r.extra, r.horizon, r.k}
			if cl.n == 0 {
				got[1], got[2], got[3] = 0, 0, 0 // Remaining and the waits mean nothing for a return alone
				want[1], want[2], want[3] = 0, 0, 0
			}
			if got != want {
				t.Fatalf("trial %d (%+v, T %dµs, hold %dµs), op %d %+v at %d: script %v, model %v",
					trial, rule, l.p.rs().interval, l.p.rs().hold, i, cl, now, got, want)
			}
			if r.extra > 0 {
				stamps = append(stamps, r.k)
			}
			// The key holds the model's entries, and lives until its last
			// entry leaves the window (a call that admits nothing keeps
			// the TTL).
			newest, entries, ok := readLog(t, c, key)
			if !ok && len(m.entries) == 0 { // no key yet: a peek, or a return, on none
				continue
			}
			if newest != m.newest || fmt.Sprint(entries) != fmt.Sprint(m.entries) {
				t.Fatalf("trial %d op %d %+v at %d: the key holds %d %v; the model %d %v", trial, i, cl, now, newest, entries, m.newest, m.entries)
			}
			ttl, _ := c.PTTL(ctx, key).Result()
			if r.d.Allowed && cl.n > 0 && !cl.dry {
				end := m.entries[len(m.entries)-1].stamp + m.T
				exp := time.Duration((end-now+999)/1000+l.s.margin) * time.Millisecond
				if ttl > exp || ttl < exp-time.Second {
					t.Fatalf("trial %d op %d: TTL %v; want %v", trial, i, ttl, exp)
				}
			} else if ttl > ttl0 {
				t.Fatalf("trial %d op %d %+v: a call that admitted nothing moved the TTL from %v to %v", trial, i, cl, ttl0, ttl)
			}
			checked++
		}
	}
	t.Logf("%d calls as specified", checked)
}

// readLog decodes a log's key: its newest instant and its entries, and
// whether it exists.
func readLog(t *testing.T, c redis.UniversalClient, key string) (int64, []logEntry, bool) {
	t.Helper()
	s, err := c.Get(context.Background(), key).Result()
	if err == redis.Nil {
		return 0, nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	b := []byte(s)
	if len(b) < logHeader || (len(b)-logHeader)%12 != 0 {
		t.Fatalf("%s holds %d bytes", key, len(b))
	}
	le := binary.LittleEndian
	newest, base, head, count := int64(le.Uint64(b)), le.Uint32(b[8:]), int64(le.Uint32(b[12:])), int64(le.Uint32(b[16:]))
	ring := int64(len(b)-logHeader) / 12
	var entries []logEntry
	prev := base
	for i := int64(0); i < count; i++ {
		o := logHeader + (head+i)%ring*12
		stamp, cum := int64(le.Uint64(b[o:])), le.Uint32(b[o+8:])
		entries = append(entries, logEntry{stamp, int64(cum - prev)})
		prev = cum
	}
	return newest, entries, true
}

// TestLogLeaseAloneNearTheLimit: a lease alone (n = 0, as lease mode's
// renewal asks) on a key with fewer than 8 units left leases nothing; it
// once failed in the script (the TTL of no record), which the renewal
// swallowed and only TestLeaseStress's error count showed. It answers
// without an error and writes nothing.
func TestLogLeaseAloneNearTheLimit(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	l := mustNew(t, c, Config{Algorithm: floodgate.SlidingLog, Rule: floodgate.Rule{Limit: 10, Period: 10 * time.Second}})
	l.p.rs().hold = 1_000_000
	l.p.box(l.p.rs())
	const t0 = int64(1_700_000_000_000_000)
	for i := int64(0); i < 5; i++ {
		if r, err := decideAt(ctx, l, "k", call{n: 1}, t0+i); err != nil || !r.d.Allowed {
			t.Fatalf("request %d: %+v, %v", i, r, err)
		}
	}
	before, _ := c.Get(ctx, l.redisKey("k")).Result()
	r, err := decideAt(ctx, l, "k", call{want: 40}, t0+10)
	if err != nil || !r.redis || r.extra != 0 || r.d.Remaining != 5 {
		t.Fatalf("a lease alone with 5 left: %+v, %v", r, err)
	}
	if after, _ := c.Get(ctx, l.redisKey("k")).Result(); after != before {
		t.Fatal("a lease of nothing changed the key")
	}
	if s := l.Stats(); s.Errors != 0 {
		t.Fatalf("errors: %+v", s)
	}
}
