package flat

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

type state struct{ id int64 }

func TestLoadOrCreateOncePerKey(t *testing.T) {
	for _, shards := range []int{1, 0, 16} {
		r := New[*state](shards)
		var created atomic.Int64
		const keys, goroutines = 100, 64
		seen := make([][]*state, goroutines)
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range keys {
					s := r.LoadOrCreate(strconv.Itoa(k), func() *state {
						return &state{id: created.Add(1)}
					})
					seen[g] = append(seen[g], s)
				}
			}()
		}
		wg.Wait()
		if created.Load() != keys {
			t.Fatalf("shards=%d: created %d states for %d keys", shards, created.Load(), keys)
		}
		for g := range goroutines {
			for k := range keys {
				if seen[g][k] != seen[0][k] {
					t.Fatalf("shards=%d: goroutine %d got another state for key %d", shards, g, k)
				}
			}
		}
		if r.Len() != keys {
			t.Fatalf("shards=%d: Len %d, want %d", shards, r.Len(), keys)
		}
	}
}

func TestReplace(t *testing.T) {
	r := New[*state](4)
	a, b, c := &state{1}, &state{2}, &state{3}
	if got := r.Replace("k", a, b); got != b {
		t.Fatalf("Replace on an absent key installs: got %v", got)
	}
	if got := r.Replace("k", a, c); got != b {
		t.Fatalf("Replace with a stale old keeps the current value: got %v", got)
	}
	if got := r.Replace("k", b, c); got != c {
		t.Fatalf("Replace of the current value installs: got %v", got)
	}
}

func TestRemoveAndDeleteIf(t *testing.T) {
	r := New[*state](8)
	for i := range 1000 {
		r.LoadOrCreate(strconv.Itoa(i), func() *state { return &state{int64(i)} })
	}
	var retired *state
	if !r.Remove("7", func(s *state) { retired = s }) || retired == nil || retired.id != 7 {
		t.Fatalf("Remove did not hand over the value: %v", retired)
	}
	if r.Remove("7", func(*state) { t.Fatal("retire called for an absent key") }) {
		t.Fatal("Remove of an absent key reported true")
	}
	n := r.DeleteIf(func(_ string, s *state) bool { return s.id%2 == 0 })
	if n != 500 {
		t.Fatalf("DeleteIf deleted %d, want 500", n)
	}
	if r.Len() != 499 {
		t.Fatalf("Len %d, want 499", r.Len())
	}
	for i := 0; i < 1000; i += 2 {
		if _, ok := r.Load(strconv.Itoa(i)); ok {
			t.Fatalf("even id %d survived DeleteIf", i)
		}
	}
}

func TestLoadAllocatesNothing(t *testing.T) {
	r := New[*state](0)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
		r.LoadOrCreate(keys[i], func() *state { return &state{} })
	}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		if _, ok := r.Load(keys[i%len(keys)]); !ok {
			t.Fatal("lost a key")
		}
		i++
	})
	if allocs != 0 {
		t.Fatalf("Load allocates %.1f times per call", allocs)
	}
}

// TestHasherLengths: keys whose words agree but whose lengths differ,
// which a length folded into a word once made one identity whatever the
// seeds ("1000" and "10000"; "10000000" and "100000000"), have
// identities of their own, and no two keys of a dense set share one.
func TestHasherLengths(t *testing.T) {
	h := NewHasher()
	for _, pair := range [][2]string{{"1000", "10000"}, {"10000000", "100000000"}, {"3222", "32222"}, {"", "\x00"}} {
		if h.ID(pair[0]) == h.ID(pair[1]) {
			t.Errorf("%q and %q share an identity", pair[0], pair[1])
		}
	}
	seen := map[ID]string{}
	for i := range 200_000 {
		for _, k := range []string{strconv.Itoa(i), strconv.Itoa(i) + "0", "1." + strconv.Itoa(i)} {
			id := h.ID(k)
			if o, ok := seen[id]; ok && o != k {
				t.Fatalf("%q and %q share an identity", o, k)
			}
			seen[id] = k
		}
	}
}
