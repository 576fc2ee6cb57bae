package stress

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/internal/chaos"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// probe counts what the goroutines hold of one key (or of all keys, for
// the global cap) at every instant: up by one after an acquisition, down
// by one before the release, and the most it ever counted.
type probe struct {
	now, most atomic.Int64
}

func (p *probe) up() {
	n := p.now.Add(1)
	for {
		m := p.most.Load()
		if n <= m || p.most.CompareAndSwap(m, n) {
			return
		}
	}
}

func (p *probe) down() { p.now.Add(-1) }

// TestInFlightNeverAboveLimit runs 64 goroutines on GOMAXPROCS above the
// cores against the in-flight Limiter and its mutex twin, on a few keys,
// and against Limiters that spread keys over lanes: one that spreads
// every key and parks every slot released (testhook.InFlightSpread), and
// one whose single key, under a wide limit, spreads as it would in use;
// each of the two also with a goroutine that sweeps all the while, so
// that keys lose their lanes (and spread again) as slots are parked,
// lent and given back on them, and must have lost them at least once:
// they take slots with TryAcquire and with Acquire (some of whose
// contexts another goroutine cancels while they wait), hold them for a
// random while and release them, some twice. A probe per key, and one
// over all keys, counts what is held at every instant: never above the
// limit, nor above the global cap; and at the end every slot is free,
// no waiter is left, every key can be evicted, and the Limiter's count
// of spread keys (which bounds them) is the keys whose word is marked.
func TestInFlightNeverAboveLimit(t *testing.T) {
	old := runtime.GOMAXPROCS(max(8, 4*runtime.NumCPU()))
	t.Cleanup(func() { runtime.GOMAXPROCS(old) })
	const limit, global, queue = 3, 7, 4
	keys := []string{"a", "b", "c", "d"}
	for _, form := range []string{"lockfree", "mutex", "spread", "spread-wide", "spread-swept", "spread-wide-swept"} {
		for _, capped := range []bool{false, true} {
			name := form
			if capped {
				name += "/global"
			}
			if capped && strings.HasPrefix(form, "spread") {
				continue // a global cap never spreads
			}
			t.Run(name, func(t *testing.T) {
				cfg := inflight.Config{Limit: limit, Queue: queue}
				if capped {
					cfg.Global = global
				}
				keys := keys
				switch form {
				case "mutex":
					cfg = testhook.InFlightTwin(cfg).(inflight.Config)
				case "spread", "spread-swept":
					cfg.Queue = 0
					cfg = testhook.InFlightSpread(cfg).(inflight.Config)
				case "spread-wide", "spread-wide-swept":
					// Room for the lanes. margin (a slot per P), and
					// fewer slots than goroutines on the one key.
					cfg = inflight.Config{Limit: 4*runtime.GOMAXPROCS(0) + 8}
					keys = keys[:1]
				}
				swept := strings.HasSuffix(form, "-swept")
				before := chaos.Retries()
				unspread := runInFlight(t, cfg, keys, swept)
				for again := 0; form != "mutex" && (chaos.Enabled && chaos.Retries() == before || swept && unspread == 0) && again < contendTries; again++ {
					t.Logf("no CAS retried, or no key unspread: running again (%d of %d)", again+1, contendTries)
					unspread += runInFlight(t, cfg, keys, swept)
				}
				if form != "mutex" && chaos.Enabled && chaos.Retries() == before {
					t.Fatal("no CAS ever retried: the test did not contend, so it proves nothing")
				}
				if swept && unspread == 0 {
					t.Fatal("no sweep ever took a key's lanes: the test proves nothing of it")
				}
				t.Logf("CAS retries: %d (counted only with -tags chaos)", chaos.Retries()-before)
			})
		}
	}
}

// runInFlight is one run of TestInFlightNeverAboveLimit, with a goroutine
// that sweeps all the while if swept; it returns how many times a sweep
// took a spread key's lanes.
func runInFlight(t *testing.T, cfg inflight.Config, keys []string, swept bool) int {
	l, err := inflight.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	probes := make([]probe, len(keys))
	var all probe
	// hold is a slot of the first key that the run keeps from start to
	// end when swept, taken through the word before any lane exists: the
	// key is never idle, so a sweep that finds it calm takes its lanes
	// (the key stays) rather than removing it, and the end of the run can
	// make that happen (see below). The probes count it.
	var hold inflight.Slot
	if swept {
		var ok bool
		if hold, ok = l.TryAcquire(keys[0]); !ok {
			t.Fatal("the first slot of a new Limiter was refused")
		}
		probes[0].up()
		all.up()
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for swept {
			select {
			case <-stop:
				return
			default:
				// Two sweeps back to back: the second finds a key calm
				// whose lanes lent nothing in the moment between, and
				// takes them while the goroutines go on.
				l.Sweep()
				l.Sweep()
				runtime.Gosched()
			}
		}
	}()
	var served, refused, cancelled atomic.Int64
	// pending holds the cancel of the latest Acquire that asked to be
	// cancelled: the next release cancels it, whatever it is doing then.
	var pending atomic.Pointer[context.CancelFunc]
	hammer(size(400_000), func(r *rand.Rand) {
		k := r.IntN(len(keys))
		var s inflight.Slot
		var ok bool
		var err error
		switch r.IntN(4) {
		case 0, 1:
			s, ok = l.TryAcquire(keys[k])
		default:
			ctx := context.Background()
			if r.IntN(3) == 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
				pending.Store(&cancel)
			}
			s, err = l.Acquire(ctx, keys[k])
			switch {
			case err == nil:
				ok = true
			case errors.Is(err, context.Canceled):
				cancelled.Add(1)
			case !errors.Is(err, inflight.ErrFull) && !errors.Is(err, inflight.ErrGlobal):
				t.Errorf("Acquire: %v", err)
			}
		}
		if !ok {
			refused.Add(1)
			return
		}
		served.Add(1)
		probes[k].up()
		all.up()
		for range r.IntN(40) {
			runtime.Gosched()
		}
		probes[k].down()
		all.down()
		if c := pending.Swap(nil); c != nil {
			(*c)()
		}
		if !s.Release() {
			t.Error("a held slot did not release")
		}
		if r.IntN(8) == 0 && s.Release() {
			t.Error("a slot released twice")
		}
	})
	close(stop)
	<-stopped
	if swept {
		// Whether a sweep found the key calm while the goroutines ran is
		// up to the scheduler. Now that they are done, it is certain: the
		// key is spread (by the run, or else now, as a lost CAS would
		// spread it), holds hold, and lends nothing, so of two sweeps the
		// second at the latest must take its lanes.
		if _, n := testhook.InFlightSpreadCounts(l); n == 0 {
			testhook.InFlightSpreadKey(l, keys[0])
			if testhook.InFlightSpreadKeys(l) == 0 {
				t.Fatal("the held key did not spread")
			}
			l.Sweep()
			l.Sweep()
			if _, n := testhook.InFlightSpreadCounts(l); n == 0 {
				t.Error("two sweeps of a calm spread key that holds a slot left it its lanes")
			}
		}
		probes[0].down()
		all.down()
		if !hold.Release() {
			t.Error("the run's held slot did not release")
		}
	}
	spread := testhook.InFlightSpreadKeys(l)
	spreading, unspread := testhook.InFlightSpreadCounts(l)
	if spreading != spread {
		t.Errorf("the Limiter counts %d keys spread, and %d words are marked spread", spreading, spread)
	}
	if cfg.Queue == 0 && cfg.Global == 0 && chaos.Enabled && spread == 0 && unspread == 0 {
		t.Error("no key spread, though CASes were lost: the lanes went untried")
	}
	for k, key := range keys {
		if m := probes[k].most.Load(); m > int64(cfg.Limit) {
			t.Errorf("key %s: %d held at once, limit %d", key, m, cfg.Limit)
		}
		if h, w := l.Held(key), l.Waiting(key); h != 0 || w != 0 {
			t.Errorf("key %s at the end: %d held, %d waiting", key, h, w)
		}
	}
	if cfg.Global > 0 {
		if m := all.most.Load(); m > int64(cfg.Global) {
			t.Errorf("%d held at once over all keys, global cap %d", m, cfg.Global)
		}
		if n := testhook.InFlightInUse(l); n != 0 {
			t.Errorf("InUse at the end: %d", n)
		}
	}
	want := len(keys)
	if swept {
		want = l.Len() // a key idle when the sweeper passed is gone already
	}
	if n := testhook.InFlightEvictIdle(l); n != want || l.Len() != 0 {
		t.Errorf("EvictIdle at the end removed %d of %d keys, left %d", n, want, l.Len())
	}
	if spreading, _ := testhook.InFlightSpreadCounts(l); spreading != 0 {
		t.Errorf("every key evicted, and the Limiter counts %d keys spread", spreading)
	}
	l.Close()
	most := make([]int64, len(keys))
	for k := range keys {
		most[k] = probes[k].most.Load()
	}
	t.Logf("%d served, %d refused, %d cancelled; most held at once per key %v, over all keys %d; %d keys spread",
		served.Load(), refused.Load(), cancelled.Load(), most, all.most.Load(), spread)
	if served.Load() == 0 || refused.Load() == 0 {
		t.Error("the run did not both serve and refuse: it proves nothing")
	}
	if swept {
		t.Logf("%d times a sweep took a key's lanes", unspread)
	}
	return unspread
}
