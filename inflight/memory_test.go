package inflight_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/internal/heaptest"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// What a key holding a slot costs, as SECURITY.md states it: its entry in
// the flat table (a third of a 64-byte bucket line and an 8-byte pointer,
// at the half load a table is rebuilt at: 64 bytes) and its slot's
// ticket (48 bytes). Spread keys' lanes are bounded apart: at most
// maxSpread keys of a Limiter have them, 64 bytes a P each.
const (
	tableEntryBytes = 64
	ticketBytes     = 48
	laneBytes       = 64
)

// TestHeldKeysMemory holds 10,000 keys with a slot each in a Limiter of
// MaxKeys 10,000, taken a thousand at a time between rounds of 100,000
// ids that come and go (a slot taken and given back, the id created and
// then evicted at the bound by later ones): 1M ids in all, while the
// first keys' slots are held. It finds the heap that the Limiter holds
// within tableEntryBytes + ticketBytes a held key, with a margin of 16
// bytes a key and 64 KiB for the Limiter itself, beside the bound on the
// spread keys' lanes (maxSpread × laneBytes × GOMAXPROCS, and an eighth
// for the allocator's size classes). Before, a held slot kept the table
// it was taken in and every table its shard made after it: 137 MB here,
// growing with the ids. Three forms: a plain Limiter, one built as the
// faces build it (a LocalStore's SlotPolicy), and one that spreads every
// key it creates, as a client that makes two cores fight over each of its
// ids would have it, which must stay within the lanes' bound. Not under
// the race detector, whose own allocations make a heap figure mean
// nothing: make test runs it without -race.
func TestHeldKeysMemory(t *testing.T) {
	if raceDetector {
		t.Skip("a heap figure under the race detector means nothing: make test runs this test without -race")
	}
	const maxKeys, rounds, churn = 10_000, 10, 100_000
	for _, form := range []string{"plain", "faces", "spread"} {
		t.Run(form, func(t *testing.T) {
			slots := make([]inflight.Slot, 0, maxKeys)
			faceSlots := make([]floodgate.Slot, 0, maxKeys)
			before := heaptest.Live()

			var l *inflight.Limiter
			var take func(key string) bool // takes and keeps a slot of key
			switch form {
			case "faces":
				store := floodgate.NewLocalStore(floodgate.LocalStoreConfig{MaxKeys: maxKeys})
				t.Cleanup(func() { store.Close() })
				p, err := store.SlotPolicy("memory", 4)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { p.Close() })
				l = store.InFlight(p)
				take = func(key string) bool {
					s, ok, err := p.Acquire(context.Background(), key)
					if err != nil {
						t.Fatal(err)
					}
					if ok {
						faceSlots = append(faceSlots, s)
					}
					return ok
				}
			default:
				cfg := inflight.Config{Limit: 4, MaxKeys: maxKeys}
				if form == "spread" {
					cfg = testhook.InFlightSpread(cfg).(inflight.Config)
				}
				var err error
				if l, err = inflight.New(cfg); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Close() })
				take = func(key string) bool {
					s, err := l.Acquire(context.Background(), key)
					switch {
					case err == nil:
						slots = append(slots, s)
						return true
					case !errors.Is(err, inflight.ErrKeys):
						t.Fatalf("a new key %s: %v", key, err)
					}
					return false
				}
			}

			// Keys to hold: new ones until maxKeys are held, or until 10,000
			// in a row were refused at the bound (the table's shards hold
			// MaxKeys/shards each, which is below 10,000 in all when the
			// shards do not divide it: a shard with room left would take
			// one of them with a chance of 1 in 64 at least).
			next, held := 0, 0
			hold := func(n int) {
				for refused := 0; held < n && refused < 10_000; next++ {
					if take("held-" + strconv.Itoa(next)) {
						held, refused = held+1, 0
					} else {
						refused++
					}
				}
			}
			came := 0
			for r := range rounds {
				for range churn {
					if s, ok := l.TryAcquire("id-" + strconv.Itoa(came)); ok {
						s.Release()
					}
					came++
				}
				hold(maxKeys * (r + 1) / rounds)
			}
			after := heaptest.Live()

			if held < maxKeys*99/100 || l.Len() != held {
				t.Fatalf("%d keys held (Len %d): want %d, or within the shards' rounding of it", held, l.Len(), maxKeys)
			}
			lanes := uint64(maxSpread*laneBytes*runtime.GOMAXPROCS(0)) * 9 / 8
			limit := uint64(held)*(tableEntryBytes+ticketBytes+16) + 64<<10 + lanes
			grew := after - min(after, before)
			t.Logf("%s: %d ids came and went, %d keys held: %d bytes (%.1f a held key; the bound %d, %.1f a key)",
				form, came, held, grew, float64(grew)/float64(held), limit, float64(limit)/float64(held))
			if grew > limit {
				t.Errorf("%d keys holding a slot hold %d bytes (%.1f a key), above %d", held, grew, float64(grew)/float64(held), limit)
			}
			if form == "spread" {
				spreading, _ := testhook.InFlightSpreadCounts(l)
				if n := testhook.InFlightSpreadKeys(l); n != spreading || n == 0 || n > maxSpread {
					t.Errorf("%d keys spread (counted %d): want 1 to %d, counted right", n, spreading, maxSpread)
				}
			}
			runtime.KeepAlive(slots)
			runtime.KeepAlive(faceSlots)
			for _, s := range slots {
				s.Release()
			}
			for _, s := range faceSlots {
				s.Release()
			}
			if n := l.EvictIdle(); n != held || l.Len() != 0 {
				t.Errorf("after every slot went back: %d keys evicted of %d, %d left", n, held, l.Len())
			}
		})
	}
}
