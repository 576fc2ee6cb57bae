package bench

import (
	"hash/maphash"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/acronis/go-appkit/lrucache"
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/internal/testhook"
	"golang.org/x/sync/semaphore"
)

// An in-flight limiter is driven through the harness's Limiter: each
// Allow(key) is one request's whole round, a slot taken for key and given
// back, and reports whether the slot was taken. Under a limit no run can
// reach (inflightLimit), every call should take one.

// inflightLimit is the limit of every in-flight implementation: more
// slots than there are goroutines, so none is ever refused.
const inflightLimit = 1 << 20

// inflightImpls are BenchmarkInFlight's implementations, each made afresh
// by new for each scenario.
var inflightImpls = []struct {
	name string
	new  func(b *testing.B) Limiter
}{
	{"floodgate", func(b *testing.B) Limiter { return newInflight(b, inflight.Config{Limit: inflightLimit}) }},
	{"floodgate-mutex", func(b *testing.B) Limiter {
		return newInflight(b, testhook.InFlightTwin(inflight.Config{Limit: inflightLimit}).(inflight.Config))
	}},
	{"semaphore", func(*testing.B) Limiter { return semaphoreRound{semaphore.NewWeighted(inflightLimit)} }},
	{"go-appkit", func(b *testing.B) Limiter { return newAppkitRound(b) }},
	{"floor", func(*testing.B) Limiter { return new(floorRound) }},
	{"floor-keyed", func(*testing.B) Limiter { return newKeyedFloor() }},
}

func newInflight(b *testing.B, cfg inflight.Config) Limiter {
	l, err := inflight.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return inflightRound{l}
}

// inflightRound is floodgate's in-flight Limiter: TryAcquire, then
// Release.
type inflightRound struct{ l *inflight.Limiter }

func (r inflightRound) Allow(key string) bool {
	s, ok := r.l.TryAcquire(key)
	s.Release()
	return ok
}

// semaphoreRound is golang.org/x/sync/semaphore, one semaphore for every
// key (it has no keys): TryAcquire(1), then Release(1).
type semaphoreRound struct{ s *semaphore.Weighted }

func (r semaphoreRound) Allow(string) bool {
	if !r.s.TryAcquire(1) {
		return false
	}
	r.s.Release(1)
	return true
}

// appkitRound is acronis/go-appkit's per-key in-flight limit, as its
// InFlightLimit middleware (httpserver/middleware, v1.20.0) keeps one:
// per key, in its LRU cache (one mutex), a channel of slots and a channel
// of backlog slots; a request takes a backlog slot, then a slot, and gives
// both back. Its HTTP handling is left out, and so is the backlog timer
// that it starts for every request, so that the figure is its limiter's
// alone.
type appkitRound struct {
	keys *lrucache.LRUCache[string, appkitSlots]
}

type appkitSlots struct{ slots, backlog chan struct{} }

func newAppkitRound(b *testing.B) Limiter {
	keys, err := lrucache.New[string, appkitSlots](2*chargeKeys, nil)
	if err != nil {
		b.Fatal(err)
	}
	return appkitRound{keys}
}

func (r appkitRound) Allow(key string) bool {
	s, _ := r.keys.GetOrAdd(key, func() appkitSlots {
		return appkitSlots{make(chan struct{}, inflightLimit), make(chan struct{}, inflightLimit)}
	})
	select {
	case s.backlog <- struct{}{}:
	default:
		return false
	}
	select {
	case s.slots <- struct{}{}:
	default:
		<-s.backlog
		return false
	}
	<-s.slots
	<-s.backlog
	return true
}

// floorRound is the least an exact per-key count can cost: the two atomic
// read-modify-writes on one word, one to take and one to give back, that
// any such count makes on its key, with no key to find. On the hot key it
// is the bound below which no implementation can go.
type floorRound struct {
	_ [64]byte
	n atomic.Int64
	_ [56]byte
}

func (r *floorRound) Allow(string) bool {
	ok := r.n.Add(1) <= inflightLimit
	r.n.Add(-1)
	return ok
}

// keyedFloor is the least an exact count per key can cost with its key to
// find: the key's hash (hash/maphash), a read of its entry's identity in
// a table of 1M entries of 16 bytes, an identity and a count (the least a
// count per key can keep, 16 MB in all), and the floor's two atomic adds
// on the count. It does no probing and checks nothing: it is not a limit,
// only the work that no exact one can skip.
type keyedFloor struct {
	seed    maphash.Seed
	entries []keyedEntry
}

type keyedEntry struct {
	id atomic.Uint64
	n  atomic.Int64
}

const keyedFloorEntries = 1 << 20

func newKeyedFloor() Limiter {
	return &keyedFloor{seed: maphash.MakeSeed(), entries: make([]keyedEntry, keyedFloorEntries)}
}

func (f *keyedFloor) Allow(key string) bool {
	h := maphash.String(f.seed, key)
	e := &f.entries[h&(keyedFloorEntries-1)]
	if e.id.Load() == h+1 { // never: the identity is only read
		return false
	}
	ok := e.n.Add(1) <= inflightLimit
	e.n.Add(-1)
	return ok
}

// BenchmarkInFlight times one request's round through an in-flight limit,
// a slot taken and given back (issue 44): floodgate's lock-free Limiter
// and its mutex twin, golang.org/x/sync/semaphore's one global semaphore,
// acronis/go-appkit's per-key limiter, the floor of two atomic adds, and
// the keyed floor (the key's hash and entry, and the two adds).
//
//	BenchmarkInFlight/scenario=hotkey/impl=floodgate
//	BenchmarkInFlight/scenario=1M-uniform-parallel/impl=go-appkit
//
// hotkey is one key from one goroutine, hotkey-parallel the same from
// every core; 1M-uniform-parallel is 1M keys, every one held (taken and
// given back once) before the timer starts, picked uniformly from every
// core. The floor has no keys, and runs the hot key only; the keyed floor
// runs every scenario.
func BenchmarkInFlight(b *testing.B) {
	for _, impl := range inflightImpls {
		b.Run("scenario=hotkey/impl="+impl.name, func(b *testing.B) { benchHot(b, impl.new(b)) })
		b.Run("scenario=hotkey-parallel/impl="+impl.name, func(b *testing.B) { benchHotParallel(b, impl.new(b)) })
	}
	ks := keySet(chargeKeys)
	seq := picks(len(ks), "uniform")
	for _, impl := range inflightImpls {
		if impl.name == "floor" {
			continue
		}
		b.Run("scenario=1M-uniform-parallel/impl="+impl.name, func(b *testing.B) {
			l := impl.new(b)
			for _, k := range ks {
				l.Allow(k)
			}
			runtime.GC()
			benchPicks(b, l, ks, seq, true)
		})
	}
}
