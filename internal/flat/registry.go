package flat

import (
	"hash/maphash"
	"runtime"

	"github.com/puzpuzpuz/xsync/v4"
	"golang.org/x/sys/cpu"
)

// Registry maps string keys to values of V, creating each key's value
// exactly once however many goroutines see the key at the same time. V is
// usually a pointer or an interface holding one; values are compared with ==
// to tell one state from its replacement.
type Registry[V comparable] struct {
	shards []shard[V]
	mask   uint64
	seed   maphash.Seed
}

type shard[V comparable] struct {
	m *xsync.Map[string, V]
	_ cpu.CacheLinePad
}

// New returns an empty registry with at least the given number of shards,
// rounded up to a power of two. shards ≤ 0 picks four per GOMAXPROCS, at
// most 64.
func New[V comparable](shards int) *Registry[V] {
	if shards <= 0 {
		shards = min(4*runtime.GOMAXPROCS(0), 64)
	}
	n := 1
	for n < shards {
		n *= 2
	}
	r := &Registry[V]{shards: make([]shard[V], n), mask: uint64(n - 1), seed: maphash.MakeSeed()}
	for i := range r.shards {
		r.shards[i].m = xsync.NewMap[string, V]()
	}
	return r
}

func (r *Registry[V]) shard(key string) *xsync.Map[string, V] {
	if r.mask == 0 {
		return r.shards[0].m
	}
	return r.shards[maphash.String(r.seed, key)&r.mask].m
}

// Load returns the value held for key. It allocates nothing and writes no
// shared memory.
func (r *Registry[V]) Load(key string) (V, bool) {
	return r.shard(key).Load(key)
}

// LoadOrCreate returns the value held for key, creating it with create when
// there is none. create runs at most once per key even when many goroutines
// race on a new key; the losers receive the winner's value.
func (r *Registry[V]) LoadOrCreate(key string, create func() V) V {
	v, _ := r.shard(key).LoadOrCompute(key, func() (V, bool) { return create(), false })
	return v
}

// Replace installs next for key if key holds old or nothing, and returns
// what key holds afterwards: next, or a value another goroutine installed
// first. It is how a caller that found a retired state moves on to its
// successor without ever installing two.
func (r *Registry[V]) Replace(key string, old, next V) V {
	v, _ := r.shard(key).Compute(key, func(cur V, loaded bool) (V, xsync.ComputeOp) {
		if loaded && cur != old {
			return cur, xsync.CancelOp
		}
		return next, xsync.UpdateOp
	})
	return v
}

// Remove deletes key, calling retire on its value while no other writer can
// touch the key, and reports whether key was present.
func (r *Registry[V]) Remove(key string, retire func(V)) bool {
	var found bool
	r.shard(key).Compute(key, func(cur V, loaded bool) (V, xsync.ComputeOp) {
		if !loaded {
			return cur, xsync.CancelOp
		}
		found = true
		retire(cur)
		return cur, xsync.DeleteOp
	})
	return found
}

// DeleteIf deletes every key whose value satisfies pred and returns how many
// it deleted. pred runs while the key's map bucket is locked against other
// writers, so a value pred retires is gone from the map before any writer
// can see the key again; readers that loaded it earlier must recognise it
// as retired. Shards are visited one after another: no lock spans the
// registry.
func (r *Registry[V]) DeleteIf(pred func(key string, v V) bool) int {
	n := 0
	for i := range r.shards {
		n += r.shards[i].m.DeleteMatching(func(k string, v V) (bool, bool) {
			return pred(k, v), false
		})
	}
	return n
}

// Len returns the number of keys held. Under concurrent change it is a
// snapshot, not an exact count.
func (r *Registry[V]) Len() int {
	n := 0
	for i := range r.shards {
		n += r.shards[i].m.Size()
	}
	return n
}
