package shardedlog

import (
	"math"
	"sync"
)

// MutexLog is the sliding window log in its plain form, behind a mutex: a
// slice of (time, cost) entries, summed over the window on every request.
// It is written apart from Log, with the same semantics (charging at the
// newest entry's time, the refund rule, retirement), so that the tests can
// hold the lock-free log against it; the root package also serves
// "sliding_log" with it on machines without a 16-byte CAS.
type MutexLog struct {
	mu      sync.Mutex
	p       Params
	entries []logEntry // oldest first; those expired at newest are dropped
	start   int        // entries is buf[start:]: dropped entries free the front
	buf     []logEntry
	total   int64 // the cost of entries
	newest  int64 // the newest entry's time, or the time the log opened
	retired bool
	carry   int64 // once retired: the instant it went idle
	reset   bool  // once retired: by a reset
	next    *MutexLog
}

type logEntry struct{ ts, cost int64 }

// NewMutex returns an empty log, closed before now.
func NewMutex(p Params, now int64) *MutexLog {
	return &MutexLog{p: p, newest: now}
}

// NewMutexSpent returns a MutexLog as NewSpent returns a Log: one
// entry of cost N at spent − T, which every request until spent finds in
// its window.
func NewMutexSpent(p Params, now, spent int64) *MutexLog {
	if spent <= now {
		return NewMutex(p, now)
	}
	return mutexHolding(p, p.enters(spent), p.limit)
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

func (m *MutexLog) answer(t, n int64, allowed bool) (Decision, bool) {
	if m.retired {
		return Decision{}, false
	}
	charged := max(t, m.newest)
	w, first := m.window(charged)
	fits := n >= 1 && n <= m.p.limit && w+n <= m.p.limit
	d := Decision{Allowed: fits, Limit: m.p.limit}
	if fits {
		d.Remaining = m.p.limit - w - n
		d.ResetAfter = m.p.after(charged, t)
		if allowed {
			m.push(logEntry{charged, n})
			m.newest = charged
			m.trim()
		}
		return d, true
	}
	d.Remaining = max(0, m.p.limit-w)
	if w > 0 {
		d.ResetAfter = m.p.after(m.newest, t)
	}
	if n < 1 || n > m.p.limit {
		d.RetryAfter = Never
		return d, true
	}
	need, gone := w+n-m.p.limit, int64(0)
	for _, e := range m.entries[first:] {
		if gone += e.cost; gone >= need {
			d.RetryAfter = m.p.after(e.ts, t)
			break
		}
	}
	return d, true
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
	return m.answer(now, n, true)
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
	return m.answer(now, 1, false)
}

// Refund is Log.Refund under a mutex.
func (m *MutexLog) Refund(now, n int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if k := len(m.entries) - 1; !m.retired && k >= 0 && m.entries[k].ts == now && m.entries[k].cost == n {
		m.entries[k].cost = 0
		m.total -= n
	}
	return true
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
func (m *MutexLog) Evict(int64) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired {
		return math.MinInt64
	}
	m.retired, m.reset = true, true
	_, first := m.window(m.newest)
	for i := len(m.entries) - 1; i >= first; i-- {
		if m.entries[i].cost > 0 {
			return m.p.leaves(m.entries[i].ts)
		}
	}
	return m.newest
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
