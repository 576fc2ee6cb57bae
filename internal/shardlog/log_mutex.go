package shardlog

import (
	"math"
	"sync"
	"time"
)

// MutexLog is the sliding window log in its plain form, behind a mutex: a
// slice of (time, cost) entries, summed over the window on every request.
// It is written apart from Log, with the same semantics (charging at the
// newest entry's time, charges and their bound, the refund rules and when
// they lapse, retirement), so that the tests can hold the lock-free log
// against it; the root package also serves "sliding_log" with it on
// machines without a 16-byte CAS.
type MutexLog struct {
	mu      sync.Mutex
	p       Params
	entries []logEntry // oldest first; those expired at newest are dropped
	start   int        // entries is buf[start:]: dropped entries free the front
	buf     []logEntry
	total   int64 // the cost of entries
	newest  int64 // the newest entry's time, or the time the log opened
	// cum is the cost charged since the log opened, less refunds: the
	// newest entry's cumulative cost, as Log counts it (a Grant's).
	cum uint64
	// refunded says a refund gave back part of the newest entry: no
	// refund matches it again (on Log, the newest is then the refund's
	// entry, of cost 0).
	refunded bool
	retired  bool
	carry    int64 // once retired: the instant it went idle
	reset    bool  // once retired: by a reset
	next     *MutexLog
}

type logEntry struct{ ts, cost int64 }

// NewMutex returns an empty log, closed before now.
func NewMutex(p Params, now int64) *MutexLog {
	return &MutexLog{p: p, newest: now}
}

// NewMutexSpent returns a MutexLog as NewSpent returns a Log: one
// entry of cost N + owed at spent − T, which every request until spent
// finds in its window.
func NewMutexSpent(p Params, now, spent, owed int64) *MutexLog {
	if spent <= now {
		return NewMutex(p, now)
	}
	return mutexHolding(p, p.enters(spent), p.spentCost(owed))
}

// mutexHolding is holding for a MutexLog.
func mutexHolding(p Params, at, cost int64) *MutexLog {
	m := NewMutex(p, at)
	if cost > 0 {
		m.push(logEntry{at, cost})
	}
	return m
}

// window returns the cost in the window that ends at charged, and the
// index of the first entry inside it. Entries are in time order, so those
// that left the window lead.
func (m *MutexLog) window(charged int64) (sum int64, first int) {
	sum = m.total
	for first < len(m.entries) && m.p.expired(m.entries[first].ts, charged) {
		sum -= m.entries[first].cost
		first++
	}
	return sum, first
}

func (m *MutexLog) answer(t, n int64, allowed bool) (Decision, Grant, bool) {
	if m.retired {
		return Decision{}, Grant{}, false
	}
	charged := max(t, m.newest)
	w, first := m.window(charged)
	fits := n >= 1 && n <= m.p.limit && w+n <= m.p.limit
	d := Decision{Allowed: fits, Limit: m.p.limit}
	if fits {
		d.Remaining = m.p.limit - w - n
		d.ResetAfter = m.p.after(charged, t)
		var g Grant
		if allowed {
			m.add(charged, n)
			g = Grant{ts: charged, cum: m.cum & cumMask, cost: n}
		}
		return d, g, true
	}
	return m.denial(t, n, w, first), Grant{}, true
}

// denial is the answer to a request of cost n at t that does not fit
// beside the cost w in the window, whose first entry is first.
func (m *MutexLog) denial(t, n, w int64, first int) Decision {
	d := Decision{Limit: m.p.limit, Remaining: max(0, m.p.limit-w), Owed: max(0, w-m.p.limit)}
	if w > 0 {
		d.ResetAfter = m.p.after(m.newest, t)
	}
	if n < 1 || n > m.p.limit {
		d.RetryAfter = Never
		return d
	}
	d.RetryAfter = m.until(t, w+n-m.p.limit, first, m.newest)
	return d
}

// until is the wait from t until need of the cost in the window, whose
// first entry is first, has left it, or, past what the entries hold, until
// an entry charged at last leaves it.
func (m *MutexLog) until(t, need int64, first int, last int64) time.Duration {
	gone := int64(0)
	for _, e := range m.entries[first:] {
		if gone += e.cost; gone >= need {
			return m.p.after(e.ts, t)
		}
	}
	return m.p.after(last, t)
}

// add charges an entry of cost n at charged, the newest.
func (m *MutexLog) add(charged, n int64) {
	m.push(logEntry{charged, n})
	m.newest = charged
	m.trim()
}

// push appends an entry, reusing the room that dropped entries left at the
// front before growing the buffer, so that a log in steady state does not
// allocate.
func (m *MutexLog) push(e logEntry) {
	if len(m.buf) == cap(m.buf) && m.start > 0 {
		n := copy(m.buf, m.buf[m.start:])
		m.buf, m.start = m.buf[:n], 0
	}
	m.buf = append(m.buf, e)
	m.entries = m.buf[m.start:]
	m.total += e.cost
	m.cum += uint64(e.cost)
	m.refunded = false
}

// trim drops the entries that have left every window still to come: those
// expired at the newest entry's time, before which nothing is charged.
func (m *MutexLog) trim() {
	for len(m.entries) > 0 && m.p.expired(m.entries[0].ts, m.newest) {
		m.total -= m.entries[0].cost
		m.entries, m.start = m.entries[1:], m.start+1
	}
}

// AllowN is Log.AllowN under a mutex.
func (m *MutexLog) AllowN(now, n int64) (Decision, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, _, live := m.answer(now, n, true)
	return d, live
}

// Take is AllowN reduced to its verdict.
func (m *MutexLog) Take(now, n int64) (bool, bool) {
	d, live := m.AllowN(now, n)
	return d.Allowed, live
}

// Peek is Log.Peek under a mutex.
func (m *MutexLog) Peek(now int64) (Decision, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, _, live := m.answer(now, 1, false)
	return d, live
}

// Refund is Log.Refund under a mutex.
func (m *MutexLog) Refund(now, n int64) bool {
	if n < 1 {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if k := len(m.entries) - 1; m.refundable() && m.entries[k].ts == now && m.entries[k].cost == n {
		m.give(n)
	}
	return true
}

// AllowGrant is Log.AllowGrant under a mutex.
func (m *MutexLog) AllowGrant(now, n int64) (Decision, Grant, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.answer(now, n, true)
}

// RefundGrant is Log.RefundGrant under a mutex: it lapses in the same
// cases.
func (m *MutexLog) RefundGrant(g Grant, n int64) (bool, error) {
	if err := g.check(n); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.refundGrant(g, n), nil
}

// refundGrant gives back n of the newest entry if g names it, and
// reports whether it did. m.mu is held.
func (m *MutexLog) refundGrant(g Grant, n int64) bool {
	k := len(m.entries) - 1
	if !m.refundable() || m.entries[k].ts != g.ts || m.entries[k].cost != g.cost || m.cum&cumMask != g.cum {
		return false
	}
	m.give(n)
	return true
}

// SettleGrant is Log.SettleGrant under a mutex: RefundGrant and Peek
// under one lock, answered unless the log has retired.
func (m *MutexLog) SettleGrant(g Grant, n, now int64) (Decision, bool, error) {
	if err := g.check(n); err != nil {
		return Decision{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refundGrant(g, n)
	d, _, live := m.answer(now, 1, false)
	return d, live, nil
}

// refundable reports whether a refund may give back part of the newest
// entry: the log is live, has one, and has not refunded it.
func (m *MutexLog) refundable() bool { return !m.retired && len(m.entries) > 0 && !m.refunded }

// give gives back n of the newest entry's cost.
func (m *MutexLog) give(n int64) {
	m.entries[len(m.entries)-1].cost -= n
	m.total -= n
	m.cum -= uint64(n)
	m.refunded = true
}

// ChargeN is Log.ChargeN under a mutex.
func (m *MutexLog) ChargeN(now, n int64) (Decision, bool, error) {
	if n < 1 {
		return Decision{}, true, m.p.chargeError(n, 0)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired {
		return Decision{}, false, nil
	}
	charged := max(now, m.newest)
	w, first := m.window(charged)
	N := m.p.limit
	if !m.p.fits(w, n, opCharge) {
		d := Decision{Limit: N, Remaining: max(0, N-w), Owed: max(0, w-N)}
		if w > 0 {
			d.ResetAfter = m.p.after(m.newest, now)
		}
		if need := w + 1 - N; need > 0 {
			d.RetryAfter = m.until(now, need, first, m.newest)
		}
		return d, true, m.p.chargeError(n, w)
	}
	d := Decision{Allowed: true, Limit: N, Remaining: max(0, N-w-n), Owed: max(0, w+n-N), ResetAfter: m.p.after(charged, now)}
	if need := w + n + 1 - N; need > 0 {
		d.RetryAfter = m.until(now, need, first, charged)
	}
	m.add(charged, n)
	return d, true, nil
}

// RetireIdle is Log.RetireIdle under a mutex.
func (m *MutexLog) RetireIdle(now int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired || m.newest > now {
		return false
	}
	if w, _ := m.window(now); w != 0 {
		return false
	}
	m.retired, m.carry = true, now
	return true
}

// Retire is Log.Retire under a mutex.
func (m *MutexLog) Retire() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.retired {
		m.retired, m.reset = true, true
	}
}

// Evict is Log.Evict under a mutex: the reading and the retirement are
// one critical section.
func (m *MutexLog) Evict(now int64) (spent, owed int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired {
		return math.MinInt64, 0
	}
	m.retired, m.reset = true, true
	_, first := m.window(m.newest)
	for i := len(m.entries) - 1; i >= first; i-- {
		if m.entries[i].cost > 0 {
			w, _ := m.window(max(now, m.newest))
			return m.p.leaves(m.entries[i].ts), max(0, w-m.p.limit)
		}
	}
	return m.newest, 0
}

// Successor is Log.Successor under a mutex.
func (m *MutexLog) Successor(now int64) *MutexLog {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.next != nil {
		return m.next
	}
	if !m.retired {
		return NewMutex(m.p, now)
	}
	at := m.carry
	if m.reset {
		at = now
	}
	m.next = NewMutex(m.p, at)
	return m.next
}
