package bucket

import (
	"math"
	"sync"
	"time"
)

// LeakyMutex is the leaky bucket as a meter in its textbook form — the
// continuous-state leaky bucket of ITU-T I.371 — behind a mutex. Its state
// is a level and the time it was last raised: the level drains at Limit per
// Period, a request of cost n conforms if and only if the drained level
// plus n fits the capacity B, and then the level rises by n. Levels and
// times are held in the ticks of Params, so the arithmetic is exact.
//
// The leaky bucket as a meter and the token bucket are the same machine
// (GCRA: the drained level is the bucket's debt, and the instant the level
// reaches zero is Bucket's theoretical arrival time), so floodgate's
// lock-free leaky bucket is Bucket itself. LeakyMutex is written
// independently of Bucket's transitions, from the level's point of view;
// it is the twin that the differential tests hold Bucket against, and the
// proof that the two algorithms decide alike.
type LeakyMutex struct {
	mu      sync.Mutex
	level   int64 // ticks of refill owed at lct; may be negative after a refund
	lct     int64 // ticks since origin at which level was last set
	origin  int64
	p       Params
	retired bool
	carry   int64 // once retired: the instant the level drains to 0, or resetMark
	next    *LeakyMutex
}

// NewLeakyMutex returns an empty meter (a full bucket) for rule p whose
// origin is now.
func NewLeakyMutex(p Params, now int64) *LeakyMutex {
	return &LeakyMutex{origin: now, p: p}
}

// NewLeakyMutexSpent returns a meter for rule p, made at now, whose level
// drains to zero at spent, as that of a meter made at spent does: NewSpent
// for the meter. With spent ≤ now it is NewLeakyMutex(p, now).
func NewLeakyMutexSpent(p Params, now, spent int64) *LeakyMutex {
	return NewLeakyMutex(p, max(now, spent))
}

// drained returns the level at t: it drains one tick per tick, and never
// below zero. A reading before lct finds the level higher, not lower.
func (m *LeakyMutex) drained(t int64) int64 {
	return max(0, m.level+m.lct-t)
}

// empties is the instant at which the level reaches zero.
func (m *LeakyMutex) empties() int64 { return m.lct + m.level }

// answer builds the Decision for a level of debt ticks.
func (m *LeakyMutex) answer(allowed bool, level int64) Decision {
	d := Decision{Allowed: allowed, Limit: m.p.capacity}
	m.p.fill(&d, level)
	return d
}

// AllowN conforms a request of cost n at now, or denies it and changes
// nothing. live is false once the meter has retired.
func (m *LeakyMutex) AllowN(now, n int64) (Decision, bool) {
	t, pos := m.p.ticks(now, m.origin)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired {
		return Decision{}, false
	}
	switch pos {
	case tooEarly:
		return m.p.outOfRange(), true
	case pastRange:
		m.retired, m.carry = true, resetMark
		if t != maxTick {
			m.carry = max(m.empties(), t)
		}
		return Decision{}, false
	}
	raised, d := m.judge(m.drained(t), n)
	if d.Allowed {
		m.level, m.lct = raised, t
	}
	return d, true
}

// judge decides a request of cost n against a drained level: the level
// it would leave, and the answer.
func (m *LeakyMutex) judge(level, n int64) (int64, Decision) {
	if !m.p.validCost(n) {
		d := m.answer(false, level)
		d.RetryAfter = Never
		return level, d
	}
	raised := level + n*m.p.interval
	if raised > m.p.tau() {
		d := m.answer(false, level)
		d.RetryAfter = m.p.duration(raised - m.p.tau())
		return level, d
	}
	return raised, m.answer(true, raised)
}

// ChargeN raises the level by n at now whatever it holds: Bucket.ChargeN,
// from the level's point of view. The level may then stand above the
// capacity; it drains at the rate like any level, and no request conforms
// until it is back within the capacity by the request's cost. A level
// that would empty past the state's range (2^61 ticks after the origin) is
// refused with ErrDebtBound, and nothing changes.
func (m *LeakyMutex) ChargeN(now, n int64) (d Decision, live bool, err error) {
	t, pos := m.p.ticks(now, m.origin)
	if pos == pastRange {
		_, live := m.AllowN(now, n) // retires the meter
		return Decision{}, live, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.retired:
		return Decision{}, false, nil
	case pos == tooEarly:
		return Decision{}, true, ErrEarlyCharge
	}
	level := m.drained(t)
	// The level may rise until it empties at maxT: n intervals at most
	// (maxT − t − level) / interval. t + level ≤ maxT holds for every
	// level the meter has stored.
	if n < 1 || n > (maxT-t-level)/m.p.interval {
		return Decision{}, true, m.p.chargeError(t+level, t, n)
	}
	m.level, m.lct = level+n*m.p.interval, t
	d = m.answer(true, m.level)
	if over := m.level + m.p.interval - m.p.tau(); over > 0 {
		d.RetryAfter = m.p.duration(over) // until a request of 1 conforms
	}
	return d, true, nil
}

// ReserveN raises the level by n at now if it will have drained enough
// within maxWait for the request to conform, and returns the wait and the
// instant the raised level drains to zero, which CancelReservation needs:
// Bucket.ReserveN, from the level's point of view. The level may stand
// above the capacity meanwhile, by what the waiting requests hold.
func (m *LeakyMutex) ReserveN(now, n int64, maxWait time.Duration) (wait time.Duration, empties int64, ok, live bool) {
	t, pos := m.p.ticks(now, m.origin)
	if pos != inRange {
		_, live := m.AllowN(now, n) // retires a meter past its range
		return 0, 0, false, live
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired {
		return 0, 0, false, false
	}
	if !m.p.validCost(n) {
		return 0, 0, false, true
	}
	raised := m.drained(t) + n*m.p.interval
	over := max(0, raised-m.p.tau())
	if over > m.p.waitTicks(maxWait) || t+raised > maxT {
		return m.p.duration(over), 0, false, true
	}
	m.level, m.lct = raised, t
	return m.p.duration(over), m.empties(), true, true
}

// CancelReservation lowers the level by a reservation of n whose raised
// level drained to zero at empties, if the meter has not been raised
// since.
func (m *LeakyMutex) CancelReservation(empties, n int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired || m.empties() != empties || !m.p.validCost(n) {
		return false
	}
	m.level -= n * m.p.interval
	return true
}

// Take is AllowN reduced to its verdict.
func (m *LeakyMutex) Take(now, n int64) (bool, bool) {
	d, live := m.AllowN(now, n)
	return d.Allowed, live
}

// Peek returns what AllowN(now, 1) would, and changes nothing.
func (m *LeakyMutex) Peek(now int64) (Decision, bool) {
	t, pos := m.p.ticks(now, m.origin)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired {
		return Decision{}, false
	}
	level := int64(0) // past the range, a meter that has drained is empty
	switch pos {
	case tooEarly:
		return m.p.outOfRange(), true
	case pastRange:
		if t != maxTick && m.empties() > t {
			level = m.drained(t)
		}
	default:
		level = m.drained(t)
	}
	_, d := m.judge(level, 1)
	return d, true
}

// Refund lowers the level by n that an earlier AllowN or ChargeN raised it
// by, exactly, above the capacity too (Bucket.Refund).
func (m *LeakyMutex) Refund(n int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired {
		return m.carry == resetMark
	}
	if m.p.validCost(n) {
		m.level = max(m.level-n*m.p.interval, floorTAT-m.lct)
	}
	return true
}

// RetireIdle retires the meter if it is empty at now.
func (m *LeakyMutex) RetireIdle(now int64) bool {
	t, pos := m.p.ticks(now, m.origin)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired || pos != inRange || m.empties() > t {
		return false
	}
	m.retired, m.carry = true, t
	return true
}

// Retire retires the meter whatever it holds; its successor is new.
func (m *LeakyMutex) Retire() {
	m.mu.Lock()
	m.retired, m.carry = true, resetMark
	m.mu.Unlock()
}

// Evict retires the meter for good, as Retire does, and returns, in the
// same critical section, the instant at which its level drains to zero
// (math.MinInt64 if it was already retired; then nothing changes): what
// Bucket.Evict returns for the same history.
func (m *LeakyMutex) Evict(int64) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired {
		return math.MinInt64
	}
	m.retired, m.carry = true, resetMark
	return m.p.SpentValue(uint64(m.empties()), m.origin)
}

// Successor returns the meter that replaces a retired one: new at now after
// a reset, else one that empties at the carried instant, moved to a later
// origin when that instant lies past the rebase point.
func (m *LeakyMutex) Successor(now int64) *LeakyMutex {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.next != nil {
		return m.next
	}
	s := &LeakyMutex{origin: now, p: m.p}
	switch {
	case !m.retired || m.carry == resetMark:
	case m.carry > rebaseAt:
		ns, ticks := m.p.rebaseShift()
		s.origin, s.lct = m.origin+ns, m.carry-ticks
	default:
		s.origin, s.lct = m.origin, m.carry
	}
	if m.retired {
		m.next = s
	}
	return s
}
