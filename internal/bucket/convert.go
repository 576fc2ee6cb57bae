package bucket

import "math/bits"

// Changing a key's rule (floodgate's Limiter.SetRule). A bucket that
// holds k tokens at the instant T of the change (k a fraction, or below 0
// while waiters hold reservations) holds min(k, B') tokens of the new rule
// at T, and refills at the new rate from there: no key gains a token from
// the change. In ticks, with the old debt d = max(TAT − T, 0) and
// tau − d the tokens held times the old interval I, the new debt is
//
//	tau' − floor((tau − d) × I' / I)   when tau − d < B' × I, else 0,
//
// rounded up to a whole tick of the new rule, so the new bucket never
// holds more than the old one did, and capped at the edge of the new
// word's range (a key then owes more than any reading can see). The
// conversion is a pure function of the old word, so the lock-free bucket
// and both twins convert alike.

// convert returns the debt, in q's ticks at the instant of the change, of
// a bucket of rule p whose live TAT is w, read at t (at position pos).
func (p *Params) convert(w, t int64, pos position, q *Params) int64 {
	if pos == tooEarly {
		return maxT // a reading before the range: the old bucket answers Never
	}
	held := p.tau() // full at the change (t is maxTick past the range)
	if w > t {
		held -= w - t // tokens × p.interval; below 0 with reservations
	}
	if held >= 0 {
		// held < B' × I, or the bucket is full under q: compare in 128 bits.
		if hi, lo := bits.Mul64(uint64(q.capacity), uint64(p.interval)); hi != 0 || uint64(held) < lo {
			ph, pl := bits.Mul64(uint64(held), uint64(q.interval))
			x, _ := bits.Div64(ph, pl, uint64(p.interval)) // < B' × I' ≤ 2^60: no overflow
			return q.tau() - int64(x)
		}
		return 0
	}
	ph, pl := bits.Mul64(uint64(-held), uint64(q.interval))
	if ph >= uint64(p.interval) {
		return maxT
	}
	x, r := bits.Div64(ph, pl, uint64(p.interval))
	if r != 0 {
		x++ // round the deficit up: the new bucket owes no less
	}
	if x > uint64(maxT-q.tau()) {
		return maxT
	}
	return q.tau() + int64(x)
}

// ConvertValue returns the word, under rule q relative to origin at, of
// the bucket whose live word under p relative to origin is v, converted at
// the instant at (see above). The new table's origin is the instant of
// the change, so that every conversion lands inside the new word's range.
func (p *Params) ConvertValue(v uint64, origin, at int64, q *Params) uint64 {
	t, pos := p.ticks(at, origin)
	return uint64(p.convert(int64(v), t, pos, q))
}

// FullAt returns the instant from which a bucket of rule p that is empty
// at now is full again: when a key that the sketch remembers as spent at
// a change of rule may start as new (see floodgate's MaxKeys).
func (p *Params) FullAt(now int64) int64 {
	return p.SpentValue(uint64(p.tau()), now)
}

// ConvertSpent returns what a key that MaxKeys evicted under rule p,
// remembered as full from spent on (the TAT Evict reported), is
// remembered as under rule q after a change at the instant at (see
// floodgate's SetRule): the TAT of a bucket of rule q that holds nothing
// at at, or, if the bucket of p made from spent owed more there, the TAT
// that owes what it owed, converted as ConvertValue converts a debt. A
// spent at or before at is returned as it is: it binds nothing from at
// on. The result rises with spent, whatever the rules, so that a key
// whose remembered instant was later is never remembered as less after.
func (p *Params) ConvertSpent(spent, at int64, q *Params) int64 {
	if spent <= at {
		return spent
	}
	v, _ := p.NewWord(at, at, spent) // at is the origin: always in range
	w := max(int64(p.ConvertValue(v, at, at, q)), q.tau())
	return q.SpentValue(uint64(w), at)
}

// ConvertTo retires b whatever it holds, in the same critical section as
// it reads the TAT, and returns the bucket of rule q, with origin at, that
// holds what b held at at, converted (see above). It returns nil, and
// changes nothing, when b had retired already: its successor holds its
// state. The retired b names the new bucket as its Successor. A refund or
// a cancellation that meets b afterwards is dropped (stricter, never
// looser).
func (b *MutexBucket) ConvertTo(at int64, q Params) *MutexBucket {
	t, pos := b.p.ticks(at, b.origin)
	b.mu.Lock()
	defer b.mu.Unlock()
	if isRetired(b.tat) {
		return nil
	}
	b.next = &MutexBucket{origin: at, tat: b.p.convert(b.tat, t, pos, &q), p: q}
	b.tat = retire(resetMark)
	return b.next
}

// ConvertTo is MutexBucket.ConvertTo for the meter: the instant its level
// drains to zero is the bucket's TAT, so it converts exactly as the
// bucket does.
func (m *LeakyMutex) ConvertTo(at int64, q Params) *LeakyMutex {
	t, pos := m.p.ticks(at, m.origin)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired {
		return nil
	}
	m.next = &LeakyMutex{origin: at, level: m.p.convert(m.empties(), t, pos, &q), p: q}
	m.retired, m.carry = true, resetMark
	return m.next
}
