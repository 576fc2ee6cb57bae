package flat

import (
	"strconv"
	"sync"
	"testing"
	"unsafe"

	"github.com/floodgate-go/floodgate/internal/word"
)

// insert creates id in f with the word 1, if it is absent.
func insert(f *Flat, id ID) (*Table, int) {
	return f.Insert(id, 0, func(*Table) (uint64, unsafe.Pointer, bool) { return 1, nil, true })
}

// serialOf is the serial of id, which f holds.
func serialOf(t *testing.T, f *Flat, id ID) uint32 {
	t.Helper()
	tb, i := f.Find(id)
	if i < 0 {
		t.Fatalf("%v is not held", id)
	}
	return tb.Serial(i)
}

// TestSerials: a Flat keeps no serials (every one reads 0) until
// KeepSerials; then every key has a serial of its own, not 0, which
// resizes and a rebase keep, and which changes when the key is removed
// and made again, and when Convert moves it.
func TestSerials(t *testing.T) {
	f := NewFlat(FlatConfig{Shards: 1})
	h := NewHasher()
	ids := make([]ID, 200)
	for k := range ids {
		ids[k] = h.ID("key-" + strconv.Itoa(k))
	}
	for _, id := range ids[:50] {
		if tb, i := insert(&f, id); tb.Serial(i) != 0 {
			t.Fatalf("a Flat that keeps no serials: serial %d", tb.Serial(i))
		}
	}
	f.KeepSerials()
	f.KeepSerials() // a second call changes nothing
	first := f.Current(ids[0])
	for _, id := range ids[50:] {
		insert(&f, id)
	}
	if f.Current(ids[0]) == first {
		t.Fatal("precondition: 150 more keys did not resize the table")
	}
	serials := func() map[uint32]ID {
		seen := map[uint32]ID{}
		for _, id := range ids {
			s := serialOf(t, &f, id)
			if s == 0 {
				t.Fatalf("%v has serial 0", id)
			}
			if other, ok := seen[s]; ok {
				t.Fatalf("%v and %v share serial %d", id, other, s)
			}
			seen[s] = id
		}
		return seen
	}
	before := serials()
	s0 := serialOf(t, &f, ids[0])
	f.Rebase(ids[0], f.Current(ids[0]), 1000)
	if got := serialOf(t, &f, ids[0]); got != s0 {
		t.Errorf("a rebase changed the serial: %d, was %d", got, s0)
	}
	f.Remove(ids[0], func(t *Table, i int) { t.Word(i).Store(word.Dead) })
	insert(&f, ids[0])
	if got := serialOf(t, &f, ids[0]); got == s0 {
		t.Errorf("the key made again has the serial of the one removed: %d", got)
	}
	f.Convert(0, nil, nil, nil)
	for s, id := range serials() {
		if old, ok := before[s]; ok && old == id {
			t.Errorf("%v kept its serial %d across Convert", id, s)
		}
	}
}

// TestKeepSerialsConcurrent: KeepSerials while goroutines create and find
// keys and read their serials (under the race detector, the reads race
// no write), and after it every key has a serial of its own.
func TestKeepSerialsConcurrent(t *testing.T) {
	f := NewFlat(FlatConfig{Shards: 4})
	h := NewHasher()
	const goroutines, per = 8, 500
	ids := make([][]ID, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		ids[g] = make([]ID, per)
		for k := range per {
			ids[g][k] = h.ID(strconv.Itoa(g) + "-" + strconv.Itoa(k))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, id := range ids[g] {
				insert(&f, id)
				if tb, i := f.Find(id); i >= 0 {
					_ = tb.Serial(i)
				}
			}
		}()
	}
	f.KeepSerials()
	wg.Wait()
	// Serials are a shard's own: two keys of two shards may share one.
	type place struct {
		sh     *flatShard
		serial uint32
	}
	seen := map[place]ID{}
	for _, gs := range ids {
		for _, id := range gs {
			tb, i := f.Find(id)
			if i < 0 || tb.Serial(i) == 0 {
				t.Fatalf("%v: slot %d, serial %d after KeepSerials", id, i, tb.Serial(max(i, 0)))
			}
			p := place{f.shardOf(id), tb.Serial(i)}
			if other, ok := seen[p]; ok {
				t.Fatalf("%v and %v share serial %d in one shard", id, other, p.serial)
			}
			seen[p] = id
		}
	}
}
