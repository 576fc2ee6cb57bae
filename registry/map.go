package registry

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/floodgate-go/floodgate/internal/flat"
	"github.com/floodgate-go/floodgate/internal/word"
)

// Map maps string keys to values from 0 to math.MaxInt64, each held in
// one atomic word. A key that the Map does not hold reads as 0. Make one
// with New; its methods are safe for concurrent use.
type Map struct {
	f flat.Flat
	h *flat.Hasher
}

// New returns an empty map that holds at most maxKeys keys (see Map's
// eviction). The bound is kept per shard of the table, so a new key may
// evict one before the map holds maxKeys. maxKeys must be at least 1;
// for a map as large as memory allows, pass math.MaxInt.
func New(maxKeys int) (*Map, error) {
	if maxKeys < 1 {
		return nil, fmt.Errorf("registry: maxKeys must be at least 1, got %d", maxKeys)
	}
	m := &Map{h: flat.NewHasher()}
	m.f = flat.NewFlat(flat.FlatConfig{MaxKeys: maxKeys, Hooks: flat.Hooks{
		// Eviction takes the sampled key with the smallest value, and a
		// key at 0 (below the 0 Insert is given) at once. Both run under
		// the shard's lock on its current table, where no live slot's
		// word is a mark.
		Spent: func(t *flat.Table, i int, _ int64) int64 { return int64(t.Word(i).Load()) },
		Evict: func(t *flat.Table, i int, _ int64) { t.Word(i).Store(word.Dead) },
	}})
	return m, nil
}

// Load returns key's value, and whether the map holds key.
func (m *Map) Load(key string) (int64, bool) {
	id := m.h.ID(key)
	for {
		t, i := m.f.Find(id)
		if i < 0 {
			return 0, false
		}
		switch v := t.Word(i).Load(); {
		case v == word.Dead:
			return 0, false // being removed
		case !word.IsMark(v):
			return int64(v), true
		}
		// Moved since Find looked: look again.
	}
}

// Add adds delta to key's value, adding the key if the map does not hold
// it, and returns the new value. A result below 0 or past math.MaxInt64
// is an error, and changes nothing: Add then returns the value as it is.
func (m *Map) Add(key string, delta int64) (int64, error) {
	id := m.h.ID(key)
	t := m.f.Current(id)
	i := t.Lookup(id)
	if i < 0 && delta <= 0 {
		if delta < 0 {
			return 0, m.rangeError(key, 0, delta)
		}
		return 0, nil
	}
	for {
		if i < 0 {
			t, i, _ = m.insert(id, 0)
		}
		w := t.Word(i)
		for {
			v := w.Load()
			if word.IsMark(v) {
				i = -1 // moved or removed: find it again under the shard's lock
				break
			}
			next := int64(v) + delta
			if next < 0 || (delta > 0 && next < int64(v)) {
				return int64(v), m.rangeError(key, int64(v), delta)
			}
			if w.CompareAndSwap(v, uint64(next)) {
				return next, nil
			}
		}
	}
}

// CompareAndSwap sets key's value to new if it is old, and reports
// whether it did; a key the map does not hold is 0, and is added if it
// must change. A value below 0 is an error, and changes nothing.
func (m *Map) CompareAndSwap(key string, old, new int64) (swapped bool, err error) {
	if old < 0 || new < 0 {
		return false, fmt.Errorf("registry: values are from 0 to %d; CompareAndSwap(%q, %d, %d)", int64(math.MaxInt64), key, old, new)
	}
	id := m.h.ID(key)
	t := m.f.Current(id)
	i := t.Lookup(id)
	for {
		if i < 0 {
			if old != 0 {
				return false, nil // not held, or removed: it reads as 0
			}
			if old == new {
				return true, nil
			}
			var created bool
			if t, i, created = m.insert(id, uint64(new)); created {
				return true, nil
			}
		}
		w := t.Word(i)
		v := w.Load()
		switch {
		case word.IsMark(v):
			i = -1 // moved or removed: find it again under the shard's lock
			continue
		case int64(v) != old:
			return false, nil
		}
		if w.CompareAndSwap(v, uint64(new)) {
			return true, nil
		}
	}
}

// insert returns key id's slot, creating it with the value v if the map
// does not hold it, under its shard's lock, and whether it created it.
func (m *Map) insert(id flat.ID, v uint64) (t *flat.Table, i int, created bool) {
	t, i = m.f.Insert(id, 0, func(*flat.Table) (uint64, unsafe.Pointer, bool) {
		created = true
		return v, nil, true
	})
	return t, i, created
}

// Delete removes key, and reports whether the map held it.
func (m *Map) Delete(key string) bool {
	return m.f.Remove(m.h.ID(key), func(t *flat.Table, i int) { t.Word(i).Store(word.Dead) })
}

// Len returns the number of keys the map holds: at most the bound New
// was given. Under concurrent change it is a snapshot.
func (m *Map) Len() int { return m.f.Len() }

func (m *Map) rangeError(key string, v, delta int64) error {
	return fmt.Errorf("registry: adding %d to %q's %d leaves the values' range, 0 to %d", delta, key, v, int64(math.MaxInt64))
}
