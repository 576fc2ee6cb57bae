package inflight_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/internal/testhook"
	"github.com/floodgate-go/floodgate/internal/testmain"
)

// forms runs f on the lock-free Limiter, on its mutex twin, and, when cfg
// has no queue and no global cap, on a lock-free Limiter that spreads
// every key and parks every slot released (testhook.InFlightSpread), each
// built from cfg.
func forms(t *testing.T, cfg inflight.Config, f func(t *testing.T, l *inflight.Limiter)) {
	t.Helper()
	all := []string{"lockfree", "mutex"}
	if cfg.Queue == 0 && cfg.Global == 0 {
		all = append(all, "spread")
	}
	for _, form := range all {
		t.Run(form, func(t *testing.T) {
			c := cfg
			switch form {
			case "mutex":
				c = testhook.InFlightTwin(cfg).(inflight.Config)
			case "spread":
				c = testhook.InFlightSpread(cfg).(inflight.Config)
			}
			l, err := inflight.New(c)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			f(t, l)
		})
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	type bad struct {
		cfg  inflight.Config
		want string
	}
	cases := []bad{
		{inflight.Config{}, "Limit must be 1 to"},
		{inflight.Config{Limit: -1}, "got -1"},
		{inflight.Config{Limit: 1, Queue: -1}, "Queue must be 0"},
		{inflight.Config{Limit: 1, Global: -3}, "Global must be 0"},
		{inflight.Config{Limit: 1, MaxKeys: -1}, "MaxKeys must be 0"},
		{inflight.Config{Limit: 1, IdleTTL: -1}, "IdleTTL must be 0"},
		{inflight.Config{Limit: 1, Queue: inflight.MaxQueue + 1}, "Queue must be 0 (no waiting) to 1073741823"},
	}
	if over := int64(inflight.MaxLimit) + 1; over <= math.MaxInt { // an int of 32 bits cannot hold it
		cases = append(cases,
			bad{inflight.Config{Limit: int(over)}, "Limit must be 1 to 2147483647"},
			bad{inflight.Config{Limit: 1, Queue: int(over)}, "Queue must be 0"},
			bad{inflight.Config{Limit: 1, Global: int(over)}, "Global must be 0"})
	}
	for _, c := range cases {
		l, err := inflight.New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, %v; want an error containing %q", c.cfg, l, err, c.want)
		}
	}
	l, err := inflight.New(inflight.Config{Limit: inflight.MaxLimit, Queue: inflight.MaxQueue, Global: inflight.MaxLimit})
	if err != nil {
		t.Fatalf("the largest config: %v", err)
	}
	l.Close()
}

func TestExactLimitAndReleaseOnce(t *testing.T) {
	forms(t, inflight.Config{Limit: 3}, func(t *testing.T, l *inflight.Limiter) {
		var slots []inflight.Slot
		for range 3 {
			s, ok := l.TryAcquire("a")
			if !ok || !s.Held() {
				t.Fatalf("acquisition %d of 3 refused", len(slots)+1)
			}
			slots = append(slots, s)
		}
		if _, ok := l.TryAcquire("a"); ok {
			t.Fatal("a fourth slot of a limit of 3 was granted")
		}
		if _, ok := l.TryAcquire("b"); !ok {
			t.Fatal("another key was refused: keys share nothing")
		}
		if got := l.Held("a"); got != 3 {
			t.Fatalf("Held = %d, want 3", got)
		}
		copied := slots[0]
		if !slots[0].Release() {
			t.Fatal("the first release of a slot reported false")
		}
		if slots[0].Release() || copied.Release() || slots[0].Held() || copied.Held() {
			t.Fatal("a slot was released twice, through itself or a copy")
		}
		if got := l.Held("a"); got != 2 {
			t.Fatalf("Held after one release = %d, want 2", got)
		}
		// The ticket is reused by the next slot: the stale copy still
		// releases nothing.
		s, ok := l.TryAcquire("a")
		if !ok {
			t.Fatal("a released slot was not free again")
		}
		if copied.Release() || l.Held("a") != 3 {
			t.Fatalf("a stale copy released a reissued slot: Held = %d", l.Held("a"))
		}
		s.Release()
		var zero inflight.Slot
		if zero.Release() || zero.Held() {
			t.Fatal("the zero Slot released something")
		}
		for _, s := range slots[1:] {
			s.Release()
		}
		if got := l.Held("a"); got != 0 {
			t.Fatalf("Held at the end = %d, want 0", got)
		}
	})
}

// queued starts Acquire(ctx, key) in a goroutine and returns once it has
// returned or is queued; its result arrives on the channel.
type result struct {
	slot inflight.Slot
	err  error
}

func startWaiter(l *inflight.Limiter, ctx context.Context, key string) <-chan result {
	before := l.Waiting(key)
	c := make(chan result, 1)
	go func() {
		s, err := l.Acquire(ctx, key)
		c <- result{s, err}
	}()
	for len(c) == 0 && l.Waiting(key) == before {
		runtime.Gosched()
	}
	return c
}

func TestWaitIsFIFOAndBounded(t *testing.T) {
	forms(t, inflight.Config{Limit: 1, Queue: 3}, func(t *testing.T, l *inflight.Limiter) {
		ctx := context.Background()
		first, err := l.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		var waiters []<-chan result
		for range 3 {
			waiters = append(waiters, startWaiter(l, ctx, "k"))
		}
		if got := l.Waiting("k"); got != 3 {
			t.Fatalf("Waiting = %d, want 3", got)
		}
		if _, err := l.Acquire(ctx, "k"); !errors.Is(err, inflight.ErrFull) {
			t.Fatalf("a fourth waiter on a queue of 3: %v, want ErrFull", err)
		}
		held := first
		for n, w := range waiters {
			held.Release()
			r := <-w
			if r.err != nil {
				t.Fatalf("waiter %d: %v", n, r.err)
			}
			for _, later := range waiters[n+1:] {
				if len(later) != 0 {
					t.Fatalf("a later waiter was served before waiter %d", n)
				}
			}
			if _, ok := l.TryAcquire("k"); ok {
				t.Fatal("TryAcquire took a slot that was handed to a waiter")
			}
			held = r.slot
		}
		held.Release()
		if h, w := l.Held("k"), l.Waiting("k"); h != 0 || w != 0 {
			t.Fatalf("at the end: %d held, %d waiting", h, w)
		}
	})
}

func TestNoOvertakingWhileWaiting(t *testing.T) {
	forms(t, inflight.Config{Limit: 2, Queue: 1}, func(t *testing.T, l *inflight.Limiter) {
		ctx := context.Background()
		a, _ := l.TryAcquire("k")
		b, _ := l.TryAcquire("k")
		w := startWaiter(l, ctx, "k")
		a.Release() // handed to the waiter
		r := <-w
		if r.err != nil {
			t.Fatal(r.err)
		}
		if _, ok := l.TryAcquire("k"); ok {
			t.Fatal("a third slot of a limit of 2")
		}
		b.Release()
		if _, ok := l.TryAcquire("k"); !ok {
			t.Fatal("a free slot was refused")
		}
	})
}

func TestCancelledWaiterLeavesNoGap(t *testing.T) {
	forms(t, inflight.Config{Limit: 1, Queue: 3}, func(t *testing.T, l *inflight.Limiter) {
		bg := context.Background()
		held, _ := l.TryAcquire("k")
		w1 := startWaiter(l, bg, "k")
		ctx, cancel := context.WithCancel(bg)
		w2 := startWaiter(l, ctx, "k")
		w3 := startWaiter(l, bg, "k")
		cancel()
		if r := <-w2; !errors.Is(r.err, context.Canceled) || r.slot.Held() {
			t.Fatalf("the cancelled waiter: %+v", r)
		}
		if got := l.Waiting("k"); got != 2 {
			t.Fatalf("Waiting after a cancel = %d, want 2", got)
		}
		held.Release()
		r1 := <-w1
		if r1.err != nil || len(w3) != 0 {
			t.Fatalf("the first waiter: %v; the third served early: %v", r1.err, len(w3) != 0)
		}
		r1.slot.Release()
		r3 := <-w3
		if r3.err != nil {
			t.Fatalf("the third waiter, behind a cancelled one: %v", r3.err)
		}
		r3.slot.Release()
		if h, w := l.Held("k"), l.Waiting("k"); h != 0 || w != 0 {
			t.Fatalf("at the end: %d held, %d waiting", h, w)
		}
	})
}

func TestDoneContextTakesNothing(t *testing.T) {
	forms(t, inflight.Config{Limit: 1, Queue: 1}, func(t *testing.T, l *inflight.Limiter) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s, err := l.Acquire(ctx, "k")
		if !errors.Is(err, context.Canceled) || s.Held() {
			t.Fatalf("Acquire with a done context on a free key: %v, %v", s, err)
		}
		if l.Held("k") != 0 || l.Len() != 0 {
			t.Fatalf("a done context left %d held on %d keys", l.Held("k"), l.Len())
		}
	})
}

func TestNoQueueRefusesAtOnce(t *testing.T) {
	forms(t, inflight.Config{Limit: 1}, func(t *testing.T, l *inflight.Limiter) {
		s, err := l.Acquire(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Acquire(context.Background(), "k"); !errors.Is(err, inflight.ErrFull) {
			t.Fatalf("Acquire on a full key without a queue: %v, want ErrFull", err)
		}
		s.Release()
	})
}

func TestCloseWakesWaiters(t *testing.T) {
	forms(t, inflight.Config{Limit: 1, Queue: 4}, func(t *testing.T, l *inflight.Limiter) {
		bg := context.Background()
		held, _ := l.TryAcquire("k")
		ws := []<-chan result{startWaiter(l, bg, "k"), startWaiter(l, bg, "k")}
		l.Close()
		for _, w := range ws {
			if r := <-w; !errors.Is(r.err, inflight.ErrClosed) {
				t.Fatalf("a waiter at Close: %v, want ErrClosed", r.err)
			}
		}
		if _, err := l.Acquire(bg, "k"); !errors.Is(err, inflight.ErrClosed) {
			t.Fatalf("an Acquire that must wait after Close: %v, want ErrClosed", err)
		}
		if !held.Release() || l.Held("k") != 0 || l.Waiting("k") != 0 {
			t.Fatalf("a release after Close: %d held, %d waiting", l.Held("k"), l.Waiting("k"))
		}
		s, err := l.Acquire(bg, "k")
		if err != nil {
			t.Fatalf("an Acquire of a free slot after Close: %v", err)
		}
		s.Release()
		l.Close() // idempotent
	})
}

func TestGlobalCap(t *testing.T) {
	forms(t, inflight.Config{Limit: 5, Global: 3, Queue: 2}, func(t *testing.T, l *inflight.Limiter) {
		var slots []inflight.Slot
		for _, k := range []string{"a", "b", "a"} {
			s, ok := l.TryAcquire(k)
			if !ok {
				t.Fatalf("%s refused under the cap", k)
			}
			slots = append(slots, s)
		}
		if _, ok := l.TryAcquire("c"); ok {
			t.Fatal("a fourth slot under a global cap of 3")
		}
		if _, err := l.Acquire(context.Background(), "c"); !errors.Is(err, inflight.ErrGlobal) {
			t.Fatalf("Acquire at the global cap: %v, want ErrGlobal (no wait)", err)
		}
		if l.InUse() != 3 || l.Held("c") != 0 {
			t.Fatalf("InUse %d, c holds %d", l.InUse(), l.Held("c"))
		}
		slots[0].Release()
		if _, ok := l.TryAcquire("c"); !ok {
			t.Fatal("a slot given back to the cap was not free again")
		}
	})
}

func TestGlobalCapHandOffKeepsCount(t *testing.T) {
	forms(t, inflight.Config{Limit: 1, Global: 2, Queue: 1}, func(t *testing.T, l *inflight.Limiter) {
		a, _ := l.TryAcquire("a")
		w := startWaiter(l, context.Background(), "a")
		a.Release()
		r := <-w
		if r.err != nil || l.InUse() != 1 {
			t.Fatalf("handed over: %v, InUse %d, want 1", r.err, l.InUse())
		}
		r.slot.Release()
		if l.InUse() != 0 {
			t.Fatalf("InUse at the end = %d", l.InUse())
		}
	})
}

func TestMaxKeysNeverEvictsBusyKeys(t *testing.T) {
	// 64 keys at most: one shard.
	forms(t, inflight.Config{Limit: 1, MaxKeys: 64}, func(t *testing.T, l *inflight.Limiter) {
		var slots []inflight.Slot
		for k := range 64 {
			s, ok := l.TryAcquire(strconv.Itoa(k))
			if !ok {
				t.Fatalf("key %d refused below MaxKeys", k)
			}
			slots = append(slots, s)
		}
		if _, ok := l.TryAcquire("new"); ok {
			t.Fatal("a new key took the place of a busy one")
		}
		if _, err := l.Acquire(context.Background(), "new"); !errors.Is(err, inflight.ErrKeys) {
			t.Fatalf("Acquire of a new key among busy ones: %v, want ErrKeys", err)
		}
		for k := range 64 {
			if l.Held(strconv.Itoa(k)) != 1 {
				t.Fatalf("busy key %d lost its slot", k)
			}
		}
		slots[7].Release()
		s, ok := l.TryAcquire("new")
		if !ok || l.Len() != 64 {
			t.Fatalf("a new key with an idle one to replace: %v, Len %d", ok, l.Len())
		}
		s.Release()
		// The evicted key comes back with its slot free.
		if s, ok := l.TryAcquire("7"); !ok {
			t.Fatal("a key evicted while idle came back busy")
		} else {
			s.Release()
		}
		for _, s := range slots {
			s.Release()
		}
	})
}

func TestEvictIdleKeepsHeldKeys(t *testing.T) {
	forms(t, inflight.Config{Limit: 2}, func(t *testing.T, l *inflight.Limiter) {
		busy, _ := l.TryAcquire("busy")
		idle, _ := l.TryAcquire("idle")
		idle.Release()
		if n := l.EvictIdle(); n != 1 || l.Len() != 1 || l.Held("busy") != 1 {
			t.Fatalf("EvictIdle removed %d, left %d keys, busy holds %d", n, l.Len(), l.Held("busy"))
		}
		busy.Release()
		if n := l.EvictIdle(); n != 1 || l.Len() != 0 {
			t.Fatalf("EvictIdle after the release removed %d, left %d", n, l.Len())
		}
	})
}

func TestManyKeys(t *testing.T) {
	n := 1_000_000
	if testmain.Quick() || testing.Short() {
		n = 100_000
	}
	forms(t, inflight.Config{Limit: 1}, func(t *testing.T, l *inflight.Limiter) {
		slots := make([]inflight.Slot, n)
		for k := range n {
			s, ok := l.TryAcquire(fmt.Sprint("client-", k))
			if !ok {
				t.Fatalf("key %d refused", k)
			}
			slots[k] = s
		}
		if l.Len() != n {
			t.Fatalf("Len = %d, want %d", l.Len(), n)
		}
		if got := l.EvictIdle(); got != 0 {
			t.Fatalf("EvictIdle removed %d busy keys", got)
		}
		for k, s := range slots {
			if !s.Release() {
				t.Fatalf("slot %d was not released", k)
			}
		}
		if got := l.EvictIdle(); got != n || l.Len() != 0 {
			t.Fatalf("EvictIdle removed %d, left %d", got, l.Len())
		}
	})
}

func TestAllocations(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector drops pooled objects on purpose")
	}
	l, err := inflight.New(inflight.Config{Limit: 4, Global: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held, _ := l.TryAcquire("client")
	defer held.Release()
	if a := testing.AllocsPerRun(1000, func() {
		s, ok := l.TryAcquire("client")
		if !ok {
			t.Fatal("refused")
		}
		s.Release()
	}); a != 0 {
		t.Fatalf("TryAcquire and Release of a held key allocate %v times", a)
	}
}

func TestMain(m *testing.M) { testmain.Run(m) }

func TestSweepRemovesKeysIdleForAWholePeriod(t *testing.T) {
	forms(t, inflight.Config{Limit: 2, IdleTTL: time.Hour}, func(t *testing.T, l *inflight.Limiter) {
		s, _ := l.TryAcquire("idle")
		s.Release()
		busy, _ := l.TryAcquire("busy")
		if n := l.Sweep(); n != 0 {
			t.Fatalf("the first sweep removed %d keys acquired since the last one", n)
		}
		if n := l.Sweep(); n != 1 || l.Held("busy") != 1 || l.Len() != 1 {
			t.Fatalf("the second sweep removed %d (want the idle key only); busy holds %d", n, l.Held("busy"))
		}
		busy.Release()
		s, _ = l.TryAcquire("idle") // back, and touched again
		s.Release()
		if n := l.Sweep(); n != 1 || l.Len() != 1 {
			t.Fatalf("a sweep removed %d, left %d: want busy gone (untouched since its release's sweep) and idle kept", n, l.Len())
		}
	})
}

func TestSetLimit(t *testing.T) {
	forms(t, inflight.Config{Limit: 1, Queue: 4}, func(t *testing.T, l *inflight.Limiter) {
		bg := context.Background()
		held, _ := l.TryAcquire("k")
		w1, w2, w3 := startWaiter(l, bg, "k"), startWaiter(l, bg, "k"), startWaiter(l, bg, "k")
		if err := l.SetLimit(3); err != nil {
			t.Fatal(err)
		}
		r1, r2 := <-w1, <-w2
		if r1.err != nil || r2.err != nil || len(w3) != 0 || l.Held("k") != 3 || l.Waiting("k") != 1 {
			t.Fatalf("a limit raised to 3 served %v, %v, and the third early: %v; %d held, %d waiting",
				r1.err, r2.err, len(w3) != 0, l.Held("k"), l.Waiting("k"))
		}
		if err := l.SetLimit(1); err != nil {
			t.Fatal(err)
		}
		// 3 held under a limit of 1: releases go back until 1 is held,
		// then the next is handed to the waiter.
		held.Release()
		r1.slot.Release()
		if len(w3) != 0 || l.Held("k") != 1 {
			t.Fatalf("under a lowered limit: the waiter served early %v, %d held", len(w3) != 0, l.Held("k"))
		}
		r2.slot.Release()
		r3 := <-w3
		if r3.err != nil || l.Held("k") != 1 {
			t.Fatalf("the waiter: %v, %d held", r3.err, l.Held("k"))
		}
		r3.slot.Release()
		bads := []int{0, -1}
		if over := int64(inflight.MaxLimit) + 1; over <= math.MaxInt {
			bads = append(bads, int(over))
		}
		for _, bad := range bads {
			if err := l.SetLimit(bad); err == nil || !strings.Contains(err.Error(), "Limit must be 1 to") {
				t.Errorf("SetLimit(%d) = %v", bad, err)
			}
		}
	})
}

// TestDefaults: MaxKeys 0 is 1,048,576 keys and floodgate.Unbounded
// (math.MaxInt) none; IdleTTL 0 starts a sweep that floodgate.Never
// (math.MaxInt64) does not, and the sweep of a Limiter dropped without
// Close ends once it is collected.
func TestDefaults(t *testing.T) {
	l, err := inflight.New(inflight.Config{Limit: 1, MaxKeys: 2, IdleTTL: math.MaxInt64})
	if err != nil {
		t.Fatal(err)
	}
	if l.Swept() != nil {
		t.Error("IdleTTL math.MaxInt64 started a sweep")
	}
	for _, id := range []string{"a", "b", "c"} {
		if _, err := l.Acquire(context.Background(), id); id == "c" && err != inflight.ErrKeys || id != "c" && err != nil {
			t.Fatalf("Acquire(%s) at a bound of 2: %v", id, err)
		}
	}
	l.Close()
	for _, c := range []struct{ maxKeys, bound int }{{0, 1 << 20}, {math.MaxInt, 0}, {7, 7}} {
		l, err := inflight.New(inflight.Config{Limit: 1, MaxKeys: c.maxKeys, IdleTTL: math.MaxInt64})
		if err != nil {
			t.Fatal(err)
		}
		if l.Bound() != c.bound {
			t.Errorf("MaxKeys %d: bound %d, want %d", c.maxKeys, l.Bound(), c.bound)
		}
		l.Close()
	}
	l, err = inflight.New(inflight.Config{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	swept := l.Swept()
	if swept == nil {
		t.Fatal("IdleTTL 0 started no sweep")
	}
	l = nil
	_ = l
	deadline := time.Now().Add(30 * time.Second)
	for {
		runtime.GC()
		select {
		case <-swept:
			return
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the sweep outlived its dropped Limiter")
		}
	}
}
