package shardlog

import (
	"math"

	"github.com/floodgate-go/floodgate/internal/chaos"
)

// RetireIdle retires the log if at now it holds no cost in its window, as
// a new log would not, and reports whether it did. The successor is closed
// before now.
func (l *Log) RetireIdle(now int64) bool {
	for {
		v, retired := l.current()
		if retired {
			return false
		}
		o, ok := l.evaluate(&v, now)
		if !ok {
			continue
		}
		if o.window != 0 || v.prevTs > now {
			return false
		}
		if cas128(v.r.slot(v.h), v.curTs, v.curMeta, uint64(now), v.curMeta|kindRetire<<kindShift) {
			return true
		}
	}
}

// Retire retires the log whatever it holds; its successor is new.
func (l *Log) Retire() {
	for {
		v, retired := l.current()
		if retired || cas128(v.r.slot(v.h), v.curTs, v.curMeta, resetBits, v.curMeta|kindRetire<<kindShift) {
			return
		}
	}
}

// Evict retires the log for good, as Retire does (its successor is new),
// and returns what NewSpent needs to make it again. spent is the instant
// from which the log it held would answer as a new log made then would:
// every request is charged at the newest entry's time or later, so it is
// the time of the newest entry that carries cost in the window ending
// there, plus T; with no cost there, the newest entry's time itself (a
// log made then charges no earlier). It may lie in the past, where it
// still binds requests whose readings are older. owed is what the log
// owes at the reading now (or at its newest entry's time, if later): the
// log made again owes that until spent, which the debt, aging out with
// the entries that carry it, never passes. The reading and the
// retirement are one 16-byte CAS at the head, so no claim lands between
// them. (A refund that lands between them only lowers what the log held;
// the eviction counts as before it.) On a log already retired it returns
// math.MinInt64 and 0, and changes nothing.
func (l *Log) Evict(now int64) (spent, owed int64) {
	for {
		v, retired := l.current()
		if retired {
			return math.MinInt64, 0
		}
		o, ok := l.evaluate(&v, v.prevTs)
		if !ok {
			continue
		}
		spent, owed = v.prevTs, 0
		if o.window != 0 {
			// The first entry at which the cumulative cost reaches the
			// newest one's is the newest that carries cost.
			ts, ok := v.firstEnough(o.b, o.bCum, o.window)
			if !ok {
				continue
			}
			spent = l.p.leaves(ts)
			if now > v.prevTs {
				if o, ok = l.evaluate(&v, now); !ok {
					continue
				}
			}
			owed = max(0, int64(o.window)-l.p.limit)
		}
		chaos.Yield()
		if cas128(v.r.slot(v.h), v.curTs, v.curMeta, resetBits, v.curMeta|kindRetire<<kindShift) {
			return spent, owed
		}
		chaos.Lost("log.evict")
	}
}

// Successor returns the log that stands for a retired one: empty, closed
// before the instant the log was found idle, or new at now after a reset.
// Every call on a retired log returns the same *Log.
func (l *Log) Successor(now int64) *Log {
	if s := l.next.Load(); s != nil {
		return s
	}
	v, ok := l.look()
	for !ok {
		v, ok = l.look()
	}
	if kindOf(v.curMeta) != kindRetire {
		return New(l.p, now)
	}
	at := int64(v.curTs)
	if v.curTs == resetBits {
		at = now
	}
	s := New(l.p, at)
	if l.next.CompareAndSwap(nil, s) {
		return s
	}
	return l.next.Load()
}
