package redislimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// slotStore is a Store on srv whose scripts take clock for Redis's (nil:
// Redis's own TIME). With a clock, its slots are renewed by hand only
// (see renewByHand).
func slotStore(t testing.TB, srv *redistest.Server, cfg Config, clock *floodgate.ManualClock) *Store {
	t.Helper()
	return slotStoreWith(t, srv, cfg, func(s *Store) {
		if clock != nil {
			s.redisClock = clock
			renewByHand(s)
		}
	})
}

// renewByHand makes s's renewer, which wakes every third of SlotTTL of
// real time, renew nothing: a test on a manual clock calls
// s.holding.renew itself, at the instants it chooses. Left to run, the
// renewer would renew at whatever point of the test a loaded machine had
// reached a second or so after the first slot was taken, adding a round
// trip to one the test counts, or giving back a slot before the test's
// own renewal does.
func renewByHand(s *Store) { s.holding.around = func(func() bool) {} }

// slotStoreWith is a Store on srv that setup changes before it runs.
func slotStoreWith(t testing.TB, srv *redistest.Server, cfg Config, setup func(*Store)) *Store {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	set, err := readConfig(client(t, srv), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(client(t, srv), set, false, setup)
	t.Cleanup(func() { s.Close() })
	return s
}

func mustSlots(t testing.TB, s *Store, name string, limit int) floodgate.SlotPolicy {
	t.Helper()
	p, err := s.SlotPolicy(name, limit)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSlotsExact: at most the limit of a client's slots are held at once;
// a release frees one, once; clients share nothing; the Store counts what
// it holds.
func TestSlotsExact(t *testing.T) {
	srv := redistest.Start(t)
	s := slotStore(t, srv, Config{}, nil)
	p := mustSlots(t, s, "conc", 3)
	ctx := context.Background()
	var held []floodgate.Slot
	for i := range 3 {
		sl, ok, err := p.Acquire(ctx, "client")
		if !ok || err != nil {
			t.Fatalf("acquisition %d: %v, %v", i, ok, err)
		}
		held = append(held, sl)
	}
	if _, ok, err := p.Acquire(ctx, "client"); ok || err != nil {
		t.Fatalf("a fourth slot of 3: %v, %v", ok, err)
	}
	if _, ok, _ := p.Acquire(ctx, "other"); !ok {
		t.Fatal("another client was refused")
	}
	if st := s.Stats(); st.SlotsHeld != 4 {
		t.Fatalf("SlotsHeld = %d, want 4", st.SlotsHeld)
	}
	copied := held[0]
	if !held[0].Release() || copied.Release() {
		t.Fatal("a slot released other than once")
	}
	if _, ok, _ := p.Acquire(ctx, "client"); !ok {
		t.Fatal("a released slot was not free again")
	}
	if _, ok, _ := p.Acquire(ctx, "client"); ok {
		t.Fatal("a fourth slot after a release and an acquisition")
	}
	if err := p.SetLimit(4); err != nil || p.Limit() != 4 {
		t.Fatalf("SetLimit(4): %v", err)
	}
	if _, ok, _ := p.Acquire(ctx, "client"); !ok {
		t.Fatal("a raised limit's slot was refused")
	}
}

// TestSlotsAcrossReplicas: three Stores on one redis-server, 64
// goroutines on GOMAXPROCS above the cores, taking and giving back slots
// of a few clients: a probe per client never counts more than the limit
// held at once, and at the end nothing is held on Redis.
func TestSlotsAcrossReplicas(t *testing.T) {
	old := runtime.GOMAXPROCS(max(8, 4*runtime.NumCPU()))
	defer runtime.GOMAXPROCS(old)
	for _, lease := range []Lease{{}, {Slots: 2}} {
		t.Run(fmt.Sprintf("slots-ahead=%d", lease.Slots), func(t *testing.T) { acrossReplicas(t, lease) })
	}
}

func acrossReplicas(t *testing.T, lease Lease) {
	srv := redistest.Start(t)
	const limit = 4
	var ps []floodgate.SlotPolicy
	var stores []*Store
	for range 3 {
		s := slotStore(t, srv, Config{Lease: lease}, nil)
		stores = append(stores, s)
		ps = append(ps, mustSlots(t, s, "conc", limit))
	}
	keys := []string{"a", "b", "c"}
	var now, most [3]atomic.Int64
	var served, refused atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 30 {
				k := r.IntN(len(keys))
				sl, ok, err := ps[g%3].Acquire(context.Background(), keys[k])
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					refused.Add(1)
					continue
				}
				served.Add(1)
				n := now[k].Add(1)
				for m := most[k].Load(); n > m && !most[k].CompareAndSwap(m, n); m = most[k].Load() {
				}
				for range r.IntN(30) {
					runtime.Gosched()
				}
				now[k].Add(-1)
				sl.Release()
			}
		}()
	}
	wg.Wait()
	for _, s := range stores {
		s.Close() // gives back the slots held ahead
	}
	for k, key := range keys {
		if m := most[k].Load(); m > limit {
			t.Errorf("client %s: %d held at once across replicas, limit %d", key, m, limit)
		}
	}
	if served.Load() == 0 || refused.Load() == 0 {
		t.Errorf("%d served, %d refused: the run did not both serve and refuse", served.Load(), refused.Load())
	}
	c := client(t, srv)
	for _, key := range keys {
		rkey := ps[0].(*slotPolicy).key(key)
		if n, err := c.ZCard(context.Background(), rkey).Result(); err != nil || n != 0 {
			t.Errorf("client %s holds %d slots on Redis at the end (%v)", key, n, err)
		}
	}
	t.Logf("%d served, %d refused; most held at once: %d, %d, %d", served.Load(), refused.Load(), most[0].Load(), most[1].Load(), most[2].Load())
}

// TestSlotsExpireWithTheirHolder: on a clock that the test moves for
// Redis, a replica that stops renewing (it died) has its slots back
// within SlotTTL, and a living holder that renews keeps its slot however
// long it runs.
func TestSlotsExpireWithTheirHolder(t *testing.T) {
	srv := redistest.Start(t)
	clock := floodgate.NewManualClock(1_000_000 * int64(time.Second))
	ttl := time.Second
	cfg := Config{SlotTTL: ttl, Timeout: 100 * time.Millisecond}
	dead := slotStore(t, srv, cfg, clock)
	living := slotStore(t, srv, cfg, clock)
	other := slotStore(t, srv, cfg, clock)
	pd, pl, po := mustSlots(t, dead, "conc", 2), mustSlots(t, living, "conc", 2), mustSlots(t, other, "conc", 2)
	ctx := context.Background()
	if _, ok, _ := pd.Acquire(ctx, "client"); !ok {
		t.Fatal("the first holder was refused")
	}
	if _, ok, _ := pl.Acquire(ctx, "client"); !ok {
		t.Fatal("the second holder was refused")
	}
	dead.holding.close() // it dies: no renewal, no release
	if _, ok, _ := po.Acquire(ctx, "client"); ok {
		t.Fatal("a third slot of 2")
	}
	// Two thirds of the TTL, a renewal by the living holder, and two
	// thirds again: the dead holder's slot has expired, the living one's
	// has not.
	clock.Advance(2 * ttl / 3)
	if !living.holding.renew() {
		t.Fatal("the living replica had nothing to renew")
	}
	clock.Advance(2 * ttl / 3)
	got, ok, _ := po.Acquire(ctx, "client")
	if !ok {
		t.Fatal("the dead holder's slot did not come back after its expiry")
	}
	if _, ok, _ := po.Acquire(ctx, "client"); ok {
		t.Fatal("the living holder's renewed slot was taken")
	}
	got.Release()
	if st := living.Stats(); st.SlotRenewals != 1 || st.SlotRenewCommands != 1 {
		t.Errorf("renewals %d, commands %d; want 1 and 1", st.SlotRenewals, st.SlotRenewCommands)
	}
}

// TestSlotsRenewInOnePipeline: a Store that holds many slots of many
// clients renews them all in one round trip, one command per client.
func TestSlotsRenewInOnePipeline(t *testing.T) {
	srv := redistest.Start(t)
	s := slotStore(t, srv, Config{}, nil)
	p := mustSlots(t, s, "conc", 5)
	ctx := context.Background()
	for i := range 300 {
		if _, ok, err := p.Acquire(ctx, fmt.Sprint("client-", i%100)); !ok || err != nil {
			t.Fatalf("acquisition %d: %v, %v", i, ok, err)
		}
	}
	before := s.Stats()
	s.holding.renew()
	after := s.Stats()
	if d := after.Calls - before.Calls; d != 1 {
		t.Errorf("a renewal of 300 slots of 100 clients took %d round trips, want 1", d)
	}
	if d := after.SlotRenewCommands - before.SlotRenewCommands; d != 100 {
		t.Errorf("it sent %d commands, want 100 (one per client)", d)
	}
	// A renewal after Redis lost the script loads it again.
	if err := client(t, srv).ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.holding.renew()
	if s.Stats().Loads == 0 {
		t.Error("a renewal after SCRIPT FLUSH did not send the script whole")
	}
}

// TestSlotsBadInput: a limit out of range, a name in use, and SlotTTLs of
// years, of a millisecond and below three Timeouts are refused with
// errors that say why; 0 is the default.
func TestSlotsBadInput(t *testing.T) {
	srv := redistest.Start(t)
	s := slotStore(t, srv, Config{}, nil)
	bads := []int{0, -1}
	if over := int64(inflight.MaxLimit) + 1; over <= math.MaxInt {
		bads = append(bads, int(over))
	}
	for _, n := range bads {
		if _, err := s.SlotPolicy("x", n); err == nil || !strings.Contains(err.Error(), "must be 1 to") {
			t.Errorf("SlotPolicy limit %d: %v", n, err)
		}
	}
	mustSlots(t, s, "taken", 1)
	if _, err := s.SlotPolicy("taken", 1); !errors.Is(err, floodgate.ErrSlotName) {
		t.Errorf("a second slot policy of one name: %v", err)
	}
	if _, err := s.Policy("taken", "", floodgate.Rule{Limit: 1, Period: time.Second}); err == nil {
		t.Error("a rate policy took a slot policy's name")
	}
	c := client(t, srv)
	for _, ttl := range []time.Duration{-time.Second, time.Millisecond, 3 * 365 * 24 * time.Hour, 2 * time.Second} {
		_, err := NewStore(c, Config{SlotTTL: ttl, Timeout: time.Second})
		if err == nil || !strings.Contains(err.Error(), "SlotTTL must be") {
			t.Errorf("SlotTTL %v: %v", ttl, err)
		}
	}
	st, err := NewStore(c, Config{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if st.set.slotTTL != 15*time.Second {
		t.Errorf("the default SlotTTL under a Timeout of 5s: %v, want 15s", st.set.slotTTL)
	}
	st.Close()
}

// TestSlotsFailureModes: when Redis cannot answer, FailOpen admits with a
// slot that holds nothing, FailClosed refuses, and FailLocal limits in
// process; a caller whose context is done is refused with its error.
func TestSlotsFailureModes(t *testing.T) {
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer down.Close()
	ctx := context.Background()
	for _, c := range []struct {
		mode FailureMode
		want []bool
	}{
		{FailOpen, []bool{true, true, true}},
		{FailClosed, []bool{false, false, false}},
		{FailLocal, []bool{true, true, false}},
	} {
		s, err := NewStore(down, Config{FailureMode: c.mode, Timeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		p := mustSlots(t, s, "conc", 2)
		for i, want := range c.want {
			sl, ok, err := p.Acquire(ctx, "client")
			if ok != want || err != nil {
				t.Errorf("%v, acquisition %d: %v, %v; want %v", c.mode, i, ok, err, want)
			}
			defer sl.Release()
		}
		done, cancel := context.WithCancel(ctx)
		cancel()
		if _, ok, err := p.Acquire(done, "client"); ok || !errors.Is(err, context.Canceled) {
			t.Errorf("%v, a done context: %v, %v", c.mode, ok, err)
		}
		s.Close()
	}
}

// TestSlotsLease: with Lease.Slots 2, a replica takes two slots ahead
// with the one it needs, serves its next requests of the client from them
// with no round trip, keeps two of those released, and gives them back
// once unused for a third of SlotTTL (and at Close); the replicas
// together never hold more than the limit.
func TestSlotsLease(t *testing.T) {
	srv := redistest.Start(t)
	clock := floodgate.NewManualClock(1_000_000 * int64(time.Second))
	cfg := Config{SlotTTL: 3 * time.Second, Timeout: 200 * time.Millisecond, Lease: Lease{Slots: 2}}
	a, b := slotStore(t, srv, cfg, clock), slotStore(t, srv, cfg, clock)
	pa, pb := mustSlots(t, a, "conc", 5), mustSlots(t, b, "conc", 5)
	rc := client(t, srv)
	ctx := context.Background()
	zcard := func() int64 {
		n, err := rc.ZCard(ctx, pa.(*slotPolicy).key("client")).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	var held []floodgate.Slot
	acquire := func(p floodgate.SlotPolicy, want bool) {
		t.Helper()
		sl, ok, err := p.Acquire(ctx, "client")
		if ok != want || err != nil {
			t.Fatalf("Acquire: %v, %v; want %v", ok, err, want)
		}
		if ok {
			held = append(held, sl)
		}
	}
	acquire(pa, true)
	if n := zcard(); n != 3 {
		t.Fatalf("one slot taken with 2 ahead: Redis holds %d, want 3", n)
	}
	calls := a.Stats().Calls
	acquire(pa, true)
	acquire(pa, true)
	if d := a.Stats().Calls - calls; d != 0 || zcard() != 3 {
		t.Fatalf("two slots from those ahead took %d round trips; Redis holds %d", d, zcard())
	}
	acquire(pa, true) // a round trip: 2 of 5 left, one used and one ahead
	if n := zcard(); n != 5 {
		t.Fatalf("Redis holds %d, want 5", n)
	}
	acquire(pb, false) // every slot is held, one of them ahead in a
	for _, sl := range held {
		sl.Release()
	}
	held = nil
	if n := zcard(); n != 2 {
		t.Fatalf("after every release, Redis holds %d: want the 2 kept ahead", n)
	}
	acquire(pb, true)
	acquire(pb, true)
	acquire(pb, true)
	acquire(pb, false)
	clock.Advance(cfg.SlotTTL/3 + time.Millisecond)
	a.holding.renew() // a's slots ahead, idle a third of SlotTTL, go back
	if n := zcard(); n != 3 {
		t.Fatalf("after a's idle slots went back, Redis holds %d, want b's 3", n)
	}
	for _, sl := range held {
		sl.Release()
	}
	if n := zcard(); n != 2 {
		t.Fatalf("after b's releases, Redis holds %d, want the 2 b keeps ahead", n)
	}
	b.Close()
	if n := zcard(); n != 0 {
		t.Fatalf("after b's Close, Redis holds %d", n)
	}
	if _, err := NewStore(rc, Config{Lease: Lease{Slots: -1}}); err == nil || !strings.Contains(err.Error(), "Lease.Slots must be") {
		t.Errorf("Lease.Slots -1: %v", err)
	}
}
