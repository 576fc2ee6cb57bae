package shardlog

import "github.com/floodgate-go/floodgate/internal/chaos"

// Changing a key's rule (floodgate's Limiter.SetRule). What a log holds at
// the instant T of the change is its allowance there: N minus the cost in
// the window that ends where a request at T is charged, c = max(T, the
// newest entry's time). The converted log of rule q is closed before c
// and holds one entry at c of cost N' − min(held', N'), held' being held
// less what the limit was lowered by (at least 0: the key has spent what
// it spent): at T it holds exactly min(held', N'), and that cost leaves
// the window at c + T', the
// new rule's pace. The old entries' own times are not kept: under a
// shorter period some of them would leave sooner than they would have,
// handing back more than the key held. A key that owes (held below 0)
// owes as much under the new rule, up to its bound: the entry then costs
// min(N' − held, q.Bound()).

// ConvertTo retires l whatever it holds, in the same 16-byte CAS at the
// head as it reads the window (so no claim lands between them), and
// returns the log of rule q that holds what l held at at, converted (see
// above). It returns nil, and changes nothing, when l had retired
// already. The retired l names the new log as its Successor. A refund
// that meets l afterwards is dropped (stricter, never looser).
func (l *Log) ConvertTo(at int64, q Params) *Log {
	for {
		v, retired := l.current()
		if retired {
			return nil
		}
		o, ok := l.evaluate(&v, at)
		if !ok {
			continue
		}
		held := l.p.limit - int64(o.window)
		// The successor is named before the retirement, so that no caller
		// that meets the retired log can name another; the log is live
		// until the CAS, and no one asks a live log for its successor.
		c := holding(q, o.charged, converted(l.p, q, held))
		l.next.Store(c)
		chaos.Yield()
		if cas128(v.r.slot(v.h), v.curTs, v.curMeta, resetBits, v.curMeta|kindRetire<<kindShift) {
			return c
		}
		chaos.Lost("log.convert")
	}
}

// ConvertTo is Log.ConvertTo under the mutex.
func (m *MutexLog) ConvertTo(at int64, q Params) *MutexLog {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired {
		return nil
	}
	charged := max(at, m.newest)
	w, _ := m.window(charged)
	m.retired, m.reset = true, true
	m.next = mutexHolding(q, charged, converted(m.p, q, m.p.limit-w))
	return m.next
}

// converted is the cost that the log of rule q converted from one of
// rule p that held held holds (see above).
func converted(p, q Params, held int64) int64 {
	if held > 0 {
		held = max(0, held-max(0, p.limit-q.limit)) // a lower limit takes its difference
	}
	return min(q.limit-min(held, q.limit), q.Bound())
}

// spentCost is the cost of the entry that a log made spent holds, owing
// owed: N + owed, at most Bound.
func (p *Params) spentCost(owed int64) int64 {
	return p.limit + min(max(0, owed), p.Bound()-p.limit)
}

// ConvertSpent returns what a key that MaxKeys evicted under rule p,
// remembered as (spent, owed) (see Log.Evict), is remembered as under
// rule q after a change at the instant at: the log made again from
// (spent, owed) converted at at as a log held then would be (see above),
// holding nothing: one entry, charged at at or at the entry's time if
// later, of N' plus what it owed, as far as q's bound holds it. A spent
// at or before at is returned as it is, with nothing owed: it binds
// nothing from at on. A later spent never converts to an earlier one.
func (p *Params) ConvertSpent(spent, owed, at int64, q *Params) (int64, int64) {
	if spent <= at {
		return spent, 0
	}
	c := max(at, p.enters(spent)) // the entry is in the window there: spent > c
	cost := converted(*p, *q, -max(0, owed))
	return q.leaves(c), cost - q.limit
}

// FullAt returns the instant from which a log of rule p spent at now
// answers as new: when a cost charged at now leaves the window.
func (p *Params) FullAt(now int64) int64 { return p.leaves(now) }
