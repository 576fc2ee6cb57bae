package redislimit

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The bookkeeper is lease mode's one goroutine, the Store's: it renews
// the batches that requests asked for ahead, returns the units of the
// batches they retired, returns every batch's unspent units at its
// deadline, and forgets each key once it has been idle for a TTL. It
// keeps every key in a heap by the next instant the key needs it, and
// sleeps until the first, or until a request asks for something sooner:
// with no lease held and nothing asked, it sleeps, whatever the number
// of policies and keys.

// deadline is one key in the bookkeeper's heap, due at its instant (lease
// ns).
type deadline struct {
	at int64
	st *leaseState
}

// deadlines is the bookkeeper's heap, the soonest first: a binary
// min-heap by at, written for its one element type so that a push boxes
// nothing.
type deadlines []deadline

// push adds d.
func (h *deadlines) push(d deadline) {
	*h = append(*h, d)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if q[p].at <= q[i].at {
			break
		}
		q[p], q[i] = q[i], q[p]
		i = p
	}
}

// pop removes and returns the soonest deadline; h must not be empty.
func (h *deadlines) pop() deadline {
	q := *h
	d := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q[n] = deadline{}
	q = q[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && q[l].at < q[m].at {
			m = l
		}
		if r := l + 1; r < n && q[r].at < q[m].at {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return d
}

// renewEvery is how often the bookkeeper takes the renewals asked for,
// for batches sized to last target ns: an eighth of it, between 100 µs
// and 5 ms.
func renewEvery(target int64) time.Duration {
	return time.Duration(max(int64(100*time.Microsecond), min(int64(5*time.Millisecond), target/8)))
}

// floor is the least time a bucket's batch must last to save round trips,
// ns (see check), and the renewal round it is counted in.
func (ls *leases) floor() (int64, time.Duration) {
	target := ls.ttl / 2 // a bucket's rules.target
	tick := renewEvery(target)
	return min(target, 8*int64(tick)), tick
}

// check refuses a lease that cannot save round trips on a rule of kind
// whose capacity is capacity and whose step is interval µs (see Lease):
// for the buckets, Max steps, and the whole burst, must last at least
// eight renewal rounds, or TTL/2 if that is shorter.
func (ls *leases) check(kind scriptKind, capacity, interval int64) error {
	if kind != kindBucket {
		return nil
	}
	step := interval * 1000
	floor, tick := ls.floor()
	why := fmt.Sprintf("a batch must last %v, eight rounds of renewal of %v each, or TTL/2 if shorter", time.Duration(floor), tick)
	if capacity*step < floor {
		return fmt.Errorf("redislimit: the rule's burst of %d lasts %v at %v per unit, and no leased unit of a bucket outlasts it: too short to save round trips (%s); raise Burst to at least %d, or turn lease mode off",
			capacity, time.Duration(capacity*step), time.Duration(step), why, ceilDiv(floor, step))
	}
	if need := ceilDiv(floor, step); ls.max < need {
		return fmt.Errorf("redislimit: Lease.Max %d lasts %v at %v per unit, too short to save round trips (%s); use at least %d",
			ls.max, time.Duration(ls.max*step), time.Duration(step), why, need)
	}
	return nil
}

// track hands a key new to the map to the bookkeeper, which keeps it
// until it is idle.
func (ls *leases) track(st *leaseState) {
	if ls.inline {
		return // the tests sweep by hand
	}
	ls.qmu.Lock()
	ls.fresh = append(ls.fresh, st)
	wake := len(ls.fresh) == 1
	ls.qmu.Unlock()
	if wake {
		ls.wake()
	}
}

// askRenewal asks the bookkeeper to take st's next batch ahead, under
// the rule rs, within a renewal round of now. In the tests' inline mode
// it is taken at once.
func (ls *leases) askRenewal(st *leaseState, rs *rules, now int64) {
	if ls.inline {
		ls.renewAhead([]*leaseState{st})
		return
	}
	ls.qmu.Lock()
	ls.renew = append(ls.renew, st)
	ls.dueBy(now + int64(renewEvery(rs.target)))
}

// queueBack hands b, units to go back to Redis, to the bookkeeper, which
// returns them within a renewal round; or to Close, if it has begun. The
// bookkeeper far behind, they lapse, which under-admits.
func (ls *leases) queueBack(b giveBack) {
	if b.units <= 0 {
		return
	}
	if ls.inline {
		ls.returnNow([]giveBack{b})
		return
	}
	ls.mu.Lock() // a batch's retirement, not a request: once per batch at most
	if ls.closing {
		ls.toClose([]giveBack{b})
		ls.mu.Unlock()
		return
	}
	ls.mu.Unlock()
	now, _ := ls.s.leaseNow()
	ls.qmu.Lock()
	if len(ls.back) >= 1<<16 {
		ls.qmu.Unlock()
		ls.lapsed.Add(b.units)
		return
	}
	ls.back = append(ls.back, b)
	ls.dueBy(now + int64(renewEvery(b.p.rs().target)))
}

// dueBy has the bookkeeper take its queued renewals and returns by due
// (lease ns), waking it if it would take them later; ls.qmu is held, and
// released.
func (ls *leases) dueBy(due int64) {
	wake := ls.due == 0 || due < ls.due
	if wake {
		ls.due = due
	}
	ls.qmu.Unlock()
	if wake {
		ls.wake()
	}
}

// wake has the bookkeeper look at its inbox.
func (ls *leases) wake() {
	select {
	case ls.kick <- struct{}{}:
	default: // a wake is pending already
	}
}

// bookkeeper is lease mode's goroutine (see the top of this file), until
// Close.
func (ls *leases) bookkeeper() {
	defer close(ls.done)
	var h deadlines
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		now, _ := ls.s.leaseNow()
		ls.qmu.Lock()
		fresh := ls.fresh
		ls.fresh = nil
		var renew []*leaseState
		var back []giveBack
		if ls.due != 0 && now >= ls.due {
			renew, back = ls.renew, ls.back
			ls.renew, ls.back, ls.due = nil, nil, 0
		}
		due := ls.due
		ls.qmu.Unlock()
		for _, st := range fresh {
			h.push(deadline{at: now + ls.ttl/2, st: st})
		}
		if len(back) > 0 {
			ls.returnNow(back)
		}
		if len(renew) > 0 {
			for start := 0; start < len(renew); start += 512 {
				ls.renewAhead(renew[start:min(len(renew), start+512)])
			}
		}
		var out []giveBack
		for len(h) > 0 && h[0].at <= now {
			d := h.pop()
			var next int64
			out, next = ls.sweepKey(d.st, now, out)
			if next > 0 {
				h.push(deadline{at: next, st: d.st})
			}
		}
		if len(out) > 0 {
			ls.returnNow(out)
		}
		wait := int64(math.MaxInt64)
		if len(h) > 0 {
			wait = h[0].at - now
		}
		if due != 0 {
			wait = min(wait, due-now)
		}
		var tick <-chan time.Time
		if wait != math.MaxInt64 {
			timer.Reset(time.Duration(max(wait, int64(100*time.Microsecond))))
			tick = timer.C
		}
		select {
		case <-ls.stop:
			timer.Stop()
			return
		case <-ls.kick:
		case <-tick:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// sweepKey is the bookkeeper's work on one key at now: the batches whose
// time is up go back (appended to out), and a key idle for a TTL that
// holds nothing is forgotten. It returns when the key is next due, or 0
// once it is forgotten: at its next batch's end, when it would have been
// idle for a TTL, when its cached denial ends, and a TTL/2 from now at
// the latest.
func (ls *leases) sweepKey(st *leaseState, now int64, out []giveBack) ([]giveBack, int64) {
	if st.dead.Load() {
		return out, 0
	}
	rs := st.p.rs()
	for _, slot := range []*atomic.Pointer[grant]{&st.g, &st.next} {
		// The lease itself only while no refill holds it.
		g := slot.Load()
		if g == nil || (now < g.until && g.gen == rs.gen) || (slot == &st.g && st.flight.Load() != nil) {
			continue
		}
		if slot.CompareAndSwap(g, nil) {
			if g.gen != rs.gen {
				ls.lapse(g) // leased under a rule changed since
				continue
			}
			out = ls.appendBack(out, st, g, now)
		}
	}
	g, nx := st.g.Load(), st.next.Load()
	if g == nil && nx == nil && st.flight.Load() == nil && now-st.lastUsed.Load() >= ls.ttl && now >= st.deniedUntil.Load() {
		// Claim the key's flight, so that no refill can install a lease on
		// a state that is being dropped; a dropped state keeps it, and a
		// caller that finds it dead looks the key up again.
		f := &flight{done: make(chan struct{})}
		if st.flight.CompareAndSwap(nil, f) {
			dropped := st.g.Load() == nil && st.next.Load() == nil && ls.drop(st)
			if !dropped {
				st.flight.Store(nil)
			}
			close(f.done)
			if dropped {
				return out, 0
			}
		}
	}
	next := now + ls.ttl/2
	for _, g := range []*grant{g, nx} {
		if g != nil {
			next = min(next, g.until)
		}
	}
	if g == nil && nx == nil {
		next = min(next, max(st.lastUsed.Load()+ls.ttl, st.deniedUntil.Load()))
	}
	return out, max(next, now+1)
}

// sweep is the bookkeeper's sweep of every key at now, at once: the
// tests' (inline mode), whose clock the bookkeeper's timer does not
// follow.
func (ls *leases) sweep(now int64) {
	var out []giveBack
	ls.states.Range(func(_ uint64, st *leaseState) bool {
		out, _ = ls.sweepKey(st, now, out)
		return true
	})
	ls.returnNow(out)
}

// renewAhead takes the next batch of each key, in one pipeline, before
// its lease runs out, so that its requests need not wait for a round
// trip. A key that already has one, or whose state is gone, is skipped;
// while the breaker is open nothing is asked.
func (ls *leases) renewAhead(sts []*leaseState) {
	s := ls.s
	if s.breaker.openUntil.Load() != closed || !ls.enter() {
		return
	}
	defer ls.exit()
	now, skew := s.leaseNow()
	type ask struct {
		st  *leaseState
		rs  *rules
		cmd *redis.Cmd
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.set.timeout)
	defer cancel()
	var asks []ask
	pipe := s.client.Pipeline()
	for _, st := range sts {
		if st.dead.Load() || st.next.Load() != nil || st.p.closed.Load() {
			continue
		}
		rs := st.p.rs()
		g := st.g.Load()
		spent, held := int64(0), int64(0)
		if g != nil && g.gen == rs.gen {
			u := max(0, g.units.Load())
			spent = g.taken - u - g.decayed.Load()
			held = ls.usable(g, u, now, skew) // a lease whose time is up holds nothing that counts against Max
		} else {
			g = nil
		}
		want := min(ls.want(rs, st, g, spent, now), ls.max-held) // Max bounds the two batches together
		if want <= 0 {
			continue
		}
		cmd := redis.NewCmd(ctx, st.p.args(st.rkey, call{want: want, rs: rs})...)
		_ = pipe.Process(ctx, noRetry{cmd})
		asks = append(asks, ask{st, rs, cmd})
		st.p.flights.Add(1) // its Close waits for the batch, and returns it
	}
	defer func() {
		for _, a := range asks {
			a.st.p.flights.Add(-1)
		}
	}()
	if len(asks) == 0 {
		return
	}
	s.calls.Add(1)
	ls.renewals.Add(int64(len(asks)))
	_, _ = pipe.Exec(ctx)
	var firstErr error
	for _, a := range asks {
		cmd := a.cmd
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			cmd, _ = s.eval(ctx, func(ctx context.Context, c redis.Cmder) error {
				return s.client.Process(ctx, noRetry{c})
			}, cmd.Args(), a.st.p.script.src)
		}
		if err := cmd.Err(); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue // a refill will ask again, when the lease runs out
		}
		r, err := readReply(cmd, a.rs)
		if err != nil || r.extra == 0 {
			continue
		}
		ls.leased.Add(r.extra)
		a.st.batch.Store(r.extra)
		ng := ls.newGrant(a.st.p.kind, r, now, skew)
		if !a.st.next.CompareAndSwap(nil, ng) {
			ls.giveBackNow(a.st, ng, now)
			continue
		}
		// Checked after the batch is in place, as install does: a SetRule
		// makes it unusable, and what it cannot find yet is seen here.
		if ls.closed.Load() || a.st.dead.Load() || ng.gen != a.st.p.rs().gen {
			if a.st.next.CompareAndSwap(ng, nil) {
				ls.giveBackNow(a.st, ng, now)
			}
		}
	}
	if firstErr != nil {
		s.failed(firstErr) // the round trip failed, for one key or all
	}
}
