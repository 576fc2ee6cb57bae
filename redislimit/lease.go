package redislimit

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/internal/flat"
	"github.com/puzpuzpuz/xsync/v4"
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
// long: NTP keeps f below a thousandth.) The monotonic clock stops while
// the host is suspended, and Redis's does not: so each batch also notes
// how far the wall clock, which counts a suspension, stood ahead of the
// monotonic one, and a batch whose host has since been suspended (the
// wall clock gained more than 2 ms on the monotonic one, which a step of
// the wall clock forward does too) is spent no more: a resumed replica
// spends no unit that Redis has taken back. Unspent units whose key goes
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
// asks the Store's bookkeeper, its one goroutine of lease mode, to take
// the next batch ahead, and the bookkeeper takes the batches of every key
// of every policy that asked, in one pipeline, every few milliseconds. A
// request finds the next batch waiting when the current one runs out;
// only a key whose batch ran out before its renewal came (a burst, or a
// new key) refills in the request's own round trip. The bookkeeper also
// returns each key's unspent units at its batches' deadlines, and forgets
// a key idle for a TTL, each when it is due, by a heap of deadlines: with
// no lease held and nothing asked, it sleeps.
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
	// MaxKeys is the most keys a Store holds leases for at once, over
	// all its policies; 0 means 65,536. A key past it is decided by a
	// round trip per request until a key held goes idle.
	MaxKeys int
	// Slots, above 0, leases the slots of in-flight policies (see
	// Store.SlotPolicy), apart from Max: a replica that takes a slot of a
	// client from Redis takes up to Slots more with it, and keeps as many
	// of its released slots, held on Redis (and renewed) but unused, so
	// that its next requests of that client take one with no round trip.
	// A slot unused for a third of Config.SlotTTL goes back to Redis, a
	// busy client's too. A slot held ahead is held: the replicas together
	// never hold more than the limit, and one replica's slots ahead are
	// slots the others cannot take. One is served only while Redis is
	// known to hold it: less than SlotTTL after the sending of the last
	// round trip that found it there, and never once a renewal found it
	// gone (see Store.SlotPolicy). 0 takes every slot by a round trip.
	Slots int
}

const (
	defaultLeaseTTL  = time.Second
	defaultLeaseKeys = 1 << 16
	logHold          = 100 * time.Millisecond // the longest a log's batch is stamped ahead
	leaseGrowth      = 4                      // a batch is at most this many times the last
	leaseSpare       = 64                     // a batch takes at least this share of what Redis had left
	suspendSlack     = 2 * time.Millisecond   // what the wall clock may gain on the monotonic one before a batch is taken for suspended
)

// leaseNow is lease mode's clock, in ns ("lease ns"), which times every
// batch, cached denial and idle key: the monotonic time since the Store
// began, which runs with Redis's clock, since both count real time (the
// tests' stand-in for Redis's clock, when one is set). It is never
// Config.Clock: a batch timed on a clock that lags Redis's (a coarse
// clock, a stalled one) would stay spendable after Redis stopped
// counting its units, and the replicas together would pass the rule.
// skew is the wall clock less the monotonic one, which a suspension of
// the host moves ahead (see usable).
func (s *Store) leaseNow() (now, skew int64) { return s.clocks(s.lease.base) }

// clocks reads the monotonic time since base, in ns, and how far the
// wall clock stands ahead of it (or the tests' stand-ins for the two):
// lease mode's clocks, for batches and for slots held ahead alike.
func (s *Store) clocks(base time.Time) (now, skew int64) {
	if s.redisClock != nil {
		now = s.redisClock.Now()
		if s.wallClock != nil {
			skew = s.wallClock.Now() - now
		}
		return now, skew
	}
	t := time.Now()
	now = int64(t.Sub(base))
	return now, t.UnixNano() - now
}

// leases is lease mode's state: one leaseState per key of every policy
// of the Store, at most bound of them, and the bookkeeper's queues.
type leases struct {
	s        *Store
	max, ttl int64     // units; ns
	bound    int64     // keys
	base     time.Time // lease ns count from here (see leaseNow)
	states   *xsync.Map[uint64, *leaseState]
	size     atomic.Int64
	grants   atomic.Int64 // the grants made, which number them (grant.id)
	closed   atomic.Bool
	inline   bool // tests: renew and return on the caller's goroutine, and track no key
	running  bool // the bookkeeper was started

	// The bookkeeper's inbox, under qmu: keys new to the map (fresh),
	// keys whose lease runs low (renew), units to go back (back), and
	// when the renewals and returns are next taken (due, lease ns; 0
	// when none is queued). kick wakes the bookkeeper when its wait must
	// end sooner.
	qmu   sync.Mutex
	fresh []*leaseState
	renew []*leaseState
	back  []giveBack
	due   int64
	kick  chan struct{}
	stop  chan struct{}
	done  chan struct{}

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
	once              sync.Once
	err               error

	leased, returned, lapsed atomic.Int64
	refills, renewals        atomic.Int64
}

func newLeases(s *Store, cfg Lease) *leases {
	return &leases{s: s, max: cfg.Max, ttl: int64(cfg.TTL), bound: int64(cfg.MaxKeys), base: time.Now(),
		states: xsync.NewMap[uint64, *leaseState](), kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
}

// leaseState is one key's lease in this replica, of one policy: the key's
// identity and its Redis key, never the key itself (a client's key may be
// megabytes). g is the batch being spent, and next the one renewed ahead,
// which replaces g when g cannot serve a request.
type leaseState struct {
	p           *policy
	id          flat.ID
	rkey        string
	g           atomic.Pointer[grant]
	next        atomic.Pointer[grant]
	flight      atomic.Pointer[flight]
	deniedUntil atomic.Int64 // a cached denial holds until then (lease ns)
	deniedCost  atomic.Int64 // for costs of at least this
	deniedRetry atomic.Int64 // its RetryAfter's end (lease ns)
	deniedReset atomic.Int64 // its ResetAfter's end (lease ns)
	deniedOwed  atomic.Int64 // what the key owed then (a check in debt refuses)
	deniedGen   atomic.Int64 // under the rule of this gen
	lastUsed    atomic.Int64 // lease ns
	waiting     atomic.Int64 // the cost waiting for the refill in flight
	dead        atomic.Bool  // dropped from the map
	batch       atomic.Int64 // the last batch's size
	pending     atomic.Int64 // the cost that waited for the last refill
}

// grant is one batch: units left, spendable while now < until and, for
// the buckets, while units ≤ (top-now)/step, and while the host has not
// been suspended since it was taken (skew).
type grant struct {
	units     atomic.Int64
	decayed   atomic.Int64 // units whose debt was paid before they were spent
	id        int64        // its number, from 1, for a reservation's HoldPart.Ref
	gen       int64        // the rule it was leased under (rules.gen)
	limit     int64        // that rule's capacity
	step      int64        // that rule's ns per unit, for the buckets; 0 for the others
	top       int64        // buckets: the lease ns at which the batch's debt is paid
	until     int64        // lease ns: the end of TTL, or of the window, or the log entry's stamp
	skew      int64        // the wall clock less the monotonic one when it was taken (see leaseNow)
	k         int64        // the window the units were charged to, the log entry's stamp, or the buckets' TAT on Redis's clock
	at        int64        // lease ns of the round trip that took it
	taken     int64        // units in the batch
	remaining int64        // Redis's remaining after the grant
	resetAt   int64        // lease ns at which Redis would hold the key fresh
	low       int64        // below this many units, the batch is renewed ahead
	renewAt   int64        // lease ns from which it is renewed ahead
	windowEnd bool         // a fixed window's batch that ends with its window: once over, nothing of it goes back
	asked     atomic.Bool  // its renewal was asked for
	reasked   atomic.Bool  // asked for again once it could serve nothing (see askLeases)
}

// retiredUnits is what a grant's units hold once they are taken out of
// it (drained, lapsed, or held by a refill): below any count, so that a
// unit put back after that is not added to units that nobody will return
// (see putBack).
const retiredUnits = math.MinInt64 / 4

// flight is one refill in progress: done closes when it is over.
type flight struct{ done chan struct{} }

// maxWant is the most a script takes in one call's want (its range).
const maxWant = 1 << 50
