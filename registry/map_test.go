package registry_test

import (
	"math"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate/registry"
)

func newMap(t *testing.T, maxKeys int) *registry.Map {
	t.Helper()
	m, err := registry.New(maxKeys)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNewRejectsBadBounds(t *testing.T) {
	for _, n := range []int{0, -1, math.MinInt} {
		if m, err := registry.New(n); err == nil || m != nil {
			t.Errorf("New(%d) = %v, %v; want an error", n, m, err)
		}
	}
}

func TestValues(t *testing.T) {
	m := newMap(t, 100)
	if v, ok := m.Load("k"); ok || v != 0 {
		t.Fatalf("a key never added: %d, %v", v, ok)
	}
	if v, err := m.Add("k", 5); err != nil || v != 5 {
		t.Fatalf("Add 5: %d, %v", v, err)
	}
	if v, err := m.Add("k", -6); err == nil || v != 5 {
		t.Fatalf("Add −6 to 5: %d, %v; want an error and 5 unchanged", v, err)
	}
	if v, err := m.Add("k", math.MaxInt64); err == nil || v != 5 {
		t.Fatalf("Add past math.MaxInt64: %d, %v; want an error and 5 unchanged", v, err)
	}
	if _, err := m.Add("absent", -1); err == nil || m.Len() != 1 {
		t.Fatalf("Add −1 to an absent key: %v, %d keys; want an error and no key added", err, m.Len())
	}
	if ok, err := m.CompareAndSwap("k", 4, 9); ok || err != nil {
		t.Fatalf("CompareAndSwap from a wrong old: %v, %v", ok, err)
	}
	if ok, err := m.CompareAndSwap("k", 5, 9); !ok || err != nil {
		t.Fatalf("CompareAndSwap 5 → 9: %v, %v", ok, err)
	}
	if _, err := m.CompareAndSwap("k", 9, -1); err == nil {
		t.Fatal("CompareAndSwap to −1: no error")
	}
	if ok, err := m.CompareAndSwap("new", 0, 3); !ok || err != nil {
		t.Fatalf("CompareAndSwap 0 → 3 on an absent key: %v, %v", ok, err)
	}
	if v, ok := m.Load("new"); !ok || v != 3 {
		t.Fatalf("the key CompareAndSwap added: %d, %v", v, ok)
	}
	if !m.Delete("k") || m.Delete("k") {
		t.Fatal("Delete: want true once, then false")
	}
	if v, ok := m.Load("k"); ok || v != 0 || m.Len() != 1 {
		t.Fatalf("after Delete: %d, %v, %d keys", v, ok, m.Len())
	}
}

// A flood of new keys never takes the map past its bound.
func TestBound(t *testing.T) {
	const bound = 200
	m := newMap(t, bound)
	for i := range 10 * bound {
		if _, err := m.Add(strconv.Itoa(i), int64(i%7)); err != nil {
			t.Fatal(err)
		}
		if n := m.Len(); n > bound {
			t.Fatalf("%d keys after %d added; the bound is %d", n, i+1, bound)
		}
	}
}

// Many more goroutines than cores add to shared keys while others add
// keys of their own, which grows the table under them: no addition is
// lost or made twice. Then they race to take a budget by
// compare-and-swap: exactly the budget is taken.
func TestConcurrentExact(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4 * runtime.NumCPU()))
	const goroutines, adds, budget = 64, 200, 1000
	m := newMap(t, math.MaxInt)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range adds {
				if _, err := m.Add("shared"+strconv.Itoa(i%4), 1); err != nil {
					t.Error(err)
					return
				}
				if _, err := m.Add("own"+strconv.Itoa(g)+"."+strconv.Itoa(i), int64(i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for k := range 4 {
		if v, _ := m.Load("shared" + strconv.Itoa(k)); v != goroutines*adds/4 {
			t.Errorf("shared%d: %d; want %d", k, v, goroutines*adds/4)
		}
	}
	for g := range goroutines {
		for i := range adds {
			if v, _ := m.Load("own" + strconv.Itoa(g) + "." + strconv.Itoa(i)); v != int64(i) {
				t.Fatalf("own%d.%d: %d; want %d", g, i, v, i)
			}
		}
	}

	var taken atomic.Int64
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2 * budget / goroutines {
				for {
					v, _ := m.Load("budget")
					if v >= budget {
						break
					}
					if ok, err := m.CompareAndSwap("budget", v, v+1); err != nil {
						t.Error(err)
						return
					} else if ok {
						taken.Add(1)
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	if v, _ := m.Load("budget"); taken.Load() != budget || v != budget {
		t.Errorf("%d taken, the count at %d; want %d", taken.Load(), v, budget)
	}
}

// Goroutines add to more keys than a small map holds while others delete
// them, so that additions meet keys being evicted and removed: the map
// stays within its bound, and every value it holds is one an addition
// made.
func TestConcurrentChurn(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4 * runtime.NumCPU()))
	const bound, keys, goroutines, rounds = 64, 256, 32, 300
	m := newMap(t, bound)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				k := strconv.Itoa((g*rounds + i) % keys)
				if g%4 == 0 {
					m.Delete(k)
				} else if _, err := m.Add(k, 1); err != nil {
					t.Error(err)
					return
				}
				if n := m.Len(); n > bound {
					t.Errorf("%d keys; the bound is %d", n, bound)
					return
				}
			}
		}()
	}
	wg.Wait()
	for k := range keys {
		if v, _ := m.Load(strconv.Itoa(k)); v < 0 || v > goroutines*rounds {
			t.Errorf("key %d: %d", k, v)
		}
	}
}

func TestHotPathAllocatesNothing(t *testing.T) {
	m := newMap(t, 1000)
	if _, err := m.Add("k", 1); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() {
		v, _ := m.Add("k", 1)
		m.Load("k")
		m.CompareAndSwap("k", v, v+1)
	}); n != 0 {
		t.Errorf("%v allocations a call; want 0", n)
	}
}
