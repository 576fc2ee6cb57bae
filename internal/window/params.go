package window

import (
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/floodgate-go/floodgate/internal/decision"
)

// Never is the RetryAfter of a request that can never pass: a cost below 1
// or above the limit, or a clock reading too far before the state's origin.
const Never = decision.Never

// Decision is the outcome of one request: whether it passed, the limit per
// window that applied, the whole requests left, the wait before the same
// request could pass, the wait until the key is back to full capacity, and
// what the key owes (see ChargeN).
type Decision = decision.Decision

// ErrDebtBound is wrapped by the error of a charge that would take its
// window's count past Params.MaxCount: nothing is charged then.
var ErrDebtBound = decision.ErrDebtBound

// Kind selects the window algorithm.
type Kind uint8

const (
	// Fixed counts the cost admitted in the current window k, which covers
	// [k·T, (k+1)·T) on the clock's scale. A request is allowed if and only
	// if that count plus its cost is at most N. Across a boundary it lets
	// through up to 2N in a span of T: N at the end of one window, N at the
	// start of the next.
	Fixed Kind = iota + 1

	// Sliding weights the previous window's count by the part of it still
	// inside a window of length T ending now: with e = now − k·T,
	// estimate = prev × (T − e) / T + curr, and a request is allowed if and
	// only if estimate + n ≤ N, computed exactly as
	// prev × (T − e) + (curr + n) × T ≤ N × T in 128-bit integers.
	Sliding
)

// The state of a window is one uint64:
//
//	bit 63            retired (the rest is carried to the successor)
//	bits [cb, 63)     the window index relative to the state's origin, signed
//	bits [c, 2c)      prev, the previous window's count (Sliding only)
//	bits [0, c)       curr, the current window's count
//
// A count may pass N (a charge that cannot be refused leaves the key in
// debt), up to MaxCount = 2^c − 2, so a count never fills its field and an
// all-ones payload is free to mean "reset". With b = bits.Len(N+1), the
// bits that N itself needs, and per = 1 count (Fixed) or 2 (Sliding):
//
//	c = b + debtBits                 when per·c leaves wideRelBits of index,
//	  = max((63 − wideRelBits)/per, b + minDebtBits)             otherwise,
//
// then capped so that the index keeps minRelBits, and never below b. So,
// for N+1 below
//
//	Fixed  Sliding  c                 MaxCount          index bits
//	2^31   2^11     b + 8             ≥ 256·(N+2) − 2   ≥ 24
//	2^37   2^17     39, 19            ≥ 4·(N+2) − 2     24, 25
//	2^45   2^21     b + 2             ≥ 4·(N+2) − 2     23…16, 23…17
//	2^47   2^23     47, 23            ≥ N               16, 17
//
// (1,000: MaxCount 262,142 for both; 1,000,000: 268,435,454 Fixed,
// 4,194,302 Sliding). Ordinary rules keep 24 bits of index or more; only
// limits too large for that give up index bits, down to the floor, to
// keep a debt of three times the limit, and at the very top of the range
// the bound comes down to the limit itself.
//
// A state serves requests whose window lies within ±maxRel of its own; a
// later one moves its origin (carrying the counts exactly when they still
// matter), an earlier one is denied with Never.
const (
	retiredBit  = 1 << 63
	resetWord   = math.MaxUint64 // retired by a reset: the successor is new
	minRelBits  = 16             // at least 2^14 windows before a state moves its origin
	wideRelBits = 24             // kept whenever the limit leaves minDebtBits beside it
	debtBits    = 8              // a count holds 256 times the limit and more, room permitting
	minDebtBits = 2              // else four times, down to the minRelBits floor
)

// countBits is c, the bits of one count, for a limit of kind (see above).
func countBits(kind Kind, limit int64) int {
	per := 1
	if kind == Sliding {
		per = 2
	}
	b := bits.Len64(uint64(limit) + 1)
	c := b + debtBits
	if wide := (63 - wideRelBits) / per; c > wide {
		c = max(wide, b+minDebtBits)
	}
	return max(b, min(c, (63-minRelBits)/per))
}

// Params is a validated window rule. The zero value is not valid; use
// NewParams.
type Params struct {
	limit  int64 // N
	period int64 // T in ns
	maxRel int64 // the farthest window, either way, served in place
	c      uint8 // bits per count
	cb     uint8 // bits of all counts: c, or 2c for Sliding
	kind   Kind
}

// NewParams validates a rule of limit per period for the given kind.
//
// Supported range: limit ≥ 1 and period ≥ 1ns; limit at most 2^23 − 2
// (8,388,606) for Sliding and 2^47 − 2 for Fixed, so that the window index
// keeps at least 16 bits beside the counts. Every limit up to 1,000,000 with
// any period from 1ns to the largest time.Duration is inside. How far past
// the limit a charge may take a window is MaxCount.
func NewParams(kind Kind, limit int64, period time.Duration) (Params, error) {
	switch {
	case kind != Fixed && kind != Sliding:
		return Params{}, fmt.Errorf("unknown window kind %d", kind)
	case limit <= 0:
		return Params{}, fmt.Errorf("limit must be at least 1, got %d", limit)
	case period <= 0:
		return Params{}, fmt.Errorf("period must be positive, got %v", period)
	}
	maxLimit := int64(1)<<(63-minRelBits) - 2
	if kind == Sliding {
		maxLimit = 1<<((63-minRelBits)/2) - 2
	}
	if limit > maxLimit {
		return Params{}, fmt.Errorf("limit %d does not fit the packed window state (at most %d)", limit, maxLimit)
	}
	c := countBits(kind, limit)
	cb := c
	if kind == Sliding {
		cb = 2 * c
	}
	wb := 63 - cb
	return Params{limit: limit, period: int64(period), maxRel: 1 << (wb - 2), c: uint8(c), cb: uint8(cb), kind: kind}, nil
}

// MaxCount returns the most a window's count can hold, the bound of a
// debt: a charge that would take its window's count past it is refused
// with ErrDebtBound. It is 2^c − 2 for the c bits of a count that the
// limit gets: at least 256·(N+2) − 2 when N+1 < 2^31 (Fixed) or 2^11
// (Sliding), at least 4·(N+2) − 2 when N+1 < 2^45 (Fixed) or 2^21
// (Sliding), and never less than N (N itself at the largest limits).
func (p *Params) MaxCount() int64 { return 1<<p.c - 2 }

func (p *Params) cMask() uint64 { return 1<<p.c - 1 }

func (p *Params) pack(rel, curr, prev int64) uint64 {
	return (uint64(rel)<<p.cb)&^retiredBit | uint64(prev)<<p.c | uint64(curr)
}

func (p *Params) unpack(w uint64) (rel, curr, prev int64) {
	curr = int64(w & p.cMask())
	if p.kind == Sliding {
		prev = int64(w >> p.c & p.cMask())
	}
	rel = int64(w<<1) >> (1 + p.cb) // drop the retired bit, sign-extend
	return rel, curr, prev
}

func isRetired(w uint64) bool { return w&retiredBit != 0 }

// position is where a clock reading falls relative to a state's origin.
type position int

const (
	inRange   position = iota
	tooEarly           // more than maxRel windows before the origin
	pastRange          // more than maxRel windows after it
)

// floorDivMod returns k and e with now = k·T + e and 0 ≤ e < T.
func floorDivMod(now, period int64) (k, e int64) {
	k, e = now/period, now%period
	if e < 0 {
		k, e = k-1, e+period
	}
	return k, e
}

// locate returns the window of now relative to origin (a window index), the
// offset e of now within its window, and where that window falls.
func (p *Params) locate(now, origin int64) (rel, e int64, pos position) {
	k, e := floorDivMod(now, p.period)
	rel = k - origin
	if (k^origin)&(k^rel) < 0 { // the subtraction overflowed
		if k > origin {
			return math.MaxInt64, e, pastRange
		}
		return math.MinInt64, e, tooEarly
	}
	switch {
	case rel > p.maxRel:
		return rel, e, pastRange
	case rel < -p.maxRel:
		return rel, e, tooEarly
	}
	return rel, e, inRange
}

// advance returns the counts as they stand in window rel, for a state last
// written in window ks ≤ rel.
func (p *Params) advance(ks, curr, prev, rel int64) (int64, int64) {
	switch {
	case rel == ks:
		return curr, prev
	case rel == ks+1 && p.kind == Sliding:
		return 0, curr
	}
	return 0, 0
}

// fits reports whether a request of cost n fits beside counts curr and
// prev at offset e.
func (p *Params) fits(curr, prev, e, n int64) bool {
	if n > p.limit-curr { // curr may exceed N (a debt), n any int64
		return false
	}
	if p.kind == Fixed || prev == 0 {
		return true
	}
	// prev×(T−e) + (curr+n)×T ≤ N×T, in 128 bits.
	ah, al := bits.Mul64(uint64(prev), uint64(p.period-e))
	bh, bl := bits.Mul64(uint64(curr+n), uint64(p.period))
	lo, carry := bits.Add64(al, bl, 0)
	hi, _ := bits.Add64(ah, bh, carry)
	nh, nl := bits.Mul64(uint64(p.limit), uint64(p.period))
	return hi < nh || hi == nh && lo <= nl
}

// weighted returns ceil(prev × (T − e) / T), the previous window's share of
// the estimate in whole requests.
func (p *Params) weighted(prev, e int64) int64 {
	if prev == 0 || p.kind == Fixed {
		return 0
	}
	hi, lo := bits.Mul64(uint64(prev), uint64(p.period-e))
	// hi < T whatever prev (a debt may put it far above N): prev < 2^64 and
	// T − e ≤ T, so prev × (T − e) < 2^64 × T.
	q, r := bits.Div64(hi, lo, uint64(p.period))
	if r != 0 {
		q++
	}
	return int64(q)
}

// answer builds the Decision for counts (curr, prev) at offset e: after
// the grant when allowed, as they stand when denied. Owed is what the
// estimate, with the previous window's share rounded up as for Remaining,
// stands above N.
func (p *Params) answer(allowed bool, curr, prev, e, n int64) Decision {
	d := Decision{Allowed: allowed, Limit: p.limit}
	w := p.weighted(prev, e)
	d.Remaining = max(0, p.limit-curr-w)
	d.Owed = max(0, curr+w-p.limit)
	switch {
	case curr > 0 && p.kind == Sliding:
		d.ResetAfter = time.Duration(2*p.period - e)
	case curr > 0 || prev > 0:
		d.ResetAfter = time.Duration(p.period - e)
	}
	if !allowed {
		d.RetryAfter = p.retryAfter(curr, prev, e, n)
	}
	return d
}

// retryAfter is the shortest wait after which a request of cost n, denied
// at offset e with counts (curr, prev), would pass if nothing else came.
// It is exact for counts above N too (a debt): the Fixed window's next one
// starts at 0; the sliding estimate only falls until the end of the next
// window, where neither count weighs, so the wait is found in this window
// or the next, at most 2T − e away.
func (p *Params) retryAfter(curr, prev, e, n int64) time.Duration {
	if n < 1 || n > p.limit {
		return Never
	}
	T := p.period
	if p.kind == Fixed {
		return time.Duration(T - e)
	}
	// Later in this window the previous window weighs less: the request
	// fits once prev×(T−e') ≤ (N−curr−n)×T.
	if curr+n <= p.limit && prev > 0 {
		if x := p.floorQuo(p.limit-curr-n, prev); x > 0 {
			return time.Duration(T - x - e)
		}
	}
	// In the next window this one's count becomes prev: it fits once
	// curr×(T−e'') ≤ (N−n)×T.
	wait := T - e
	if curr > 0 {
		if x := p.floorQuo(p.limit-n, curr); x < T {
			wait += T - x
		}
	}
	return time.Duration(wait)
}

// floorQuo returns min(T, floor(a × T / b)) for 0 ≤ a and b > 0.
func (p *Params) floorQuo(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(p.period))
	if hi >= uint64(b) {
		return p.period
	}
	q, _ := bits.Div64(hi, lo, uint64(b))
	return int64(min(q, uint64(p.period)))
}

func (p *Params) outOfRange() Decision {
	return Decision{Limit: p.limit, RetryAfter: Never}
}

// The transitions below are the whole algorithm, as pure functions of the
// state word; Window applies them with a CAS loop, MutexWindow under a
// mutex.

// allow is the transition of AllowN at window rel, offset e.
func (p *Params) allow(w uint64, rel, e int64, pos position, n int64) (next uint64, d Decision, live bool) {
	if isRetired(w) {
		return w, Decision{}, false
	}
	switch pos {
	case tooEarly:
		return w, p.outOfRange(), true
	case pastRange:
		ks, _, _ := p.unpack(w)
		if rel > ks+1 { // nothing the state holds still counts
			return resetWord, Decision{}, false
		}
		return w | retiredBit, Decision{}, false
	}
	ks, curr, prev := p.unpack(w)
	if rel < ks {
		// The window of this reading is closed: its count is gone, so
		// nothing may be charged to it. Wait for the state's window.
		d := p.answer(false, curr, prev, 0, n)
		d.RetryAfter = p.untilWindow(ks-rel, e, d.RetryAfter)
		d.ResetAfter = p.untilWindow(ks-rel, e, d.ResetAfter)
		return w, d, true
	}
	curr, prev = p.advance(ks, curr, prev, rel)
	if n >= 1 && p.fits(curr, prev, e, n) {
		return p.pack(rel, curr+n, prev), p.answer(true, curr+n, prev, e, n), true
	}
	return w, p.answer(false, curr, prev, e, n), true
}

// untilWindow adds to d the wait from offset e until the window j windows
// ahead begins, saturating at Never.
func (p *Params) untilWindow(j, e int64, d time.Duration) time.Duration {
	if d == Never {
		return Never
	}
	hi, lo := bits.Mul64(uint64(j), uint64(p.period))
	if hi != 0 || lo > math.MaxInt64/2 {
		return Never
	}
	return time.Duration(int64(lo)-e) + d
}

// admit is allow reduced to the verdict, for Take.
func (p *Params) admit(w uint64, rel, e int64, pos position, n int64) (next uint64, allowed, live bool) {
	if isRetired(w) || pos != inRange {
		next, _, live = p.allow(w, rel, e, pos, n)
		return next, false, live
	}
	ks, curr, prev := p.unpack(w)
	if rel < ks || n < 1 {
		return w, false, true
	}
	curr, prev = p.advance(ks, curr, prev, rel)
	if p.fits(curr, prev, e, n) {
		return p.pack(rel, curr+n, prev), true, true
	}
	return w, false, true
}

// peek answers what allow would for a cost of 1, and writes nothing. Past
// the range it answers as the successor would.
func (p *Params) peek(w uint64, rel, e int64, pos position) (Decision, bool) {
	if isRetired(w) {
		return Decision{}, false
	}
	if pos == pastRange {
		ks, curr, prev := p.unpack(w)
		if rel > ks+1 {
			w, rel = 0, 0
		} else {
			w, rel = p.pack(0, curr, prev), 1
		}
		pos = inRange
	}
	_, d, _ := p.allow(w, rel, e, pos, 1)
	return d, true
}

// refund takes n back from the window it was charged to, rel.
func (p *Params) refund(w uint64, rel int64, n int64) (next uint64, live bool) {
	if isRetired(w) {
		return w, w == resetWord
	}
	ks, curr, prev := p.unpack(w)
	switch {
	case n < 1:
	case rel == ks:
		curr = max(0, curr-n)
	case rel == ks-1 && p.kind == Sliding:
		prev = max(0, prev-n)
	}
	return p.pack(ks, curr, prev), true
}

// charge is the transition of ChargeN at window rel, offset e, for n ≥ 1:
// n goes into the window of the reading, or into the state's own window
// when the reading's lies before it (its count is no longer held, and a
// cost already incurred is counted later rather than not at all), past N
// if it must. A charge that would take the count past MaxCount changes
// nothing and returns an error wrapping ErrDebtBound, with the key as it
// stands in d (Allowed false).
func (p *Params) charge(w uint64, rel, e int64, pos position, n int64) (next uint64, d Decision, live bool, err error) {
	if isRetired(w) || pos == pastRange {
		next, _, live = p.allow(w, rel, e, pos, n)
		return next, Decision{}, live, nil
	}
	ks, curr, prev := p.unpack(w)
	var ahead int64 // windows from the reading's to the one charged
	at := e         // the offset at which the answer is reckoned
	if rel < ks {
		ahead, at = ks-rel, 0
		if ahead < 0 { // the subtraction overflowed: a reading too early
			ahead = math.MaxInt64
		}
	} else {
		curr, prev = p.advance(ks, curr, prev, rel)
		ks = rel
	}
	if n > p.MaxCount()-curr {
		err = fmt.Errorf("atomicwindow: a charge of %d on a window count of %d would pass %d, the most a window of limit %d holds: %w",
			n, curr, p.MaxCount(), p.limit, ErrDebtBound)
		next = w
	} else {
		curr += n
		next = p.pack(ks, curr, prev)
	}
	d = p.answer(err == nil, curr, prev, at, 1)
	d.RetryAfter = 0
	if !p.fits(curr, prev, at, 1) {
		d.RetryAfter = p.retryAfter(curr, prev, at, 1)
	}
	if ahead > 0 {
		d.RetryAfter = p.untilWindow(ahead, e, d.RetryAfter)
		d.ResetAfter = p.untilWindow(ahead, e, d.ResetAfter)
	}
	return next, d, true, err
}

// checkCharge is the error of a charge of n < 1, which charges nothing
// whatever the state holds.
func checkCharge(n int64) error {
	if n < 1 {
		return fmt.Errorf("atomicwindow: a charge must be at least 1, got %d", n)
	}
	return nil
}

// retireIdle retires a state that answers at window rel as a new one would,
// carrying rel so that the successor stays closed to earlier windows.
func (p *Params) retireIdle(w uint64, rel int64, pos position) (next uint64, ok bool) {
	if isRetired(w) || pos != inRange {
		return w, false
	}
	ks, curr, prev := p.unpack(w)
	if rel < ks {
		return w, false
	}
	if curr, prev = p.advance(ks, curr, prev, rel); curr != 0 || prev != 0 {
		return w, false
	}
	return p.pack(rel, 0, 0) | retiredBit, true
}

// successor returns the origin and word of the state that replaces the
// retired word w, read at now.
func (p *Params) successor(w uint64, origin, now int64) (int64, uint64) {
	if !isRetired(w) || w == resetWord {
		k, _ := floorDivMod(now, p.period)
		return k, 0
	}
	ks, curr, prev := p.unpack(w &^ retiredBit)
	return origin + ks, p.pack(0, curr, prev)
}

// spentState returns the origin and word of a state made at now that is
// new from spent on and owes owed beyond it (see NewSpent): NewWord's
// word at the window of now, or, when the window that word charges lies
// more than maxRel windows ahead, that window at the edge of a later
// origin.
func (p *Params) spentState(now, spent, owed int64) (origin int64, w uint64) {
	origin = p.Origin(now)
	if spent > now {
		ks := p.Origin(spent) - p.lag() // the window NewWord charges N to
		if ks > origin && uint64(ks)-uint64(origin) > uint64(p.maxRel) {
			return ks - p.maxRel, p.spentWord(p.maxRel, owed)
		}
	}
	w, _ = p.NewWord(origin, now, now, spent, owed) // now is in range: always Live
	return origin, w
}
