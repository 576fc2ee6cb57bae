package redislimit

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/overlap"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The loss tests' run: two replicas (Stores) on one redis-server, each
// leasing lossAhead slots ahead of a client limited to lossLimit at once,
// and 64 workers, 32 on each, each taking a slot of the client, holding
// it for the run's hold, and giving it back, on the real clocks of this
// machine and of Redis.
const (
	lossLimit   = 8
	lossAhead   = 2
	lossWorkers = 64
)

// gate holds back the workers that pass it while it is shut.
type gate struct {
	mu   sync.Mutex
	shut chan struct{} // nil while open
}

func (g *gate) close() {
	g.mu.Lock()
	if g.shut == nil {
		g.shut = make(chan struct{})
	}
	g.mu.Unlock()
}

func (g *gate) open() {
	g.mu.Lock()
	if g.shut != nil {
		close(g.shut)
		g.shut = nil
	}
	g.mu.Unlock()
}

func (g *gate) pass(stop <-chan struct{}) {
	g.mu.Lock()
	shut := g.shut
	g.mu.Unlock()
	if shut != nil {
		select {
		case <-shut:
		case <-stop:
		}
	}
}

// lossRun is one run of the loss tests.
type lossRun struct {
	t             *testing.T
	srv           *redistest.Server
	rc            *redis.Client
	ttl, hold     time.Duration
	stores        [2]*Store
	ps            [2]floodgate.SlotPolicy
	renewing      [2]sync.RWMutex // a replica's renewals hold it shared: the test, whole, pauses them
	admit, finish [2]gate         // shut: the replica's workers take no slot, or give none back
	acquiring     [2]atomic.Int64 // the replica's acquisitions under way
	served        [2]atomic.Int64
	asked         [2]overlap.Log // each replica's acquisitions, served or refused: when asked, and for how long held
	log           overlap.Log    // the held slots of both
	base          time.Time
	stop          chan struct{}
	done          sync.WaitGroup
}

// now is the run's clock: ns since it began, on the monotonic clock.
func (r *lossRun) now() int64 { return int64(time.Since(r.base)) }

func startLossRun(t *testing.T) *lossRun {
	// A renewal must reach Redis within SlotTTL, or the slots it renews
	// expire while held, which no test of a loss may count on: SlotTTL
	// is ample beside the loaded machine's round trips, more so under the
	// emulation that -short serves.
	r := &lossRun{t: t, srv: redistest.Start(t), ttl: 1500 * time.Millisecond, hold: 50 * time.Millisecond, base: time.Now(), stop: make(chan struct{})}
	timeout := 500 * time.Millisecond
	if testing.Short() {
		r.ttl, timeout, r.hold = 4*time.Second, 1300*time.Millisecond, 100*time.Millisecond
	}
	r.rc = client(t, r.srv)
	for i := range r.stores {
		cfg := Config{SlotTTL: r.ttl, Timeout: timeout, FailureMode: FailClosed, Lease: Lease{Slots: lossAhead}}
		r.stores[i] = slotStoreWith(t, r.srv, cfg, func(s *Store) {
			s.holding.around = func(renew func() bool) {
				r.renewing[i].RLock()
				defer r.renewing[i].RUnlock()
				renew()
			}
		})
		r.ps[i] = mustSlots(t, r.stores[i], "conc", lossLimit)
	}
	old := runtime.GOMAXPROCS(max(8, 4*runtime.NumCPU()))
	t.Cleanup(func() { runtime.GOMAXPROCS(old) })
	for w := range lossWorkers {
		r.done.Add(1)
		go r.work(w % 2)
	}
	t.Cleanup(r.end)
	return r
}

// work is one worker of replica i.
func (r *lossRun) work(i int) {
	defer r.done.Done()
	ctx := context.Background()
	for {
		r.admit[i].pass(r.stop)
		select {
		case <-r.stop:
			return
		default:
		}
		r.acquiring[i].Add(1)
		at := r.now()
		sl, ok, err := r.ps[i].Acquire(ctx, "client")
		r.acquiring[i].Add(-1)
		if err != nil {
			r.t.Error(err)
			return
		}
		if !ok {
			r.asked[i].Add(at, overlap.Interval{From: at, To: at})
			runtime.Gosched()
			continue
		}
		from := r.now()
		time.Sleep(r.hold) // the request's work
		r.finish[i].pass(r.stop)
		to := r.now()
		sl.Release()
		r.served[i].Add(1)
		r.asked[i].Add(at, overlap.Interval{From: from, To: to})
		r.log.Add(at, overlap.Interval{From: from, To: to})
	}
}

// end stops the workers, and waits for them.
func (r *lossRun) end() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	r.done.Wait()
}

// waitFor waits, on the real clock, until cond holds, and fails the test
// if it has not within a minute: a bound on a broken run, not a speed.
func (r *lossRun) waitFor(what string, cond func() bool) {
	r.t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			r.t.Fatalf("after a minute, still waiting for %s", what)
		}
	}
}

// hold takes n slots of replica i for the test, as requests in flight
// would, waiting for the workers to leave room.
func (r *lossRun) holdSlots(i, n int) []floodgate.Slot {
	r.t.Helper()
	var held []floodgate.Slot
	r.waitFor(fmt.Sprintf("%d slots of replica %d", n, i), func() bool {
		sl, ok, err := r.ps[i].Acquire(context.Background(), "client")
		if err != nil {
			r.t.Fatal(err)
		}
		if ok {
			held = append(held, sl)
		}
		return len(held) == n
	})
	return held
}

// parkOne makes replica i hold at least one slot ahead: a slot taken and
// given back stays ahead, or the pool was full.
func (r *lossRun) parkOne(i int) {
	r.t.Helper()
	r.holdSlots(i, 1)[0].Release()
}

// pauseRenewals holds replica i's renewals back (one under way ends
// first) until the function it returns is called, or the test ends, so
// that a test that fails meanwhile does not leave its Store's Close
// waiting for them.
func (r *lossRun) pauseRenewals(i int) (resume func()) {
	r.renewing[i].Lock()
	var once sync.Once
	resume = func() { once.Do(r.renewing[i].Unlock) }
	r.t.Cleanup(resume)
	return resume
}

// checkBound fails the test if the requests asked from x on, held
// slots that overlap more than the limit deep, and reports the run.
func (r *lossRun) checkBound(lossAt, x int64, what string) {
	r.t.Helper()
	after := r.log.AskedIn(x, 1<<62)
	if d := overlap.Deepest(after); d > lossLimit {
		r.t.Errorf("%s: the requests asked from one SlotTTL and one hold on held %d slots at once, over the limit %d", what, d, lossLimit)
	}
	r.t.Logf("%s: %d served after the loss and before the bound, %d from the bound on; most held at once: %d asked before the loss, %d in between, %d from the bound on, %d of all together (limit %d); slots lost %d and %d",
		what, len(r.log.AskedIn(lossAt, x)), len(after),
		overlap.Deepest(r.log.AskedIn(0, lossAt)), overlap.Deepest(r.log.AskedIn(lossAt, x)), overlap.Deepest(after), overlap.Deepest(r.log.AskedIn(0, 1<<62)), lossLimit,
		r.stores[0].Stats().SlotsLost, r.stores[1].Stats().SlotsLost)
}

// TestSlotsBackWithinLimitAfterLoss: two replicas lease a client's slots
// ahead (limit 8, 2 ahead each), 64 workers take, hold and give back its
// slots, and Redis loses them. The requests asked one SlotTTL and one
// hold after the loss never hold more than the limit at once.
//
// flushall: FLUSHALL while each replica holds two slots in use (the
// test's, which it gives back only after a renewal sent after the loss
// has answered) and at least one ahead.
//
// paused: one replica stops (no renewal, no release, no acquisition, its
// clock running, as under SIGSTOP) holding two slots in use and at least
// one ahead, past SlotTTL, until the other has taken every place its
// members had on Redis; then it resumes.
func TestSlotsBackWithinLimitAfterLoss(t *testing.T) {
	t.Run("flushall", func(t *testing.T) {
		r := startLossRun(t)
		r.waitFor("a warm run", func() bool { return r.served[0].Load() >= 20 && r.served[1].Load() >= 20 })
		r.admit[0].close()
		r.admit[1].close()
		var held [2][]floodgate.Slot
		for i := range held {
			held[i] = r.holdSlots(i, 2)
			r.parkOne(i)
		}
		// No renewal gives back a slot ahead between the check and the loss.
		resume0, resume1 := r.pauseRenewals(0), r.pauseRenewals(1)
		var atLoss []*redisSlot
		for i, p := range r.ps {
			ahead := parked(p, "client")
			if len(ahead) == 0 {
				t.Fatalf("replica %d holds no slot ahead at the loss", i)
			}
			atLoss = append(atLoss, heldSlots(r.stores[i])...)
		}
		r.srv.Flush()
		lossAt := r.now()
		renewals := [2]int64{r.stores[0].Stats().SlotRenewals, r.stores[1].Stats().SlotRenewals}
		resume0()
		resume1()
		r.admit[0].open()
		r.admit[1].open()
		// Two renewals begun after the loss: the first was sent after it,
		// and has answered.
		r.waitFor("two renewals of each replica after the loss", func() bool {
			return r.stores[0].Stats().SlotRenewals >= renewals[0]+2 && r.stores[1].Stats().SlotRenewals >= renewals[1]+2
		})
		for i, s := range r.stores {
			if lost := s.Stats().SlotsLost; lost < 2 {
				t.Errorf("replica %d: %d slots lost, want at least the 2 the test holds", i, lost)
			}
		}
		for i, s := range r.stores {
			for _, h := range heldSlots(s) {
				if slices.Contains(atLoss, h) {
					t.Errorf("replica %d still renews a slot it held at the loss: %s", i, h.member)
				}
			}
		}
		for i := range held {
			for _, sl := range held[i] {
				sl.Release() // the requests in flight at the loss end
			}
			for _, h := range parked(r.ps[i], "client") {
				if h.lost.Load() {
					t.Errorf("replica %d parked a lost slot", i)
				}
			}
		}
		x := lossAt + int64(r.ttl+r.hold)
		r.waitFor("a SlotTTL of requests after the bound", func() bool {
			return r.now() > x+int64(r.ttl) && len(r.log.AskedIn(x, 1<<62)) >= 2*lossLimit
		})
		r.end()
		r.checkBound(lossAt, x, "flushall")
	})

	t.Run("paused", func(t *testing.T) {
		r := startLossRun(t)
		const a = 0
		r.waitFor("a warm run", func() bool { return r.served[0].Load() >= 20 && r.served[1].Load() >= 20 })
		r.admit[a].close()
		held := r.holdSlots(a, 2)
		r.parkOne(a)
		// a stops: no renewal, no release, no acquisition; none under way.
		resume := r.pauseRenewals(a)
		r.finish[a].close()
		r.waitFor("replica a's acquisitions under way", func() bool { return r.acquiring[a].Load() == 0 })
		stopAt := r.now()
		if len(parked(r.ps[a], "client")) == 0 {
			t.Fatal("replica a holds no slot ahead at the stop")
		}
		var theirs []string
		for _, h := range heldSlots(r.stores[a]) {
			theirs = append(theirs, h.member)
		}
		key := r.ps[a].(*slotPolicy).key("client")
		r.waitFor("the other replica to take the places of a's members, past SlotTTL", func() bool {
			if r.now() < stopAt+int64(r.ttl+r.hold) {
				return false
			}
			scores, err := r.rc.ZMScore(context.Background(), key, theirs...).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, sc := range scores {
				if sc != 0 {
					return false
				}
			}
			return true
		})
		resumeAt := r.now()
		resume()
		r.finish[a].open()
		r.admit[a].open()
		renewals := r.stores[a].Stats().SlotRenewals
		for _, sl := range held {
			sl.Release() // the requests in flight at the stop end
		}
		// Two renewals begun after the resumption: the first was sent
		// after it, and has answered.
		r.waitFor("two renewals of replica a after it resumed", func() bool { return r.stores[a].Stats().SlotRenewals >= renewals+2 })
		for _, h := range heldSlots(r.stores[a]) {
			if slices.Contains(theirs, h.member) {
				t.Errorf("replica a still holds a slot it held at the stop, expired since: %s", h.member)
			}
		}
		x := stopAt + int64(r.ttl+r.hold)
		r.waitFor("a SlotTTL of requests after the resumption", func() bool {
			return r.now() > max(x, resumeAt)+int64(r.ttl) && len(r.log.AskedIn(x, 1<<62)) >= 2*lossLimit &&
				len(r.asked[a].AskedIn(resumeAt, 1<<62)) >= lossAhead+1
		})
		r.end()
		servedA := 0
		for _, iv := range r.asked[a].AskedIn(resumeAt, 1<<62) {
			if iv.To > iv.From {
				servedA++
			}
		}
		t.Logf("replica a stopped for %v; asked %d times after it resumed, and served %d of them",
			time.Duration(resumeAt-stopAt), len(r.asked[a].AskedIn(resumeAt, 1<<62)), servedA)
		r.checkBound(stopAt, x, "paused")
	})
}
