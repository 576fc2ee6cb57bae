package floodgate

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/flat"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// heldRule is the rule of the held grants' tests: 10 an hour, on a clock
// that does not move, so that only the grants change what a key holds.
var heldRule = Rule{Limit: 10, Period: time.Hour}

// heldForms are the two ways a grant is held across a request: a
// Limiter's Reservation, and a LocalStore's Hold (as the middlewares'
// After policies hold one). Each makes a Limiter of alg bounded by
// maxKeys (0: none), and reserve reserves est of key on it and returns
// the settlement of that reservation.
var heldForms = []struct {
	name string
	make func(t *testing.T, alg string, maxKeys int) (l *Limiter, reserve func(key string, est int64) (settle func(actual int64)))
}{
	{"Reservation", func(t *testing.T, alg string, maxKeys int) (*Limiter, func(string, int64) func(int64)) {
		l, err := New(Config{Algorithm: alg, Rule: heldRule, Clock: NewManualClock(int64(time.Hour)), MaxKeys: cmp.Or(maxKeys, Unbounded), twins: true})
		if err != nil {
			t.Fatal(err)
		}
		return l, func(key string, est int64) func(int64) {
			r := new(Reservation)
			*r = l.Reserve(key, est)
			if !r.Decision().Allowed {
				t.Fatalf("Reserve(%s, %d) refused: %+v", key, est, r.Decision())
			}
			return func(actual int64) {
				if _, err := r.Settle(actual); err != nil {
					t.Fatal(err)
				}
			}
		}
	}},
	{"Hold", func(t *testing.T, alg string, maxKeys int) (*Limiter, func(string, int64) func(int64)) {
		if maxKeys == 0 {
			maxKeys = Unbounded
		}
		s := NewLocalStore(LocalStoreConfig{Clock: NewManualClock(int64(time.Hour)), MaxKeys: maxKeys, IdleTTL: Never})
		s.twins = true
		t.Cleanup(func() { s.Close() })
		p := mustPolicy(t, s, "held", alg, heldRule)
		ctx := context.Background()
		return s.Limiter(p), func(key string, est int64) func(int64) {
			h := new(Hold)
			if _, _, err := s.Reserve(ctx, []Ask{{Policy: p, Key: key, N: est}}, nil, h); err != nil || !h.Admitted {
				t.Fatalf("Reserve(%s, %d): admitted %v, %v", key, est, h.Admitted, err)
			}
			return func(actual int64) {
				if _, err := s.Settle(ctx, []Ask{{Policy: p, Key: key, N: actual}}, nil, h); err != nil {
					t.Fatal(err)
				}
			}
		}
	}},
}

// TestHeldGrantFindsItsKey: a held grant (a reservation of 6, settled to
// 1) gives its key back the 5 it did not use while its key is the one it
// was taken from, in whatever table holds the key by then, and nothing
// once the key was removed and made again, whether or not its table had
// been replaced before the removal: the key keeps what it was charged
// (stricter, never looser), as each word algorithm's mutex twin, whose
// grant keeps the key's state itself, does too. Each case makes its
// precondition happen and checks it: the key moved to another table, was
// removed, or stayed in its table.
func TestHeldGrantFindsItsKey(t *testing.T) {
	for _, form := range heldForms {
		for _, alg := range []string{TokenBucket, testhook.TokenBucketMutex, FixedWindow, testhook.FixedWindowMutex} {
			cases := []struct {
				name    string
				maxKeys int
				between func(t *testing.T, l *Limiter) // what happens to the key while the grant is held
				given   int64
			}{
				{"moved", 0, func(t *testing.T, l *Limiter) { moveKey(t, l, "k") }, 5},
				{"reset", 0, func(t *testing.T, l *Limiter) {
					stays(t, l, "k", func() { l.Reset("k"); l.AllowN("k", 2) })
				}, 0},
				{"moved, reset", 0, func(t *testing.T, l *Limiter) {
					moveKey(t, l, "k")
					l.Reset("k")
					l.AllowN("k", 2)
				}, 0},
				{"evicted", 1, func(t *testing.T, l *Limiter) {
					stays(t, l, "k", func() {
						l.Allow("x") // MaxKeys 1: evicts k
						if _, i := l.flat.Find(l.hasher.ID("k")); i >= 0 {
							t.Fatal("precondition: k is still held after x came at MaxKeys 1")
						}
						l.AllowN("k", 1) // k again, as the sketch remembers it
					})
				}, 0},
				{"moved, evicted", 64, func(t *testing.T, l *Limiter) { moveThenEvict(t, l, "k"); l.AllowN("k", 1) }, 0},
			}
			for _, c := range cases {
				t.Run(form.name+"/"+alg+"/"+c.name, func(t *testing.T) {
					l, reserve := form.make(t, alg, c.maxKeys)
					defer l.Close()
					settle := reserve("k", 6)
					c.between(t, l)
					before := l.Peek("k").Remaining
					settle(1)
					if given := l.Peek("k").Remaining - before; given != c.given {
						t.Errorf("the settlement gave the key back %d, want %d", given, c.given)
					}
				})
			}
		}
	}
}

// TestHeldGrantAcrossSetRule: a held grant made under a rule that SetRule
// changed since gives nothing back, as a grant that kept its table did:
// the key's word was converted, and belongs to another rule.
func TestHeldGrantAcrossSetRule(t *testing.T) {
	for _, form := range heldForms {
		for _, alg := range []string{TokenBucket, FixedWindow} {
			t.Run(form.name+"/"+alg, func(t *testing.T) {
				l, reserve := form.make(t, alg, 0)
				defer l.Close()
				settle := reserve("k", 6)
				if err := l.SetRule(heldRule); err != nil {
					t.Fatal(err)
				}
				before := l.Peek("k").Remaining
				settle(1)
				if given := l.Peek("k").Remaining - before; given != 0 {
					t.Errorf("the settlement gave the key back %d across SetRule, want 0", given)
				}
			})
		}
	}
}

// TestWaitCancelFindsItsKey: a WaitN whose key moved to another table
// while it waited gives its reservation back when its context ends, and
// one whose key was reset and made again meanwhile gives nothing back.
func TestWaitCancelFindsItsKey(t *testing.T) {
	for _, alg := range []string{TokenBucket, testhook.TokenBucketMutex} {
		for _, reset := range []bool{false, true} {
			t.Run(alg+"/reset="+strconv.FormatBool(reset), func(t *testing.T) {
				clock := NewManualClock(int64(time.Hour))
				l, err := New(Config{Algorithm: alg, Rule: Rule{Limit: 1, Period: time.Hour}, Clock: clock, twins: true})
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				l.Allow("k")
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error)
				go func() { done <- l.WaitN(ctx, "k", 1) }()
				for clock.Waiting() == 0 {
					runtime.Gosched()
				}
				moveKey(t, l, "k")
				want := time.Hour // the Allow's token only
				if reset {
					l.Reset("k")
					l.AllowN("k", 1)
				}
				cancel()
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Fatalf("WaitN: %v", err)
				}
				if d := l.Peek("k"); d.RetryAfter != want {
					t.Errorf("after the cancelled wait: %+v, want RetryAfter %v", d, want)
				}
			})
		}
	}
}

// moveKey makes key's table be replaced, by resizes, with key held in it.
func moveKey(t *testing.T, l *Limiter, key string) {
	t.Helper()
	id := l.hasher.ID(key)
	t0, _ := l.flat.Find(id)
	for j := 0; ; j++ {
		if t1, i := l.flat.Find(id); i < 0 {
			t.Fatalf("precondition: %s is no longer held", key)
		} else if t1 != t0 {
			return
		}
		if j == 10_000 {
			t.Fatalf("precondition: %s's table was not replaced by 10,000 other keys", key)
		}
		l.Allow("mover-" + strconv.Itoa(j))
	}
}

// moveThenEvict brings new keys, each charged its all, until key is
// evicted at the bound, and checks that its table was replaced before.
func moveThenEvict(t *testing.T, l *Limiter, key string) {
	t.Helper()
	id := l.hasher.ID(key)
	t0, _ := l.flat.Find(id)
	moved := false
	for j := 0; ; j++ {
		t1, i := l.flat.Find(id)
		if i < 0 {
			break
		}
		moved = moved || t1 != t0
		if j == 100_000 {
			t.Fatalf("precondition: %s was not evicted by 100,000 other keys", key)
		}
		if _, err := l.Charge("evictor-"+strconv.Itoa(j), heldRule.Limit); err != nil {
			t.Fatal(err)
		}
	}
	if !moved {
		t.Fatalf("precondition: %s was evicted in the table it was reserved in", key)
	}
}

// stays runs f, and checks that key's table was not replaced meanwhile.
func stays(t *testing.T, l *Limiter, key string, f func()) {
	t.Helper()
	t0 := l.flat.Current(l.hasher.ID(key))
	f()
	if t1 := l.flat.Current(l.hasher.ID(key)); t1 != t0 {
		t.Fatalf("precondition: %s's table was replaced", key)
	}
}

// TestHeldGrantsUnderEviction: 32 goroutines on more Ps than cores
// reserve random estimates on three keys and settle them to random costs,
// while 4 others bring 16 ids each, over and over, each taking its all,
// into a Limiter of MaxKeys 8, with the clock frozen: the three keys,
// whose states are fresh sooner than the flooders', are evicted and made
// again, and their tables replaced, while reservations of theirs are
// held. A worker also evicts its key itself, as MaxKeys does, while it
// holds a reservation: every time until 100 reservations have been
// settled after their key was evicted, then every fourth time. A key
// that refuses (spent, at a clock that does not move) is replaced by a
// new one; the sketch, which remembers every evicted key as spent, fills
// with a few hundred keys at most before that count is reached, so new
// keys are admitted. No reservation is admitted while its key holds less
// than its estimate: each admission is checked against a lower bound of
// what its key had taken, what the calls that returned before it began
// took less every give-back that began before it returned (a give-back
// dropped because its key was evicted leaves the key holding more).
// Every word algorithm and its twin.
func TestHeldGrantsUnderEviction(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4 * runtime.NumCPU()))
	const keys, gens, workers, flooders, floodIDs, rounds, remakes = 3, 1 << 16, 32, 4, 16, 300, 100
	rule := Rule{Limit: 500, Period: time.Hour}
	for _, alg := range []string{TokenBucket, testhook.TokenBucketMutex, FixedWindow, testhook.FixedWindowMutex} {
		t.Run(alg, func(t *testing.T) {
			l, err := New(Config{Algorithm: alg, Rule: rule, Clock: NewManualClock(int64(time.Hour)), MaxKeys: 8, twins: true})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			done, back := new([keys][gens]atomic.Int64), new([keys][gens]atomic.Int64)
			var gen [keys]atomic.Int64 // the key k stands for: key-k-gen
			var remade atomic.Int64    // settled after their key was evicted
			var wg, flood sync.WaitGroup
			stop := make(chan struct{})
			for f := range flooders {
				flood.Add(1)
				go func() {
					defer flood.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						// A few ids a flooder, over and over: many more
						// than MaxKeys, so that keys are evicted all the
						// time, and few enough that what the sketch
						// remembers of them (spent, at a clock that does
						// not move) refuses few new keys.
						l.AllowN("flood-"+strconv.Itoa(f)+"-"+strconv.Itoa(i%floodIDs), rule.Limit)
						runtime.Gosched()
					}
				}()
			}
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 7))
					for i := 0; i < rounds || remade.Load() < remakes; i++ {
						k := rng.IntN(keys)
						e := gen[k].Load()
						if i == 1000*rounds || e == gens {
							return // the check below fails
						}
						key := "key-" + strconv.Itoa(k) + "-" + strconv.FormatInt(e, 10)
						est := rng.Int64N(50) + 1
						before := done[k][e].Load()
						r := l.Reserve(key, est)
						if !r.Decision().Allowed {
							gen[k].CompareAndSwap(e, e+1)
							continue
						}
						if held := before - back[k][e].Load(); held+est > rule.Limit {
							t.Errorf("%s: an estimate of %d was admitted when the key had taken at least %d of %d", key, est, held, rule.Limit)
						}
						done[k][e].Add(est)
						was := lifeOf(l, key)
						// Held while others come and go; and the key is
						// evicted meanwhile, as MaxKeys evicts (its state
						// remembered by the sketch), every time until 100
						// reservations were, then every fourth time, so
						// that settlements after an eviction are certain.
						if i%4 == 0 || remade.Load() < remakes {
							evictKey(l, key)
						} else {
							runtime.Gosched()
						}
						if is := lifeOf(l, key); was != 0 && is != was {
							remade.Add(1)
						}
						actual := rng.Int64N(60)
						back[k][e].Add(max(0, est-actual))
						if _, err := r.Settle(actual); err != nil {
							t.Error(err)
							return
						}
						done[k][e].Add(max(0, actual-est))
					}
				}()
			}
			wg.Wait()
			close(stop)
			flood.Wait()
			if n := remade.Load(); n < remakes {
				t.Errorf("precondition: %d reservations were settled after their key was evicted, want %d", n, remakes)
			}
		})
	}
}

// evictKey evicts key as MaxKeys does: its state retired, and remembered
// by the sketch, under its shard's lock.
func evictKey(l *Limiter, key string) {
	evict := l.evictWord
	if l.kind == objects {
		evict = l.evictObject
	}
	l.flat.Remove(l.hasher.ID(key), func(t *flat.Table, i int) { evict(t, i, l.now()) })
}

// lifeOf names the life of key's state, or is 0 if it is not held: its
// serial in its table, or the address of its state object.
func lifeOf(l *Limiter, key string) uint64 {
	t, i := l.flat.Find(l.hasher.ID(key))
	switch {
	case i < 0:
		return 0
	case l.kind == objects:
		return uint64(uintptr(t.Ptr(i)))
	}
	return uint64(t.Serial(i))
}
