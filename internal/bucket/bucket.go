package bucket

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/internal/chaos"
)

// Bucket is a lock-free token bucket for one key.
//
// Its whole state is one int64, the theoretical arrival time of GCRA: the
// instant at which the bucket would be full again. A request of cost n at
// time t is admitted if and only if max(TAT, t) + n×interval − t ≤ tau, and
// then TAT moves forward by n×interval. This is the token bucket exactly:
// the tokens at t are (tau − (TAT − t)) / interval, capped at the capacity.
// A CAS loop applies the change; a denial writes nothing, so a flood of
// denials on one key reads a shared cache line but never invalidates it.
//
// A Bucket is retired once, for eviction, a reset, or when its clock runs
// so far that it must move its origin (see Params). A retired Bucket
// answers every call with live == false and changes nothing; the caller
// then asks Successor for the state that replaces it. Because retiring is a
// CAS on the same word as every grant, a request can never consume from a
// state that has already been retired: this is what keeps a key from
// passing twice its limit while eviction runs.
//
// Layout: the struct is 64 bytes with the word first, so that no two
// buckets' words ever share a cache line, at any alignment: a grant on one
// key never invalidates another key's word. The fields every decision reads
// (word, origin, rule) fill the first 48 bytes; Go's allocator places 64-byte
// objects at 0 or 16 mod 64, where those 48 bytes lie in one line, so a
// decision reads one line. The successor link, read only once a bucket has
// retired, goes last. A field more would move the bucket to the 80-byte size
// class and break both properties; TestBucketLayout guards them.
type Bucket struct {
	tat    atomic.Int64
	origin int64
	p      Params
	next   atomic.Pointer[Bucket] // the successor, once a retired bucket has one
	_      [8]byte
}

// New returns a bucket for rule p that is full at now, its origin. A
// request with an earlier reading finds it owing the difference.
func New(p Params, now int64) *Bucket {
	return &Bucket{origin: now, p: p}
}

// NewSpent returns a bucket for rule p, made at now, that is full from
// spent on and owes the difference before it, as a bucket made at spent
// does: the bucket whose TAT is spent, so its Evict reports spent until
// then. It is how a key evicted with Evict comes back without a token it
// had spent. With spent ≤ now it is New(p, now). A reading more than the
// bucket's range (see Params) before spent is denied with Never.
func NewSpent(p Params, now, spent int64) *Bucket {
	return New(p, max(now, spent))
}

// AllowN takes n tokens at now if the bucket holds them. A denial consumes
// nothing. live is false when the bucket is retired; then nothing changed
// and the caller must use Successor.
func (b *Bucket) AllowN(now, n int64) (d Decision, live bool) {
	t, pos := b.p.ticks(now, b.origin)
	for {
		w := b.tat.Load()
		if isRetired(w) || pos != inRange || !b.p.validCost(n) {
			next, d, live := b.p.allow(w, t, pos, n)
			if next == w || b.tat.CompareAndSwap(w, next) {
				return d, live
			}
			continue
		}
		next, ok := b.p.take(w, t, n)
		if !ok {
			return b.p.denied(w, t, n), true // a denial writes nothing
		}
		chaos.Yield()
		if b.tat.CompareAndSwap(w, next) {
			return b.p.granted(next, t), true
		}
		chaos.Retried()
	}
}

// ChargeN takes n units at now whatever the bucket holds: a cost already
// spent, which no refusal could undo. A bucket that held fewer than n is
// left owing the rest, refuses every request until the debt is paid back
// at the rule's rate, and then refills as usual (see the package's Debt).
//
// The Decision is the bucket's state after the charge: Allowed true (the
// units were taken), Limit the capacity, Remaining the whole tokens left
// (0 while it owes), Owed the whole units owed (⌈(TAT − now − tau) /
// interval⌉ when positive, else 0), RetryAfter the wait until a request
// of cost 1 could pass (0 if one could now), and ResetAfter the wait until
// the bucket is full.
//
// An error, with the zero Decision and nothing charged: for n < 1; with
// ErrDebtBound when the debt would pass what the state holds (the error
// says how much more may be charged); and ErrEarlyCharge for a reading
// before the bucket's range, where AllowN answers Never. live is false
// when the bucket is retired, or retires because now lies past its range;
// then nothing was charged and the caller charges Successor.
func (b *Bucket) ChargeN(now, n int64) (d Decision, live bool, err error) {
	t, pos := b.p.ticks(now, b.origin)
	for {
		w := b.tat.Load()
		if isRetired(w) || pos != inRange {
			next, d, live, err := b.p.chargeAt(w, t, pos, n)
			if next == w || b.tat.CompareAndSwap(w, next) {
				return d, live, err
			}
			continue
		}
		next, ok := b.p.charge(w, t, n)
		if !ok {
			return Decision{}, true, b.p.chargeError(w, t, n)
		}
		chaos.Yield()
		if b.tat.CompareAndSwap(w, next) {
			return b.p.charged(next, t), true, nil
		}
		chaos.Retried()
	}
}

// Take is AllowN without the Decision: it reports only whether n tokens
// were taken, which is all Allow needs, and skips computing the rest.
func (b *Bucket) Take(now, n int64) (allowed, live bool) {
	t, pos := b.p.ticks(now, b.origin)
	for {
		w := b.tat.Load()
		next, allowed, live := b.p.admit(w, t, pos, n)
		if next == w {
			return allowed, live
		}
		chaos.Yield()
		if b.tat.CompareAndSwap(w, next) {
			return allowed, live
		}
		chaos.Retried()
	}
}

// ReserveN takes n tokens at now if the bucket will hold them within
// maxWait, and returns the wait before the caller may use them (0: at
// once) and the TAT it left, which CancelReservation needs. ok is false,
// and nothing changed, when the wait would be longer (wait then says how
// long it would be), n is not a valid cost, or now lies before the
// bucket's range; live is false when the bucket is retired (use
// Successor).
func (b *Bucket) ReserveN(now, n int64, maxWait time.Duration) (wait time.Duration, tat int64, ok, live bool) {
	t, pos := b.p.ticks(now, b.origin)
	limit := b.p.waitTicks(maxWait)
	for {
		w := b.tat.Load()
		if isRetired(w) || pos != inRange {
			next, _, live := b.p.allow(w, t, pos, n) // retires a bucket past its range
			if next == w || b.tat.CompareAndSwap(w, next) {
				return 0, 0, false, live
			}
			continue
		}
		if !b.p.validCost(n) {
			return 0, 0, false, true
		}
		next, ticks, ok := b.p.reserve(w, t, n, limit)
		if !ok {
			return b.p.duration(ticks), 0, false, true
		}
		chaos.Yield()
		if b.tat.CompareAndSwap(w, next) {
			return b.p.duration(ticks), next, true, true
		}
		chaos.Retried()
	}
}

// CancelReservation gives back a reservation of n that left the TAT at
// tat, if nothing has been taken from the bucket since, and reports
// whether it did (see the package's Reservations).
func (b *Bucket) CancelReservation(tat, n int64) bool {
	return b.changeIf(func(w int64) (int64, bool) { return b.p.cancel(w, tat, n) })
}

// changeIf applies step to the word by CAS for as long as step says the
// word's current value is one to change, and reports whether it changed
// it: the loop of the operations off the request path.
func (b *Bucket) changeIf(step func(w int64) (next int64, ok bool)) bool {
	for {
		w := b.tat.Load()
		next, ok := step(w)
		if !ok {
			return false
		}
		chaos.Yield()
		if b.tat.CompareAndSwap(w, next) {
			return true
		}
		chaos.Retried()
	}
}

// Peek returns what AllowN(now, 1) would answer, and consumes nothing.
func (b *Bucket) Peek(now int64) (d Decision, live bool) {
	t, pos := b.p.ticks(now, b.origin)
	return b.p.peek(b.tat.Load(), t, pos)
}

// Refund gives back n tokens that an earlier AllowN or ChargeN on this
// bucket took, for 1 ≤ n ≤ the capacity (any other n changes nothing). It
// is exact, in debt too: the TAT moves back by n intervals, so a refund
// after a charge into debt, at a frozen clock, leaves the bucket as if the
// n had never been charged (how a settlement gives back an over-estimate).
// It reports false when the bucket has since been retired: the refund then
// belongs to Successor, which carries the grant. After a reset, which
// forgot the grant, it reports true and does nothing.
func (b *Bucket) Refund(n int64) (live bool) {
	for {
		w := b.tat.Load()
		next, live := b.p.refund(w, n)
		if next == w {
			return live
		}
		chaos.Yield()
		if b.tat.CompareAndSwap(w, next) {
			return true
		}
		chaos.Retried()
	}
}

// RetireIdle retires the bucket if it is full at now, as a new bucket is,
// and reports whether it did. Its successor is full from now on.
func (b *Bucket) RetireIdle(now int64) bool {
	t, pos := b.p.ticks(now, b.origin)
	return b.changeIf(func(w int64) (int64, bool) { return b.p.retireIdle(w, t, pos) })
}

// Retire retires the bucket whatever it holds; its successor is new.
func (b *Bucket) Retire() {
	b.tat.Store(retire(resetMark))
}

// Evict retires the bucket for good, as Retire does (its successor is
// new), and returns the instant from which the bucket it held would have
// been full, as a new one made then is (Params.SpentValue); it may lie in
// the past, where it still binds requests whose readings are older. The
// reading and the retirement are
// one CAS, so no grant lands between them: NewSpent(p, now, spent) makes a
// bucket that never holds a token this one had spent. On a bucket already
// retired it returns math.MinInt64 and changes nothing; what the bucket
// held then lives on, if anywhere, in Successor.
func (b *Bucket) Evict(int64) (spent int64) {
	for {
		w := b.tat.Load()
		if isRetired(w) {
			return math.MinInt64
		}
		spent = b.p.SpentValue(uint64(w), b.origin)
		chaos.Yield()
		if b.tat.CompareAndSwap(w, retire(resetMark)) {
			return spent
		}
		chaos.Retried()
	}
}

// Successor returns the bucket that stands for this one once it is
// retired: new at now after a reset, or carrying the TAT it retired with.
// Every call on a retired bucket returns the same *Bucket, so a refund that
// follows the line of successors lands in the one state that holds the
// grant. On a live bucket it returns a new bucket and remembers nothing.
func (b *Bucket) Successor(now int64) *Bucket {
	if s := b.next.Load(); s != nil {
		return s
	}
	w := b.tat.Load()
	origin, sw := b.p.successor(w, b.origin, now)
	s := &Bucket{origin: origin, p: b.p}
	s.tat.Store(sw)
	if !isRetired(w) || b.next.CompareAndSwap(nil, s) {
		return s
	}
	return b.next.Load()
}
