package bucket

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/floodgate-go/floodgate/internal/decision"
)

// Never is the RetryAfter of a request that can never pass: a cost below 1
// or above the capacity, or a clock reading outside the supported range.
const Never = decision.Never

// Decision is the outcome of one request: whether it passed, the capacity
// that applied, the whole tokens left, the wait before the same request
// could pass, the wait until the bucket is full, and the whole units the
// bucket owes (Owed: ⌈(TAT − t − tau) / interval⌉ when positive, else 0;
// see the package's Debt).
type Decision = decision.Decision

// ErrDebtBound is the error of a charge that would leave a bucket owing
// more than its state can hold (see the package's Debt): nothing is
// charged then. It is the same value as floodgate.ErrDebtBound.
var ErrDebtBound = decision.ErrDebtBound

// ErrEarlyCharge is the error of a charge at a clock reading too far before
// the state's origin for the state to hold it (the reading at which
// AllowN answers Never): nothing is charged then.
var ErrEarlyCharge = errors.New("the clock reading lies too far before the state's origin for a charge at it to be held")

// The state of a bucket is one int64, its theoretical arrival time (TAT) in
// ticks since the bucket's origin; a tick is 1/scale ns. The ranges below
// keep every sum and difference of the algorithm inside int64, so no step
// can overflow:
//
//	tau (the burst window, Burst × interval)   ≤ 2^60
//	t (now in ticks) at which a request is served  ∈ [−2^61, 2^60]
//	a stored TAT                                ∈ [−2^62, 2^61]
//
// A new bucket's TAT is 0: it is full at its origin, and a reading from
// before the origin (a caller whose clock read was overtaken) finds it owing
// the difference, never holding more. A state whose clock runs past 2^60
// ticks moves its origin forward by a fixed whole number of nanoseconds
// (rebase), carrying its TAT across exactly, so a key can live for ever. A
// clock more than 2^61 ticks before the origin is answered with a denial
// whose RetryAfter is Never.
const (
	maxTau     = 1 << 60
	rebaseAt   = 1 << 60
	maxT       = 1 << 61
	minT       = -(1 << 61)
	maxScale   = 1 << 13
	maxTick    = math.MaxInt64 // a reading past every TAT: the bucket is full
	floorTAT   = -(1 << 62)    // no TAT goes below this; it is full at every t ≥ minT
	resetMark  = floorTAT      // carried by a reset: the successor is new at its own now
	retiredBit = math.MinInt64
)

// Params is a validated token-bucket rule in the fixed-point form the
// buckets compute with. The zero value is not valid; use NewParams.
type Params struct {
	capacity int64 // B, the most tokens the bucket holds
	interval int64 // ticks of refill per token
	scale    int64 // ticks per nanosecond
	maxRel   int64 // rebaseAt / scale: the last ns after the origin served in place
}

// NewParams validates a rule of limit tokens per period with the given
// burst (0 means limit) and converts it to fixed point.
//
// Supported range: limit ≥ 1, period ≥ 1ns, burst ≥ 0, at most one token
// per nanosecond (limit ≤ period in ns), and a burst window
// burst × period / limit of at most 2^60 ticks (at least 16 years when
// period/limit is a whole number of nanoseconds; 30 days at a scale of 8192).
//
// Exactness: the emission interval period/limit is held exactly in ticks of
// 1/d ns, where d is the denominator of period/limit in lowest terms, when
// d ≤ 8192 and the burst window fits. That includes every rule whose
// interval is a whole number of nanoseconds (d = 1). Otherwise the interval
// is rounded up to the next 1/8192 ns: each token then refills at most
// 1/8192 ns late, never early, so the bucket never admits more than exact
// arithmetic would.
func NewParams(limit int64, period time.Duration, burst int64) (Params, error) {
	switch {
	case limit <= 0:
		return Params{}, fmt.Errorf("limit must be at least 1, got %d", limit)
	case period <= 0:
		return Params{}, fmt.Errorf("period must be positive, got %v", period)
	case burst < 0:
		return Params{}, fmt.Errorf("burst must be 0 (meaning limit) or positive, got %d", burst)
	case limit > int64(period):
		return Params{}, fmt.Errorf("rate of %d per %v is above one token per nanosecond, the finest the bucket represents", limit, period)
	}
	capacity := burst
	if capacity == 0 {
		capacity = limit
	}
	p, l := uint64(period), uint64(limit)
	g := gcd(p, l)
	if d := l / g; d <= maxScale {
		// The interval is exactly (p/g)/d ns, which is p/g ticks of 1/d ns.
		if fitsTau(uint64(capacity), p/g) {
			return newParams(capacity, int64(p/g), int64(d)), nil
		}
	}
	for s := uint64(maxScale); s >= 1; s /= 2 {
		hi, lo := bits.Mul64(p, s)
		if hi >= l {
			continue
		}
		q, r := bits.Div64(hi, lo, l)
		if r != 0 {
			q++ // round the interval up: refill may lag, never lead
		}
		if fitsTau(uint64(capacity), q) {
			return newParams(capacity, int64(q), int64(s)), nil
		}
	}
	return Params{}, fmt.Errorf("burst window of %d × %v / %d is too long to represent (the limit is about %v)",
		capacity, period, limit, time.Duration(maxTau))
}

func newParams(capacity, interval, scale int64) Params {
	return Params{capacity: capacity, interval: interval, scale: scale, maxRel: rebaseAt / scale}
}

// tau is the burst window in ticks, capacity × interval: the debt at which
// the bucket is empty. It is computed, not stored, to keep Params at 32
// bytes (see Bucket's layout); NewParams has checked that it fits.
func (p *Params) tau() int64 { return p.capacity * p.interval }

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// fitsTau reports whether a burst window of capacity × interval ticks is
// within maxTau.
func fitsTau(capacity, interval uint64) bool {
	hi, lo := bits.Mul64(capacity, interval)
	return hi == 0 && lo <= maxTau
}

// position is where a clock reading falls relative to a bucket's origin.
type position int

const (
	inRange   position = iota
	tooEarly           // more than 2^61 ticks before the origin
	pastRange          // beyond rebaseAt: the state must move its origin
)

// ticks converts a clock reading to ticks since origin. Past rebaseAt it
// still returns t when t ≤ maxT, and math.MaxInt64 beyond that: every stored
// TAT is at most maxT, so such a bucket is full. The bounds are multiples of
// maxRel, so that no division runs on the request path: 2×maxRel×scale is at
// most maxT, and −2×maxRel×scale at least minT.
func (p *Params) ticks(now, origin int64) (int64, position) {
	rel := now - origin
	if (now^origin)&(now^rel) < 0 { // the subtraction overflowed
		if now > origin {
			return maxTick, pastRange
		}
		return 0, tooEarly
	}
	switch {
	case rel <= p.maxRel && rel >= -2*p.maxRel:
		return rel * p.scale, inRange
	case rel > 2*p.maxRel:
		return maxTick, pastRange
	case rel > p.maxRel:
		return rel * p.scale, pastRange
	}
	return 0, tooEarly
}

// take is the token bucket itself, for a valid cost n at an in-range t:
// the TAT after admitting n, and whether the bucket held n. Nothing is
// written; the caller stores next only when ok.
func (p *Params) take(w, t, n int64) (next int64, ok bool) {
	next = max(w, t) + n*p.interval
	return next, next-t <= p.tau()
}

// granted is the answer to an admitted request that left the TAT at next.
func (p *Params) granted(next, t int64) Decision {
	d := Decision{Allowed: true, Limit: p.capacity}
	p.fill(&d, next-t)
	return d
}

// denied is the answer to a request of cost n refused at t with the TAT at
// w: RetryAfter is the wait until the bucket holds n, or Never for a cost
// no bucket of this capacity can hold.
func (p *Params) denied(w, t, n int64) Decision {
	d := Decision{Limit: p.capacity, RetryAfter: Never}
	debt := max(w, t) - t
	if n >= 1 && n <= p.capacity {
		d.RetryAfter = p.duration(debt + n*p.interval - p.tau())
	}
	p.fill(&d, debt)
	return d
}

// validCost reports whether one request may ask for n.
func (p *Params) validCost(n int64) bool { return n >= 1 && n <= p.capacity }

// fill sets Remaining, Owed and ResetAfter for a bucket that owes debt
// ticks (its TAT less t): the whole tokens it holds, or, past the empty
// bucket, the whole units it owes, rounded up.
func (p *Params) fill(d *Decision, debt int64) {
	switch tau := p.tau(); {
	case debt < tau:
		d.Remaining = (tau - debt) / p.interval
	case debt > tau: // ≤ 2^62 + 2^60: no overflow
		d.Owed = (debt - tau + p.interval - 1) / p.interval
	}
	d.ResetAfter = p.duration(debt)
}

// duration converts ticks to nanoseconds, rounding up.
func (p *Params) duration(ticks int64) time.Duration {
	if p.scale == 1 {
		return time.Duration(ticks)
	}
	return time.Duration((ticks + p.scale - 1) / p.scale)
}

// outOfRange is the answer for a clock reading too far before the origin.
func (p *Params) outOfRange() Decision {
	return Decision{Limit: p.capacity, RetryAfter: Never}
}

// rebaseShift is the whole number of nanoseconds by which a state moves its
// origin when its clock passes rebaseAt, and the same span in ticks.
func (p *Params) rebaseShift() (ns, ticks int64) {
	ns = rebaseAt / p.scale
	return ns, ns * p.scale
}

// retire encodes a retired state that carries tat to its successor. Every
// live word has its two top bits equal (it lies in [−2^62, 2^62)); flipping
// the sign bit makes them differ.
func retire(tat int64) int64 { return tat ^ retiredBit }

// isRetired reports whether w was made by retire.
func isRetired(w int64) bool { return (w ^ (w << 1)) < 0 }

// carried decodes the TAT a retired word hands to its successor.
func carried(w int64) int64 { return w ^ retiredBit }

// The transitions below are the whole algorithm, as pure functions of the
// state word. Bucket applies them with a CAS loop and MutexBucket under a
// mutex, so the two twins differ only in how they synchronise.
//
// A retired word carries a TAT to the successor: the live TAT after a
// rebase, the instant at which the bucket was found idle, or resetMark.
// Carrying the idle instant matters when callers' clock readings arrive out
// of order: a reading from before the eviction must find the successor as
// the evicted state would have been, not full.

// allow is the transition of AllowN: the word after a request of cost n at
// (t, pos), the answer, and whether the state was live. An unchanged word
// means nothing is to be written. Bucket.AllowN inlines its common case.
func (p *Params) allow(w, t int64, pos position, n int64) (next int64, d Decision, live bool) {
	if isRetired(w) {
		return w, Decision{}, false
	}
	switch pos {
	case tooEarly:
		return w, p.outOfRange(), true
	case pastRange:
		if t == maxTick {
			return retire(resetMark), Decision{}, false
		}
		return retire(max(w, t)), Decision{}, false
	}
	if p.validCost(n) {
		if next, ok := p.take(w, t, n); ok {
			return next, p.granted(next, t), true
		}
	}
	return w, p.denied(w, t, n), true
}

// admit is allow without the Decision, for callers that need only the
// verdict: it saves the divisions that Remaining and ResetAfter cost.
func (p *Params) admit(w, t int64, pos position, n int64) (next int64, allowed, live bool) {
	if isRetired(w) || pos != inRange {
		next, _, live = p.allow(w, t, pos, n)
		return next, false, live
	}
	if p.validCost(n) {
		if next, ok := p.take(w, t, n); ok {
			return next, true, true
		}
	}
	return w, false, true
}

// peek answers what allow would for a cost of 1, and writes nothing.
func (p *Params) peek(w, t int64, pos position) (Decision, bool) {
	if isRetired(w) {
		return Decision{}, false
	}
	switch pos {
	case tooEarly:
		return p.outOfRange(), true
	case pastRange:
		if w <= t { // t is maxTick when it could not be computed
			w, t = 0, 0
		}
	}
	if next, ok := p.take(w, t, 1); ok {
		return p.granted(next, t), true
	}
	return p.denied(w, t, 1), true
}

// refund gives back n tokens taken by an earlier grant or charge: the TAT
// moves back by exactly n × interval, in debt or not, unless that passes
// floorTAT, where the bucket is full at every reading. A retired word
// sends the refund on to its successor (live false), which carries the
// grant, except after a reset, which forgot it.
func (p *Params) refund(w, n int64) (next int64, live bool) {
	if isRetired(w) {
		return w, carried(w) == resetMark
	}
	if n < 1 || n > p.capacity {
		return w, true
	}
	return max(w-n*p.interval, floorTAT), true
}

// charge is take for a cost that cannot be refused: the TAT after n more
// units at t whatever the bucket holds, so that it may owe. ok is false,
// and nothing may be written, for n < 1 or when the TAT would pass maxT,
// the most a state holds: a charge is refused whole, never wrapped.
func (p *Params) charge(w, t, n int64) (next int64, ok bool) {
	base := max(w, t) // ≤ maxT: every stored TAT is
	hi, lo := bits.Mul64(uint64(n), uint64(p.interval))
	if n < 1 || hi != 0 || lo > uint64(maxT-base) {
		return w, false
	}
	return base + int64(lo), true
}

// charged is the answer to a charge that left the TAT at next: Allowed,
// and RetryAfter the wait until a request of cost 1 conforms.
func (p *Params) charged(next, t int64) Decision {
	d := Decision{Allowed: true, Limit: p.capacity}
	debt := next - t
	p.fill(&d, debt)
	if wait := debt + p.interval - p.tau(); wait > 0 {
		d.RetryAfter = p.duration(wait)
	}
	return d
}

// chargeError says why charge refused n at t with the TAT at w.
func (p *Params) chargeError(w, t, n int64) error {
	if n < 1 {
		return fmt.Errorf("a charge must be of at least 1 unit, got %d", n)
	}
	room := (maxT - max(w, t)) / p.interval
	return fmt.Errorf("%w: a charge of %d units at this reading, where at most %d more can be charged "+
		"(a bucket's debt runs at most 2^61 ticks of 1/%d ns past its origin, %v after this reading)",
		ErrDebtBound, n, room, p.scale, p.duration(maxT-t))
}

// chargeAt is the transition of ChargeN at (t, pos): the word after a
// charge of n, the answer, whether the state was live, and the error of
// a charge refused. A retired word, and a reading past the range, are
// handled as allow handles them (the latter retires the state).
func (p *Params) chargeAt(w, t int64, pos position, n int64) (next int64, d Decision, live bool, err error) {
	switch {
	case isRetired(w) || pos == pastRange:
		next, _, live = p.allow(w, t, pos, n)
		return next, Decision{}, live, nil
	case pos == tooEarly:
		return w, Decision{}, true, ErrEarlyCharge
	}
	next, ok := p.charge(w, t, n)
	if !ok {
		return w, Decision{}, true, p.chargeError(w, t, n)
	}
	return next, p.charged(next, t), true, nil
}

// reserve is take for a request that may wait: it admits n at t whatever
// the bucket holds now, provided they will be there within maxWait ticks,
// and returns the TAT after them and the wait in ticks before the request
// conforms (0 when take would admit it at t). ok is false, and nothing may
// be written, when the wait is longer or the TAT would leave its range.
// Requests that wait are served in the order they reserved: each TAT is
// the last one's plus its cost, so waiting never lets more pass than the
// rule.
func (p *Params) reserve(w, t, n, maxWait int64) (next, wait int64, ok bool) {
	next = max(w, t) + n*p.interval
	wait = max(0, next-t-p.tau())
	return next, wait, wait <= maxWait && next <= maxT
}

// cancel undoes a reservation of n that left the TAT at tat, if the TAT is
// still tat: nothing was taken since, so no later request was promised a
// time that counts on the tokens it gives back. Otherwise it changes
// nothing and reports false: giving them back then would let a new request
// take the slot that a later waiter was already promised, and pass beside
// it.
func (p *Params) cancel(w, tat, n int64) (next int64, ok bool) {
	if isRetired(w) || w != tat || n < 1 || n > p.capacity {
		return w, false
	}
	return max(w-n*p.interval, floorTAT), true
}

// waitTicks converts a longest wait to ticks, saturating: a wait no
// deadline bounds is math.MaxInt64.
func (p *Params) waitTicks(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if int64(d) > math.MaxInt64/p.scale {
		return math.MaxInt64
	}
	return int64(d) * p.scale
}

// retireIdle retires a word that is full at t, as a new bucket is, and
// carries t so that the successor is full from t on.
func (p *Params) retireIdle(w, t int64, pos position) (next int64, ok bool) {
	if isRetired(w) || pos != inRange || w > t {
		return w, false
	}
	return retire(t), true
}

// successor returns the origin and word of the state that replaces a
// retired word w, read at now: new at now after a reset; else the carried
// TAT, moved to an origin a fixed shift later when it lies past rebaseAt.
func (p *Params) successor(w, origin, now int64) (int64, int64) {
	c := carried(w)
	switch {
	case !isRetired(w) || c == resetMark:
		return now, 0
	case c > rebaseAt:
		ns, ticks := p.rebaseShift()
		return origin + ns, c - ticks
	}
	return origin, c
}
