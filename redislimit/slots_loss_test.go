package redislimit

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// aheadSetup is a redis-server, a client of it, a manual clock for this
// machine and for Redis, and the Config of a Store that holds 2 slots
// ahead, on a SlotTTL of 3 s.
func aheadSetup(t *testing.T) (*redistest.Server, *redis.Client, *floodgate.ManualClock, Config) {
	t.Helper()
	srv := redistest.Start(t)
	cfg := Config{SlotTTL: 3 * time.Second, Timeout: 200 * time.Millisecond, Lease: Lease{Slots: 2}}
	return srv, client(t, srv), floodgate.NewManualClock(1_000_000 * int64(time.Second)), cfg
}

// parked returns the slots of key that p holds ahead now.
func parked(p floodgate.SlotPolicy, key string) []*redisSlot {
	sp := p.(*slotPolicy)
	v, ok := sp.pools.Load(sp.key(key))
	if !ok {
		return nil
	}
	pool := v.(*slotPool)
	pool.mu.Lock()
	defer pool.mu.Unlock()
	return slices.Clone(pool.free)
}

// heldSlots returns the slots that s holds on Redis now, which it renews.
func heldSlots(s *Store) []*redisSlot {
	s.holding.mu.Lock()
	defer s.holding.mu.Unlock()
	var hs []*redisSlot
	for _, m := range s.holding.keys {
		for _, h := range m {
			hs = append(hs, h)
		}
	}
	return hs
}

// members returns the members of key's slots on Redis.
func members(t testing.TB, rc *redis.Client, p floodgate.SlotPolicy, key string) []string {
	t.Helper()
	ms, err := rc.ZRange(context.Background(), p.(*slotPolicy).key(key), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// take acquires a slot of "client" from p, and fails the test unless the
// answer is want.
func take(t testing.TB, p floodgate.SlotPolicy, want bool) floodgate.Slot {
	t.Helper()
	sl, ok, err := p.Acquire(context.Background(), "client")
	if ok != want || err != nil {
		t.Fatalf("Acquire: %v, %v; want %v", ok, err, want)
	}
	return sl
}

// TestSlotsRenewalDropsWhatRedisLost: a renewal says which members Redis
// still held. A member that Redis lost (one removed, as a failover to a
// replica that missed its write would; then every one, by FLUSHALL) is
// dropped at the renewal: out of the Store's renewals and of the pool of
// slots ahead, counted in SlotsLost. A request that holds a dropped slot
// keeps it to its end; its release sends nothing (its member is gone, and
// another replica's members are left alone) and parks nothing. The
// replicas then hold at most the limit between them.
func TestSlotsRenewalDropsWhatRedisLost(t *testing.T) {
	srv, rc, clock, cfg := aheadSetup(t)
	a, b := slotStore(t, srv, cfg, clock), slotStore(t, srv, cfg, clock)
	pa, pb := mustSlots(t, a, "conc", 4), mustSlots(t, b, "conc", 4)
	used1 := take(t, pa, true) // and two ahead
	used2 := take(t, pa, true) // one of those
	ahead := parked(pa, "client")
	if len(ahead) != 1 || len(members(t, rc, pa, "client")) != 3 || a.Stats().SlotsHeld != 3 {
		t.Fatalf("a holds %d ahead, Redis %d: want 1 and 3", len(ahead), len(members(t, rc, pa, "client")))
	}
	ctx := context.Background()
	if err := rc.ZRem(ctx, pa.(*slotPolicy).key("client"), ahead[0].member).Err(); err != nil {
		t.Fatal(err)
	}
	if !a.holding.renew() {
		t.Fatal("a renewed nothing")
	}
	st := a.Stats()
	if st.SlotsLost != 1 || st.SlotsHeld != 2 || len(parked(pa, "client")) != 0 || !ahead[0].released.Load() {
		t.Fatalf("after Redis lost the slot ahead: lost %d, held %d, %d ahead; want 1, 2, 0", st.SlotsLost, st.SlotsHeld, len(parked(pa, "client")))
	}

	// Redis loses everything; b takes every slot, fresh.
	srv.Flush()
	for range 4 {
		defer take(t, pb, true).Release()
	}
	take(t, pb, false)
	a.holding.renew()
	if st := a.Stats(); st.SlotsLost != 3 || st.SlotsHeld != 0 {
		t.Fatalf("after FLUSHALL: lost %d, held %d; want 3 and 0", st.SlotsLost, st.SlotsHeld)
	}
	calls := a.Stats().Calls
	if !used1.Release() || !used2.Release() || used1.Release() {
		t.Fatal("a lost slot released other than once")
	}
	if d := a.Stats().Calls - calls; d != 0 {
		t.Errorf("releasing two lost slots took %d round trips", d)
	}
	if n := len(parked(pa, "client")); n != 0 {
		t.Errorf("a parked %d lost slots", n)
	}
	if n := len(members(t, rc, pb, "client")); n != 4 {
		t.Errorf("after a's releases Redis holds %d of b's 4", n)
	}
	take(t, pa, false) // b holds the limit, and a serves nothing it lost
}

// TestSlotsAheadOnlyWhileConfirmed: a slot held ahead is served with no
// round trip while a round trip sent less than SlotTTL ago found it on
// Redis, and not from then on, though Redis cannot be asked meanwhile
// (paused: the renewal fails): to the nanosecond, on the test's clock
// for this machine's and Redis's. The renewer then gives it back. A slot
// ahead is not served either once the host has been suspended since it
// was confirmed (the wall clock gained on the monotonic one).
func TestSlotsAheadOnlyWhileConfirmed(t *testing.T) {
	srv, rc, clock, cfg := aheadSetup(t)
	ttl := cfg.SlotTTL
	cfg.Timeout, cfg.FailureMode = 100*time.Millisecond, FailClosed
	a := slotStore(t, srv, cfg, clock)
	pa := mustSlots(t, a, "conc", 5)
	take(t, pa, true).Release() // one used, two ahead: the pool was full, so it went back
	ahead := parked(pa, "client")
	if len(ahead) != 2 {
		t.Fatalf("%d ahead, want 2", len(ahead))
	}
	srv.Pause()
	defer srv.Resume()
	clock.Advance(ttl / 3)
	a.holding.renew() // fails: Redis is paused
	clock.Advance(2*ttl/3 - time.Microsecond - time.Nanosecond)
	before := a.Stats()
	take(t, pa, true).Release() // the last ns before SlotTTL since the acquisition was sent, less Redis's µs
	if d := a.Stats().Calls - before.Calls; d != 0 {
		t.Fatalf("a slot ahead, confirmed under SlotTTL ago, took %d round trips", d)
	}
	clock.Advance(time.Nanosecond)
	take(t, pa, false) // none ahead may be served: a round trip, which Redis cannot answer
	// The refusal is FailClosed's answer to that round trip. (The
	// acquisition's members then go in a round trip of their own, in the
	// background, which may or may not have begun yet.)
	if st := a.Stats(); st.Calls == before.Calls || st.Fallbacks-before.Fallbacks != 1 {
		t.Fatalf("past SlotTTL, %d round trips and %d answers of the FailureMode; want the acquisition's, unanswered",
			st.Calls-before.Calls, st.Fallbacks-before.Fallbacks)
	}
	srv.Resume()
	a.holding.renew()
	if n, held := len(parked(pa, "client")), a.Stats().SlotsHeld; n != 0 || held != 0 {
		t.Fatalf("the renewer kept %d ahead (%d held), which may not be served", n, held)
	}
	for _, h := range ahead {
		if err := rc.ZScore(context.Background(), h.rkey, h.member).Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("Redis still holds %s, which the renewer gave back: %v", h.member, err)
		}
	}

	// A host suspended for a second: its monotonic clock stood still, its
	// wall clock and Redis's ran on.
	wall := floodgate.NewManualClock(clock.Now())
	s := slotStoreWith(t, srv, cfg, func(s *Store) { s.redisClock, s.wallClock = clock, wall; renewByHand(s) })
	ps := mustSlots(t, s, "conc2", 5)
	take(t, ps, true).Release()
	if n := len(parked(ps, "client")); n != 2 {
		t.Fatalf("%d ahead, want 2", n)
	}
	wall.Advance(time.Second)
	calls := s.Stats().Calls
	sl := take(t, ps, true) // a round trip: Redis has room
	if s.Stats().Calls == calls {
		t.Errorf("after a suspension, a slot ahead was served from memory")
	}
	sl.Release()
}

// TestSlotsPausedReplicaServesNothingItLost: a replica stopped past
// SlotTTL (no renewal, its clock running) finds, once resumed, that its
// slots expired on Redis: its renewal removes the one in use, which no
// acquisition had removed yet, and drops it. Stopped again, its slots
// expire and another replica takes their places: once resumed, it serves
// none of the slots it held ahead, and the two replicas never hold more
// than the limit.
func TestSlotsPausedReplicaServesNothingItLost(t *testing.T) {
	srv, rc, clock, cfg := aheadSetup(t)
	ttl := cfg.SlotTTL
	a := slotStore(t, srv, cfg, clock)
	cfg.Lease = Lease{}
	b := slotStore(t, srv, cfg, clock)
	pa, pb := mustSlots(t, a, "conc", 3), mustSlots(t, b, "conc", 3)

	lent := take(t, pa, true) // and two ahead: the limit
	clock.Advance(ttl)        // a is stopped: it renews nothing
	if !a.holding.renew() {
		t.Fatal("a renewed nothing")
	}
	if st, m := a.Stats(), len(members(t, rc, pa, "client")); st.SlotsLost != 1 || st.SlotsHeld != 0 || m != 0 {
		t.Fatalf("after its slots expired, a lost %d and holds %d, Redis %d; want 1, 0, 0 (the two ahead went back)", st.SlotsLost, st.SlotsHeld, m)
	}
	calls := a.Stats().Calls
	lent.Release()
	if d := a.Stats().Calls - calls; d != 0 {
		t.Errorf("releasing the lost slot took %d round trips", d)
	}

	lent = take(t, pa, true) // and two ahead again
	take(t, pb, false)
	clock.Advance(ttl) // a is stopped again; b takes two of its places
	defer take(t, pb, true).Release()
	defer take(t, pb, true).Release()
	calls = a.Stats().Calls
	defer take(t, pa, true).Release() // a round trip: the last free slot, not one a held ahead
	if d := a.Stats().Calls - calls; d != 1 {
		t.Fatalf("the resumed replica took %d round trips, want 1: it served a slot Redis had let go", d)
	}
	take(t, pa, false)
	take(t, pb, false)
	a.holding.renew()
	if st := a.Stats(); st.SlotsLost != 2 || st.SlotsHeld != 1 {
		t.Errorf("a lost %d and holds %d, want 2 and 1", st.SlotsLost, st.SlotsHeld)
	}
	lent.Release()
	if n := len(members(t, rc, pb, "client")); n != 3 {
		t.Errorf("Redis holds %d, want b's 2 and a's 1", n)
	}
}

// TestSlotsBusyClientGivesBackIdleAhead: a client whose requests keep one
// slot in use still gives back the slot it held ahead and left unused
// for a third of SlotTTL; the one it keeps using stays ahead.
func TestSlotsBusyClientGivesBackIdleAhead(t *testing.T) {
	srv, rc, clock, cfg := aheadSetup(t)
	ttl := cfg.SlotTTL
	a := slotStore(t, srv, cfg, clock)
	pa := mustSlots(t, a, "conc", 5)
	take(t, pa, true).Release() // two ahead
	for range 4 {
		clock.Advance(ttl / 9)
		take(t, pa, true).Release()
		a.holding.renew()
	}
	if n, m := len(parked(pa, "client")), len(members(t, rc, pa, "client")); n != 1 || m != 1 {
		t.Fatalf("a busy client kept %d ahead (Redis holds %d), want the 1 in use", n, m)
	}
	// At Close the rest goes back, and a slot released after it too.
	held := take(t, pa, true)
	if err := pa.Close(); err != nil {
		t.Fatal(err)
	}
	held.Release()
	if m, st := len(members(t, rc, pa, "client")), a.Stats(); m != 0 || st.SlotsHeld != 0 {
		t.Fatalf("after Close and the release, Redis holds %d, the Store %d", m, st.SlotsHeld)
	}
}

// TestSlotsAheadNoRoomGoBack: slots ahead that a round trip brings back to
// a pool with no room go back to Redis, and the slots ahead that may not
// be served go back at the renewal: nothing stays held that nobody uses.
func TestSlotsAheadNoRoomGoBack(t *testing.T) {
	srv, rc, clock, cfg := aheadSetup(t)
	ttl := cfg.SlotTTL
	a := slotStore(t, srv, cfg, clock)
	pa := mustSlots(t, a, "conc", 5)
	take(t, pa, true).Release() // two ahead
	clock.Advance(ttl)          // unrenewed: they may not be served, and have expired on Redis
	used := take(t, pa, true)   // a round trip, which brings two more ahead: no room
	defer used.Release()
	deadline := time.Now().Add(time.Minute)
	for len(members(t, rc, pa, "client")) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("Redis holds %d a minute on, want the 1 in use", len(members(t, rc, pa, "client")))
		}
		time.Sleep(time.Millisecond)
	}
	if n := a.Stats().SlotsHeld; n != 3 {
		t.Fatalf("the Store holds %d, want the 1 in use and the 2 expired ahead", n)
	}
	a.holding.renew()
	if n, ahead := a.Stats().SlotsHeld, len(parked(pa, "client")); n != 1 || ahead != 0 {
		t.Fatalf("after the renewal the Store holds %d, %d ahead; want 1 and 0", n, ahead)
	}
}

// TestSlotsClusterRenewalPerNode: on a Redis Cluster, one renewal renews
// the slots of clients on every master (one round trip of the Store, a
// pipeline per node), and drops only those of the master that lost its
// data.
func TestSlotsClusterRenewalPerNode(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := clusterClient(t, cl)
	set, err := readConfig(c, Config{Timeout: 2 * time.Second, Lease: Lease{Slots: 1}})
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(c, set, false, nil)
	defer s.Close()
	p := mustSlots(t, s, "conc", 5)
	sp := p.(*slotPolicy)
	byMaster := map[string]string{}
	for i := 0; len(byMaster) < 3 && i < 500; i++ {
		id := "client-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if m := cl.MasterFor(sp.key(id)); byMaster[m] == "" {
			byMaster[m] = id
		}
	}
	if len(byMaster) != 3 {
		t.Fatalf("clients on %d masters, want 3", len(byMaster))
	}
	ctx := context.Background()
	var flushed string
	for m, id := range byMaster {
		sl, ok, err := p.Acquire(ctx, id) // and one ahead
		if !ok || err != nil {
			t.Fatalf("%s: %v, %v", id, ok, err)
		}
		defer sl.Release()
		flushed = m
	}
	if _, err := redistest.Do(flushed, "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	before := s.Stats()
	s.holding.renew()
	st := s.Stats()
	if d := st.Calls - before.Calls; d != 1 {
		t.Errorf("a renewal over 3 masters took %d round trips of the Store, want 1", d)
	}
	if d := st.SlotRenewCommands - before.SlotRenewCommands; d != 3 {
		t.Errorf("it sent %d commands, want 3", d)
	}
	if st.SlotsLost != 2 || st.SlotsHeld != 4 {
		t.Errorf("lost %d, held %d; want the flushed master's 2, and 4 held", st.SlotsLost, st.SlotsHeld)
	}
	if n := len(parked(p, byMaster[flushed])); n != 0 {
		t.Errorf("the flushed master's client holds %d ahead", n)
	}
	for m, id := range byMaster {
		if m != flushed && len(parked(p, id)) != 1 {
			t.Errorf("%s lost its slot ahead", id)
		}
	}
}

// TestSlotsAheadAllocs: a slot taken from those held ahead and given back,
// with no round trip, allocates the client's Redis key and the slot lent,
// and no more: knowing that Redis holds it costs nothing.
func TestSlotsAheadAllocs(t *testing.T) {
	srv, _, _, cfg := aheadSetup(t)
	cfg.SlotTTL = time.Hour // no slot ahead goes back during the run
	s := slotStore(t, srv, cfg, nil)
	p := mustSlots(t, s, "conc", 5)
	take(t, p, true).Release()
	calls := s.Stats().Calls
	a := testing.AllocsPerRun(1000, func() { take(t, p, true).Release() })
	if d := s.Stats().Calls - calls; d != 0 {
		t.Fatalf("%d round trips: the slots ahead did not serve", d)
	}
	if a > 2 {
		t.Errorf("a slot ahead taken and given back allocates %v, want 2 at most", a)
	}
}
