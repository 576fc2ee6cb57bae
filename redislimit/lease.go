package redislimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/puzpuzpuz/xsync/v4"
	"github.com/redis/go-redis/v9"
)

// Lease configures lease mode (see Config.Lease).
//
// In lease mode a replica takes a key's allowance from Redis in batches,
// each in the round trip of the request that needed it: the script
// charges the batch exactly as it would admit that many requests (the
// buckets' TAT moves by as many steps, the window's count grows by as many
// units, the log holds one entry of as many units, stamped 100 ms ahead,
// or TTL/2 or Period if shorter), and the replica then spends it in
// process, with one CAS on an atomic word and no round trip. Every unit
// admitted was taken from Redis first, so the replicas together never pass
// more than the rule; a replica that dies loses its unspent units (its
// clients get less, never more).
//
// A batch is sized by the key's local rate: about what the key spends here
// in half a TTL (500 ms by default), at most four times the previous
// batch, and at most Max. A bucket's batch is at least half a TTL of the
// rule's steps, since from a full bucket a batch of k lasts k steps. Redis grants at most an eighth of what
// would remain after the request, so a key's allowance is shared out ever
// more finely as it runs low, and its last 8 units go one request at a
// time: no replica can sit on the remainder while another is refused.
//
// A unit stays spendable for TTL at most, and never past the instant Redis
// would have given it back anyway: for the buckets, once the debt the
// batch created is paid off (one unit per step); for the windows, once the
// window it was charged to ends; for the log, once its entry's stamp is
// reached (from then on Redis counts it for a whole Period, as if it had
// been spent at the last moment). These times, and a cached denial's, are
// kept on this machine's monotonic clock, which runs with Redis's, and
// count from the sending of the round trip that took the batch (a µs
// early, for Redis's whole µs), so they end no later than Redis's own;
// Config.Clock plays no part, so that a clock that lags cannot keep a unit
// spendable after Redis stopped counting it. (A machine whose clock runs
// slower than Redis's by a fraction f keeps a unit up to f of its time too
// long: NTP keeps f below a thousandth.) Unspent units whose key goes
// quiet are returned to Redis after TTL, and all of them by Close, which
// waits for the round trips in flight first.
//
// New and SetRule refuse a Lease that cannot save round trips. A bucket's
// unit is spendable only while the debt it created is unpaid, so a batch
// of Max lasts Max steps (Period/Limit each) at most, however few of them
// the key spends, and never longer than the rule's whole burst. A batch is
// renewed ahead when a quarter of it is left, by a goroutine that takes
// the renewals in rounds of TTL/16 (between 100 µs and 5 ms), so that
// quarter must span two rounds, one to collect the renewal and one for its
// round trip: Max steps, and the burst, must last eight rounds, or TTL/2 if
// that is shorter: 40 ms with the default TTL. Shorter, the next batch
// comes after the last has lapsed, and each request's refill takes a batch
// it mostly loses: at 1,000,000 a second, 8 goroutines on 300 keys made a
// round trip per request with Max 1,024 (1.024 ms of steps), as many as
// without leases, and one per 1,400 requests with Max 40,000. The error
// names the least Max (or Burst) that lasts so long. The windows and the log
// need no such floor: there a batch stays spendable to its window's end
// (the log: its hold, 100 ms at most) whatever its size, so a key makes a
// round trip about once per batch of Max units, and once per window edge;
// a Max small beside a key's rate saves little, but costs no more than
// deciding each request, and is taken.
//
// A busy key's requests do not wait for its next batch: when three
// quarters of a batch, or of its time, is gone, the request that sees it
// asks the Limiter's one background goroutine to take the next batch
// ahead, and that goroutine takes the batches of every key that asked, in
// one pipeline, every few milliseconds. A request finds the next batch waiting when the current
// one runs out; only a key whose batch ran out before its renewal came
// (a burst, or a new key) refills in the request's own round trip.
type Lease struct {
	// Max is the most units one replica holds for a key at once (its
	// batch and the next, taken ahead, together); 0 turns lease mode
	// off: every decision is a round trip. For the buckets, Max steps of
	// the rule must last eight renewal rounds, or TTL/2 if shorter (40 ms
	// with the default TTL: 40,000 at 1,000,000 a second); New refuses
	// less, and says how much.
	Max int64
	// TTL is how long a leased unit may stay unspent before it is
	// returned to Redis; 0 means 1s.
	TTL time.Duration
}

const (
	defaultLeaseTTL = time.Second
	logHold         = 100 * time.Millisecond // the longest a log's batch is stamped ahead
	leaseGrowth     = 4                      // a batch is at most this many times the last
	leaseSpare      = 64                     // a batch takes at least this share of what Redis had left
)

// leaseNow is lease mode's clock, in ns ("lease ns"), which times every
// batch, cached denial and idle key: the monotonic time since New, which
// runs with Redis's clock, since both count real time (the tests' stand-in
// for Redis's clock, when one is set). It is never Config.Clock: a batch
// timed on a clock that lags Redis's (a coarse clock, a stalled one) would
// stay spendable after Redis stopped counting its units, and the replicas
// together would pass the rule.
func (l *Limiter) leaseNow() int64 {
	if l.redisClock != nil {
		return l.redisClock.Now()
	}
	return int64(time.Since(l.lease.base))
}

// leases is lease mode's state: one leaseState per key, at most bound of
// them, and one goroutine (the sweeper) that renews busy keys' batches
// ahead, returns what keys left unspent and drops idle keys.
type leases struct {
	max, ttl   int64     // units; ns
	base       time.Time // lease ns count from here (see leaseNow)
	states     *xsync.Map[string, *leaseState]
	size       atomic.Int64
	bound      int64
	closed     atomic.Bool
	stop, done chan struct{}
	renew      chan string   // keys whose lease runs low, for the sweeper to renew ahead
	back       chan giveBack // retired batches' units, for the sweeper to return
	inline     bool          // tests: renew and return on the caller's goroutine
	once       sync.Once
	err        error

	// Close's hand-over, under mu. closing says Close has begun; flights
	// counts lease mode's round trips in flight (refills, renewals,
	// returns), and idle closes when the last ends once Close waits for
	// them. late holds the units handed back after Close began, for Close
	// to return; lateLost and lateErr, what returns in flight failed to
	// return meanwhile. finished says Close has taken what it returns:
	// what comes back later lapses.
	mu                sync.Mutex
	closing, finished bool
	flights           int
	idle              chan struct{}
	late              []giveBack
	lateLost          int64
	lateErr           error

	leased, returned, lapsed atomic.Int64
	refills, renewals        atomic.Int64
}

// leaseState is one key's lease in this replica. g is the batch being
// spent, and next the one renewed ahead, which replaces g when g cannot
// serve a request.
type leaseState struct {
	g           atomic.Pointer[grant]
	next        atomic.Pointer[grant]
	flight      atomic.Pointer[flight]
	deniedUntil atomic.Int64 // a cached denial holds until then (lease ns)
	deniedCost  atomic.Int64 // for costs of at least this
	deniedRetry atomic.Int64 // its RetryAfter's end (lease ns)
	deniedReset atomic.Int64 // its ResetAfter's end (lease ns)
	lastUsed    atomic.Int64 // lease ns
	waiting     atomic.Int64 // the cost waiting for the refill in flight
	dead        atomic.Bool  // dropped from the map by the sweeper
	batch       atomic.Int64 // the last batch's size
	pending     atomic.Int64 // the cost that waited for the last refill
}

// grant is one batch: units left, spendable while now < until and, for
// the buckets, while units ≤ (top-now)/step.
type grant struct {
	units     atomic.Int64
	decayed   atomic.Int64 // units whose debt was paid before they were spent
	gen       int64        // the rule it was leased under (rules.gen)
	limit     int64        // that rule's capacity
	step      int64        // that rule's ns per unit, for the buckets; 0 for the others
	top       int64        // buckets: the lease ns at which the batch's debt is paid
	until     int64        // lease ns: the end of TTL, or of the window, or the log entry's stamp
	k         int64        // the window the units were charged to, the log entry's stamp, or the buckets' TAT on Redis's clock
	at        int64        // lease ns of the round trip that took it
	taken     int64        // units in the batch
	remaining int64        // Redis's remaining after the grant
	resetAt   int64        // lease ns at which Redis would hold the key fresh
	low       int64        // below this many units, the batch is renewed ahead
	renewAt   int64        // lease ns from which it is renewed ahead
	windowEnd bool         // a fixed window's batch that ends with its window: once over, nothing of it goes back
	asked     atomic.Bool  // its renewal was asked for
	reasked   atomic.Bool  // asked for again once it could serve nothing (see Store.askLeases)
}

// retiredUnits is what a grant's units hold once they are taken out of
// it (drained, lapsed, or held by a refill): below any count, so that a
// unit put back after that is not added to units that nobody will return
// (see putBack).
const retiredUnits = math.MinInt64 / 4

// putBack puts n units, spent from g for a request that was then
// refused, back where they are spent or returned: into g while it holds
// its units, else to Redis, as g's retirement returns its own.
func (l *Limiter) putBack(key string, g *grant, n int64) {
	for {
		u := g.units.Load()
		if u < 0 {
			l.retireUnits(key, g, n, l.leaseNow())
			return
		}
		if g.units.CompareAndSwap(u, u+n) {
			return
		}
	}
}

// flight is one refill in progress: done closes when it is over.
type flight struct{ done chan struct{} }

// usable returns how many of g's units may be spent at now, given u held.
func (ls *leases) usable(g *grant, u, now int64) int64 {
	if now >= g.until || u <= 0 {
		return 0
	}
	if g.step > 0 {
		if g.top <= now {
			return 0
		}
		if c := (g.top - now) / g.step; c < u {
			return c
		}
	}
	return u
}

// spend takes n units from g at now, if it holds them, and says how many
// are left.
func (ls *leases) spend(g *grant, n, now int64) (int64, bool) {
	for {
		u := g.units.Load()
		c := ls.usable(g, u, now)
		if c < n {
			return 0, false
		}
		if g.units.CompareAndSwap(u, c-n) {
			if c < u {
				g.decayed.Add(u - c) // rare: only as a batch outlives its debt
			}
			return c - n, true
		}
	}
}

// take serves a request of cost n at now from the key's lease, or from
// the batch renewed ahead, which then becomes the lease; and asks for the
// next batch ahead when the lease runs low.
func (l *Limiter) take(key string, st *leaseState, n, now int64) (*grant, int64, bool) {
	ls := l.lease
	g := st.g.Load()
	for range 2 {
		if g != nil {
			if rest, ok := ls.spend(g, n, now); ok {
				if (rest < g.low || now >= g.renewAt) && !g.asked.Load() && g.asked.CompareAndSwap(false, true) {
					if ls.inline {
						l.renewAhead([]string{key})
					} else {
						select {
						case ls.renew <- key:
						default: // the sweeper is busy: a refill will take the next batch
						}
					}
				}
				return g, rest, true
			}
		}
		nx := st.next.Load()
		if nx == nil || nx == g || !st.g.CompareAndSwap(g, nx) {
			return nil, 0, false
		}
		st.next.CompareAndSwap(nx, nil)
		if g != nil {
			l.retire(key, g, now)
		}
		g = nx
	}
	return nil, 0, false
}

// retire empties a batch that the next one replaced (what it held was too
// little for a request), and has the sweeper return what it held.
func (l *Limiter) retire(key string, g *grant, now int64) {
	ls := l.lease
	if ls.inline {
		l.giveBackNow(key, g, now)
		return
	}
	l.sendBack(key, ls.drain(g, now))
}

// retireUnits returns n units of g, which no longer holds them, as
// retire returns a grant's.
func (l *Limiter) retireUnits(key string, g *grant, n, now int64) {
	b := l.lease.returnable(g, n, now)
	if l.lease.inline {
		b.key = key
		l.returnNow([]giveBack{b})
		return
	}
	l.sendBack(key, b)
}

// sendBack hands b, units of key, to the sweeper to return to Redis.
func (l *Limiter) sendBack(key string, b giveBack) {
	ls := l.lease
	if b.units == 0 {
		return
	}
	b.key = key
	ls.mu.Lock() // a batch's retirement, not a request: once per batch at most
	defer ls.mu.Unlock()
	if ls.closing {
		ls.toClose([]giveBack{b})
		return
	}
	select {
	case ls.back <- b:
	default:
		ls.lapsed.Add(b.units) // the sweeper is far behind: these are lost, which under-admits
	}
}

// enter counts a round trip of lease mode that Close must wait for, and
// says false once Close has begun: the caller then takes nothing, and
// hands what it would return to Close (see returnNow).
func (ls *leases) enter() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closing {
		return false
	}
	ls.flights++
	return true
}

// exit ends a round trip that enter counted.
func (ls *leases) exit() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.flights--
	if ls.flights == 0 && ls.idle != nil {
		close(ls.idle)
		ls.idle = nil
	}
}

// toClose hands back to Close, which has begun, units for it to return;
// once it has taken what it returns, they lapse. ls.mu is held.
func (ls *leases) toClose(back []giveBack) {
	if ls.finished {
		for _, b := range back {
			ls.lapsed.Add(b.units)
		}
		return
	}
	ls.late = append(ls.late, back...)
}

// returnNow returns units to Redis at once, as one of lease mode's round
// trips in flight, or hands them to Close if it has begun. What fails to
// go back while Close waits counts in Close's error.
func (l *Limiter) returnNow(back []giveBack) {
	if len(back) == 0 {
		return
	}
	ls := l.lease
	if !ls.enter() {
		ls.mu.Lock()
		ls.toClose(back)
		ls.mu.Unlock()
		return
	}
	defer ls.exit()
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	if lost, err := l.giveBack(ctx, back); lost > 0 {
		ls.mu.Lock()
		if ls.closing && !ls.finished {
			ls.lateLost += lost
			ls.lateErr = cmp.Or(ls.lateErr, err)
		}
		ls.mu.Unlock()
	}
}

func newLeases(cfg Lease, bound int) *leases {
	ttl := orDefault(cfg.TTL, defaultLeaseTTL)
	return &leases{max: cfg.Max, ttl: int64(ttl), base: time.Now(),
		states: xsync.NewMap[string, *leaseState](), bound: int64(bound),
		stop: make(chan struct{}), done: make(chan struct{}), renew: make(chan string, 4096), back: make(chan giveBack, 4096)}
}

// sweeper is lease mode's one goroutine, until Close: every TTL/2 it
// returns the leases that keys left unspent and drops idle keys, and every
// few milliseconds it renews the batches that requests asked for and
// returns the batches they retired.
func (l *Limiter) sweeper() {
	ls := l.lease
	defer close(ls.done)
	t := time.NewTicker(time.Duration(max(ls.ttl/2, int64(time.Millisecond))))
	defer t.Stop()
	// Renewals and returns are collected on a tick of their own rather
	// than as each is asked for: a send that woke this goroutine would cost
	// the request a futex call, and a renewal asked for with a quarter of
	// the batch left can wait a few milliseconds.
	r := time.NewTicker(renewEvery(l.rs().target))
	defer r.Stop()
	for {
		select {
		case <-ls.stop:
			return
		case <-t.C:
			l.sweep(l.leaseNow())
		case <-r.C:
			for len(ls.back) > 0 {
				back := make([]giveBack, 0, min(len(ls.back), 512))
				for len(back) < cap(back) {
					back = append(back, <-ls.back)
				}
				l.returnNow(back)
			}
			for len(ls.renew) > 0 {
				keys := make([]string, 0, min(len(ls.renew), 512))
				for len(keys) < cap(keys) {
					keys = append(keys, <-ls.renew)
				}
				l.renewAhead(keys)
			}
		}
	}
}

// renewEvery is how often the sweeper takes the renewals asked for, for
// batches sized to last target ns: an eighth of it, between 100 µs and 5
// ms.
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

// renewAhead takes the next batch of each key, in one pipeline, before
// its lease runs out, so that its requests need not wait for a round
// trip. A key that already has one, or whose state is gone, is skipped;
// while the breaker is open nothing is asked.
func (l *Limiter) renewAhead(keys []string) {
	ls := l.lease
	if l.breaker.openUntil.Load() != closed || !ls.enter() {
		return
	}
	defer ls.exit()
	now := l.leaseNow()
	type ask struct {
		key string
		st  *leaseState
		cmd *redis.Cmd
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	var asks []ask
	rs := l.rs()
	pipe := l.client.Pipeline()
	for _, key := range keys {
		st, ok := ls.states.Load(key)
		if !ok || st.dead.Load() || st.next.Load() != nil {
			continue
		}
		g := st.g.Load()
		spent, held := int64(0), int64(0)
		if g != nil {
			u := max(0, g.units.Load())
			spent = g.taken - u - g.decayed.Load()
			held = ls.usable(g, u, now) // a lease whose time is up holds nothing that counts against Max
		}
		want := min(ls.want(rs, st, g, spent, now), ls.max-held) // Max bounds the two batches together
		if want <= 0 {
			continue
		}
		cmd := redis.NewCmd(ctx, l.args(key, call{want: want, rs: rs})...)
		_ = pipe.Process(ctx, noRetry{cmd})
		asks = append(asks, ask{key, st, cmd})
	}
	if len(asks) == 0 {
		return
	}
	l.calls.Add(1)
	ls.renewals.Add(int64(len(asks)))
	_, _ = pipe.Exec(ctx)
	var firstErr error
	defer func() {
		if firstErr != nil {
			l.failed(firstErr) // the round trip failed, for one key or all
		}
	}()
	for _, a := range asks {
		cmd := a.cmd
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			cmd, _ = l.eval(ctx, func(ctx context.Context, c redis.Cmder) error {
				return l.client.Process(ctx, noRetry{c})
			}, cmd.Args())
		}
		if err := cmd.Err(); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue // a refill will ask again, when the lease runs out
		}
		r, err := l.reply(cmd, rs)
		if err != nil || r.extra == 0 {
			continue
		}
		ls.leased.Add(r.extra)
		a.st.batch.Store(r.extra)
		ng := l.newGrant(r, now)
		if !a.st.next.CompareAndSwap(nil, ng) {
			l.giveBackNow(a.key, ng, now)
			continue
		}
		// Checked after the batch is in place, as install does: SetRule
		// retires what it finds, and what it cannot find yet is seen here.
		if cur, ok := ls.states.Load(a.key); ls.closed.Load() || !ok || cur != a.st || ng.gen != l.rs().gen {
			if a.st.next.CompareAndSwap(ng, nil) {
				l.giveBackNow(a.key, ng, now)
			}
		}
	}
}

// newGrant is the batch of reply r, to a call sent at now (lease ns). Its
// time counts from the sending, in the whole µs that Redis's clock counts:
// Redis ran the call later, so the lease ends no later than Redis's count
// does.
func (l *Limiter) newGrant(r reply, now int64) *grant {
	ls := l.lease
	sent := now / 1000 * 1000
	g := &grant{at: now, taken: r.extra, remaining: r.d.Remaining, k: r.k, gen: r.rs.gen, limit: r.rs.capacity, step: r.rs.step,
		until: now + min(ls.ttl, math.MaxInt64-now), resetAt: now + int64(r.d.ResetAfter)}
	if g.step > 0 {
		g.top = sent + r.horizon*1000
		g.k = r.k + r.horizon // the TAT on Redis's clock
	} else {
		g.until = min(g.until, sent+r.horizon*1000)
	}
	g.units.Store(r.extra)
	// Renew ahead once three quarters of the batch, or of its time, is
	// gone.
	g.low = max(1, r.extra/4)
	end := g.until
	if g.step > 0 {
		end = min(end, g.top)
	}
	g.renewAt = now + (end-now)/4*3
	if l.kind != kindLog && g.step == 0 && g.until-now < ls.ttl {
		// A window's batch that ends with its window: a batch renewed
		// ahead in time would end with it too, so only running low
		// renews it.
		g.renewAt = math.MaxInt64
		g.windowEnd = l.kind == kindFixedWindow
	}
	return g
}

// giveBackNow returns g's units to Redis at once, or has Close return
// them if it has begun.
func (l *Limiter) giveBackNow(key string, g *grant, now int64) {
	l.returnNow(l.lease.appendBack(nil, key, g, now))
}

// sweep returns the units of every lease whose TTL ran out by now, and
// forgets the keys idle for a TTL that hold nothing.
func (l *Limiter) sweep(now int64) {
	ls := l.lease
	var back []giveBack
	ls.states.Range(func(key string, st *leaseState) bool {
		for _, p := range []*atomic.Pointer[grant]{&st.g, &st.next} {
			// The lease itself only while no refill holds it.
			if g := p.Load(); g != nil && now >= g.until && (p == &st.next || st.flight.Load() == nil) && p.CompareAndSwap(g, nil) {
				back = ls.appendBack(back, key, g, now)
			}
		}
		if st.g.Load() == nil && st.next.Load() == nil && st.flight.Load() == nil && now-st.lastUsed.Load() >= ls.ttl && now >= st.deniedUntil.Load() {
			// Claim the key's flight, so that no refill can install a
			// lease on a state that is being dropped; a dropped state keeps
			// it, and a caller that finds it dead looks the key up again.
			f := &flight{done: make(chan struct{})}
			if st.flight.CompareAndSwap(nil, f) {
				if st.g.Load() == nil && st.next.Load() == nil {
					st.dead.Store(true)
					ls.states.Delete(key)
					ls.size.Add(-1)
				} else {
					st.flight.Store(nil)
				}
				close(f.done)
			}
		}
		return true
	})
	l.returnNow(back)
}

// giveBack is what a drained grant returns to Redis, under the rule of
// gen.
type giveBack struct {
	key           string
	units, k, gen int64
}

// drain empties g, which nobody can reach any more but a goroutine
// already in spend, and says what of it may go back to Redis at now: for
// the buckets, the units whose debt is not yet paid (the rest Redis has
// given back already); for the windows, every unit, to the window it was
// charged to (the script ignores a window the key no longer holds); for
// the log, every unit, to the entry stamped k (likewise).
func (ls *leases) drain(g *grant, now int64) giveBack {
	u := g.units.Swap(retiredUnits)
	if g.decayed.Load() != 0 {
		ls.lapsed.Add(g.decayed.Swap(0))
	}
	return ls.returnable(g, u, now)
}

// returnable is what of u units of g goes back to Redis at now, which it
// counts; the rest, whose time passed (a bucket's debt paid), lapses.
func (ls *leases) returnable(g *grant, u, now int64) giveBack {
	if u <= 0 {
		return giveBack{}
	}
	if g.windowEnd && now >= g.until {
		// Its window is over: the script would give nothing back to it
		// (a round trip for nothing), and the next window owes it nothing.
		ls.lapsed.Add(u)
		return giveBack{}
	}
	back := u
	if g.step > 0 {
		back = 0
		if g.top > now {
			back = min(u, (g.top-now)/g.step)
		}
	}
	ls.lapsed.Add(u - back)
	return giveBack{units: back, k: g.k, gen: g.gen}
}

// lapse empties g, which nobody can reach any more, and counts all it
// held as lapsed.
func (ls *leases) lapse(g *grant) {
	ls.lapsed.Add(max(0, g.units.Swap(retiredUnits)) + g.decayed.Swap(0))
}

// appendBack drains g, which nobody can reach any more, and appends what
// of it goes back to Redis for key.
func (ls *leases) appendBack(back []giveBack, key string, g *grant, now int64) []giveBack {
	if b := ls.drain(g, now); b.units > 0 {
		b.key = key
		back = append(back, b)
	}
	return back
}

// giveBack returns units to Redis in one pipeline, and says how many
// could not be, with the first error: those are lost, which under-admits,
// and count as lapsed.
func (l *Limiter) giveBack(ctx context.Context, back []giveBack) (int64, error) {
	ls := l.lease
	// Units leased under a rule changed since lapse: the keys they were
	// charged to are converted, or will be, and take no return.
	rs := l.rs()
	kept := back[:0:0]
	for _, b := range back {
		if b.gen != rs.gen {
			ls.lapsed.Add(b.units)
			continue
		}
		kept = append(kept, b)
	}
	back = kept
	var lost int64
	var firstErr error
	for start := 0; start < len(back); start += 512 {
		part := back[start:min(len(back), start+512)]
		pipe := l.client.Pipeline()
		cmds := make([]*redis.Cmd, len(part))
		for i, b := range part {
			cmds[i] = redis.NewCmd(ctx, l.args(b.key, call{give: b.units, gk: b.k, rs: rs})...)
			_ = pipe.Process(ctx, noRetry{cmds[i]})
		}
		l.calls.Add(1)
		_, _ = pipe.Exec(ctx)
		for i, b := range part {
			err := cmds[i].Err()
			if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
				_, err = l.eval(ctx, func(ctx context.Context, cmd redis.Cmder) error {
					return l.client.Process(ctx, noRetry{cmd})
				}, cmds[i].Args())
			}
			if err != nil {
				lost += b.units
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			ls.returned.Add(b.units)
		}
	}
	if firstErr != nil {
		l.failed(firstErr)
		ls.lapsed.Add(lost)
	}
	return lost, firstErr
}

// closeLeases is Close's work in lease mode, once: it stops the sweeper
// and new round trips of lease mode, waits for those in flight (refills,
// renewals, returns) within Timeout, and then returns every unspent unit,
// theirs too, within another Timeout.
func (l *Limiter) closeLeases() error {
	ls := l.lease
	ls.once.Do(func() {
		ls.mu.Lock()
		ls.closing = true
		ls.closed.Store(true)
		var idle chan struct{}
		if ls.flights > 0 {
			idle = make(chan struct{})
			ls.idle = idle
		}
		ls.mu.Unlock()
		close(ls.stop)
		<-ls.done
		if idle != nil {
			timer := time.NewTimer(l.timeout)
			select {
			case <-idle:
			case <-timer.C:
			}
			timer.Stop()
		}
		back := l.drainAll()
		ls.mu.Lock()
		ls.finished = true
		stuck := ls.flights
		back = append(back, ls.late...)
		ls.late = nil
		for len(ls.back) > 0 {
			back = append(back, <-ls.back)
		}
		lost, firstErr := ls.lateLost, ls.lateErr
		ls.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
		defer cancel()
		n, err := l.giveBack(ctx, back)
		lost, firstErr = lost+n, cmp.Or(firstErr, err)
		var errs []error
		if lost > 0 {
			errs = append(errs, fmt.Errorf("redislimit: %d leased units could not be returned (the rule under-admits by as many until their time passes): %w", lost, firstErr))
		}
		if stuck > 0 {
			errs = append(errs, fmt.Errorf("redislimit: %d round trips of lease mode were still running after Timeout (%v); what they take lapses", stuck, l.timeout))
		}
		ls.err = errors.Join(errs...)
	})
	return ls.err
}

// drainAll empties every lease and says what goes back.
func (l *Limiter) drainAll() []giveBack {
	ls := l.lease
	now := l.leaseNow()
	var back []giveBack
	ls.states.Range(func(key string, st *leaseState) bool {
		for _, p := range []*atomic.Pointer[grant]{&st.g, &st.next} {
			if g := p.Swap(nil); g != nil {
				back = ls.appendBack(back, key, g, now)
			}
		}
		return true
	})
	return back
}

// leaseAllow decides a request of cost n in lease mode: from the key's
// lease when it holds n units, from a cached denial, or by a refill. It
// returns the decision's result too, for AppendCounts.
func (l *Limiter) leaseAllow(ctx context.Context, key string, n int64) (floodgate.Decision, result, error) {
	ls := l.lease
	now := l.leaseNow()
	st, ok := ls.states.Load(key)
	if ok {
		if g, rest, ok := l.take(key, st, n, now); ok {
			return l.fromLease(g, rest, now), resAllowed, nil // lastUsed is for keys with no lease: it is not written here
		}
		if d, ok := l.cachedDenial(st, n, now); ok {
			return d, resDenied, nil
		}
	} else {
		// A place for the key is taken before it is made, so that racing
		// goroutines cannot pass the bound between them.
		if ls.closed.Load() || ls.size.Add(1) > ls.bound {
			if !ls.closed.Load() {
				ls.size.Add(-1)
			}
			r, err := l.decide(ctx, key, call{n: n})
			return r.d, r.res, err
		}
		var loaded bool
		if st, loaded = ls.states.LoadOrStore(key, &leaseState{}); loaded {
			ls.size.Add(-1)
		}
	}
	st.lastUsed.Store(now)
	return l.refill(ctx, key, st, n)
}

// fromLease is the decision for a request served from g at now, which
// left rest units in it: Remaining is what Redis had left at the grant and
// what g holds.
func (l *Limiter) fromLease(g *grant, rest, now int64) floodgate.Decision {
	return floodgate.Decision{Allowed: true, Limit: g.limit, Remaining: g.remaining + rest,
		ResetAfter: time.Duration(max(0, g.resetAt-now))}
}

// cachedDenial answers a request of cost n from the key's last denial
// while it holds.
func (l *Limiter) cachedDenial(st *leaseState, n, now int64) (floodgate.Decision, bool) {
	until := st.deniedUntil.Load()
	if now >= until || n < st.deniedCost.Load() {
		return floodgate.Decision{}, false
	}
	return floodgate.Decision{Limit: l.rs().capacity, RetryAfter: time.Duration(max(1, st.deniedRetry.Load()-now)),
		ResetAfter: time.Duration(max(0, st.deniedReset.Load()-now))}, true
}

// errLeaseWait is the wait for another goroutine's refill running out of
// Timeout.
var errLeaseWait = errors.New("redislimit: the key's refill outlasted Timeout")

// refill decides a request of cost n that the key's lease cannot serve:
// one goroutine per key at a time (the leader) takes the next batch in the
// round trip that decides its request; the others wait for it, within
// Timeout, and try the new batch.
func (l *Limiter) refill(ctx context.Context, key string, st *leaseState, n int64) (floodgate.Decision, result, error) {
	ls := l.lease
	var deadline time.Time
	for {
		if st.dead.Load() {
			return l.leaseAllow(ctx, key, n)
		}
		f := st.flight.Load()
		if f == nil {
			f = &flight{done: make(chan struct{})}
			if st.flight.CompareAndSwap(nil, f) {
				budget := l.timeout // a caller that waited has what is left of it
				if !deadline.IsZero() {
					budget = time.Until(deadline)
				}
				var d floodgate.Decision
				var res result
				var err error
				if budget > 0 {
					// Close waits for the refill, and returns what it took.
					tracked := ls.enter()
					d, res, err = l.lead(ctx, key, st, n, budget)
					if tracked {
						ls.exit()
					}
				} else {
					d, res = l.fallback(key, n, false), l.failResult()
				}
				st.flight.Store(nil)
				close(f.done)
				return d, res, err
			}
			continue
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(l.timeout)
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return l.fallback(key, n, false), l.failResult(), nil
		}
		timer := time.NewTimer(wait)
		st.waiting.Add(n)
		select {
		case <-f.done:
			timer.Stop()
			st.waiting.Add(-n)
		case <-ctx.Done():
			timer.Stop()
			st.waiting.Add(-n)
			return l.abandon(), resAbandoned, ctx.Err()
		case <-timer.C:
			st.waiting.Add(-n)
			if l.onError != nil {
				l.onError(errLeaseWait)
			}
			return l.fallback(key, n, false), l.failResult(), nil
		}
		now := l.leaseNow()
		if g, rest, ok := l.take(key, st, n, now); ok {
			return l.fromLease(g, rest, now), resAllowed, nil
		}
		if d, ok := l.cachedDenial(st, n, now); ok {
			return d, resDenied, nil
		}
	}
}

// lead is the refill itself, run by the key's one leader: it takes the
// key's lease out of reach, keeps what of it may still be spent toward
// this request, asks Redis for the rest and the next batch in one round
// trip, and installs the new batch.
func (l *Limiter) lead(ctx context.Context, key string, st *leaseState, n int64, budget time.Duration) (d floodgate.Decision, res result, err error) {
	ls := l.lease
	now := l.leaseNow()
	if g, rest, ok := l.take(key, st, n, now); ok {
		return l.fromLease(g, rest, now), resAllowed, nil // a refill that ended just now served it
	}
	if d, ok := l.cachedDenial(st, n, now); ok {
		return d, resDenied, nil
	}
	rs := l.rs() // the rule of this round trip, and of the batch it takes
	old := st.g.Swap(nil)
	if old != nil && old.gen != rs.gen {
		ls.lapse(old) // leased under a rule changed since (SetRule raced it)
		old = nil
	}
	var held, give, gk, spent int64
	if old != nil {
		u := max(0, old.units.Swap(retiredUnits))
		decayed := old.decayed.Swap(0)
		ls.lapsed.Add(decayed)
		spent = old.taken - u - decayed
		held = ls.usable(old, u, now)
		switch {
		case held >= n: // a spend that lost a race to this refill
			old.units.Store(held - n)
			l.install(key, st, old, now)
			return l.fromLease(old, held-n, now), resAllowed, nil
		case held > 0:
			ls.lapsed.Add(u - held)
		case u > 0: // its time is up: what Redis has not taken back goes back
			old.units.Store(u)
			b := ls.drain(old, now)
			give, gk = b.units, b.k
		}
	}
	// The request takes the units held first and the rest from Redis, with
	// the next batch, in one round trip.
	want := int64(0)
	if !ls.closed.Load() {
		want = ls.want(rs, st, old, spent+n, now)
		if nx := st.next.Load(); nx != nil {
			want = max(0, min(want, ls.max-max(0, nx.units.Load()))) // Max bounds the two batches together
		}
	}
	// The round trip is the key's, not only this caller's: it runs to its
	// own budget whatever the caller's deadline, so that a caller who
	// sends a deadline too short for it cannot make the batch it took be
	// lost (on a key shared by many clients, a way to drain their
	// allowance). A caller that gave up meanwhile is still abandoned.
	ls.refills.Add(1)
	r, err := l.decide(context.WithoutCancel(ctx), key, call{n: n - held, want: want, give: give, gk: gk, budget: budget, rs: rs})
	if cerr := ctx.Err(); cerr != nil && err == nil {
		defer func() { d, res, err = l.abandon(), resAbandoned, cerr }()
	}
	st.pending.Store(st.waiting.Load()) // the next batch serves those who queued meanwhile
	if r.redis {
		ls.returned.Add(give)
	} else {
		ls.lapsed.Add(give)
	}
	if !r.redis || !r.d.Allowed {
		if held > 0 {
			// The request did not pass: what was held is held again.
			old.units.Store(held)
			l.install(key, st, old, now)
		}
		if r.redis && r.d.RetryAfter > 0 && rs.gen == l.rs().gen {
			// The denial holds here until RetryAfter, or for a TTL if that
			// is sooner: what Redis lacked may be leased to other replicas,
			// and within a TTL each lease is spent or given back, where
			// the next round trip finds it.
			retry := int64(r.d.RetryAfter)
			st.deniedReset.Store(now + int64(r.d.ResetAfter))
			st.deniedRetry.Store(now + retry)
			st.deniedCost.Store(n)
			st.deniedUntil.Store(now + min(retry, ls.ttl))
		}
		return r.d, r.res, err
	}
	st.deniedUntil.Store(0)
	d = r.d
	if r.extra > 0 {
		ls.leased.Add(r.extra)
		st.batch.Store(r.extra)
		g := l.newGrant(r, now)
		l.install(key, st, g, now)
		d.Remaining += r.extra
	}
	return d, r.res, nil
}

// install makes g the key's lease, or its next batch if another was
// promoted meanwhile (or gives g back if both places are taken); and if
// Close has begun, or the key's state was dropped meanwhile (by Reset, or
// by the sweeper while the key was idle), it gives g's units back
// instead.
func (l *Limiter) install(key string, st *leaseState, g *grant, now int64) {
	ls := l.lease
	if !st.g.CompareAndSwap(nil, g) && !st.next.CompareAndSwap(nil, g) {
		l.giveBackNow(key, g, now)
		return
	}
	// The rule is read after g is in place: either SetRule's retirement,
	// which changes the rule first, finds g, or this finds the new rule.
	if !ls.closed.Load() && g.gen == l.rs().gen {
		if cur, ok := ls.states.Load(key); ok && cur == st {
			return
		}
	}
	if st.g.CompareAndSwap(g, nil) || st.next.CompareAndSwap(g, nil) {
		l.giveBackNow(key, g, now) // giveBack lets a stale rule's units lapse
	}
}

// want is the size of the key's next batch: what the key spent since its
// last batch was taken, scaled to the target period, grown at most
// leaseGrowth times over the last batch, and at most Max.
// The requests that queued behind the last refill are served whole. rs
// is the rule the batch is taken under.
func (ls *leases) want(rs *rules, st *leaseState, old *grant, spent, now int64) int64 {
	w := max(1, st.batch.Load())
	if old != nil {
		w = spent * leaseGrowth
		if elapsed := now - old.at; elapsed > 0 && elapsed >= rs.target/leaseGrowth {
			w = min(w, spent*rs.target/elapsed)
		}
		w = max(1, min(w, leaseGrowth*max(1, old.taken)))
		// Far from the limit, a batch may outgrow the key's demand: a
		// sliver of what Redis had left is nothing to the other replicas,
		// and it saves a quiet key its round trips. Near the limit the
		// sliver is small, and Redis grants at most an eighth anyway.
		w = max(w, old.remaining/leaseSpare)
	}
	if rs.step > 0 {
		// A bucket's unit lasts while the debt it made is unpaid: from a
		// full bucket, a batch of k lasts k steps, however few of them the
		// key spends. So a bucket's batch is at least enough to last the
		// target period; what the key does not spend lapses, and Redis has
		// it back by then. (Redis grants at most an eighth of what
		// remains, so this never crowds out the other replicas near the
		// limit, where a batch lasts long anyway: its slots lie behind the
		// debt already there.)
		w = max(w, rs.target/rs.step)
	}
	return min(ls.max, max(w, st.pending.Load()), maxWant)
}

// maxWant is the most a script takes in one call's want (its range).
const maxWant = 1 << 50
