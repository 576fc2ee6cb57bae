package shardlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Portable states: a MutexLog's fields as bytes, for a backend that
// keeps each key's state outside the process and replaces it with a
// compare-and-swap (see storekit's Machine). Only a live log is written.
// Loading checks every field against what the transitions keep, and
// bounds the entries it makes by the rule's (Bound: each costs at least
// 1 but a refunded one, which a later entry follows) and by the bytes
// given (each entry takes two at least), so that untrusted bytes never
// make it allocate without bound.
//
// The form: the newest entry's time (or the time the log opened), its
// running cost (cum, 64 bits here), a flag byte (1: the newest entry
// gave a refund already), the count of entries, and each entry, oldest
// first, as two uvarints: its age (the newest time less its own, below
// the period) and its cost.

// MinBytes is the length of an empty log's portable state.
const MinBytes = 8 + 8 + 1 + 1

// maxEntries is the most entries a log of rule p holds: those that carry
// cost (at most Bound), each perhaps followed by one that a refund
// emptied.
func (p *Params) maxEntries() int64 { return 2*p.Bound() + 2 }

// Open makes m an empty log of rule p, closed before now, whose running
// cost starts at cum (a Grant's identity, see Cum).
func (m *MutexLog) Open(p Params, now int64, cum uint64) {
	buf := m.buf[:0]
	*m = MutexLog{p: p, newest: now, cum: cum, buf: buf, entries: buf}
}

// Cum is the running cost of m's newest entry: a grant's identity for
// RefundCum, while m is the log that made it.
func (m *MutexLog) Cum() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cum
}

// RefundCum is RefundGrant for the grant whose running cost was cum: it
// gives back n of it if it is still the newest entry and gave no refund
// yet (the running cost of a live log's newest entry names it: every
// later entry costs at least 1 more than what refunds gave back after
// it), and reports whether it did; otherwise the refund lapses (the key
// keeps the cost: stricter, never looser). n above the entry's cost
// lapses too.
func (m *MutexLog) RefundCum(cum uint64, n int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := len(m.entries) - 1
	if n < 1 || !m.refundable() || m.cum != cum || n > m.entries[k].cost {
		return false
	}
	m.give(n)
	return true
}

// ConvertKeeping is ConvertTo whose converted log carries m's running
// cost on, so that a grant of m never names an entry of its successor.
func (m *MutexLog) ConvertKeeping(at int64, q Params) *MutexLog {
	cum := m.Cum()
	c := m.ConvertTo(at, q)
	if c != nil {
		c.cum += cum
	}
	return c
}

// FreshAt is the instant from which m answers as a new log: its last
// entry that carries cost has left the window, and no request is
// charged later than it would be on a log opened then.
func (m *MutexLog) FreshAt() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(m.entries) - 1; i >= 0; i-- {
		if m.entries[i].cost > 0 {
			return max(m.newest, m.p.leaves(m.entries[i].ts))
		}
	}
	return m.newest
}

// AppendState appends m's portable state to dst.
func (m *MutexLog) AppendState(dst []byte) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired {
		return dst, errors.New("shardlog: a retired log has no portable form")
	}
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.newest))
	dst = binary.BigEndian.AppendUint64(dst, m.cum)
	var flags byte
	if m.refunded {
		flags = 1
	}
	dst = append(dst, flags)
	dst = binary.AppendUvarint(dst, uint64(len(m.entries)))
	for _, e := range m.entries {
		dst = binary.AppendUvarint(dst, uint64(m.newest)-uint64(e.ts))
		dst = binary.AppendUvarint(dst, uint64(e.cost))
	}
	return dst, nil
}

// LoadState makes m the live log of rule p whose portable state is src,
// reusing m's buffer, or returns an error that says what is wrong with
// src (m is then an empty log).
func (m *MutexLog) LoadState(p Params, src []byte) error {
	m.Open(p, 0, 0)
	if len(src) < MinBytes {
		return fmt.Errorf("a sliding log's state is at least %d bytes, got %d", MinBytes, len(src))
	}
	newest := int64(binary.BigEndian.Uint64(src))
	cum := binary.BigEndian.Uint64(src[8:])
	flags := src[16]
	if flags > 1 {
		return fmt.Errorf("a sliding log's state has flags %#x", flags)
	}
	rest := src[17:]
	count, k := binary.Uvarint(rest)
	if k <= 0 || k != uvarintLen(count) {
		return errors.New("a sliding log's count of entries is not a uvarint in its shortest form")
	}
	rest = rest[k:]
	if count > uint64(p.maxEntries()) || count > uint64(len(rest)/2) {
		return fmt.Errorf("a sliding log's state claims %d entries, in %d bytes, where a log of limit %d holds at most %d",
			count, len(rest), p.limit, p.maxEntries())
	}
	buf := m.buf[:0]
	if cap(buf) < int(count) {
		buf = make([]logEntry, 0, count)
	}
	var total int64
	last := uint64(math.MaxUint64)
	for i := uint64(0); i < count; i++ {
		age, k := binary.Uvarint(rest)
		if k <= 0 || k != uvarintLen(age) {
			return fmt.Errorf("a sliding log's entry %d has no age in a shortest uvarint", i)
		}
		rest = rest[k:]
		cost, k := binary.Uvarint(rest)
		if k <= 0 || k != uvarintLen(cost) {
			return fmt.Errorf("a sliding log's entry %d has no cost in a shortest uvarint", i)
		}
		rest = rest[k:]
		switch {
		case age >= uint64(p.period):
			return fmt.Errorf("a sliding log's entry %d is %d ns old, outside its window of %d ns", i, age, p.period)
		case age > last:
			return fmt.Errorf("a sliding log's entry %d is older than the one before it", i)
		case newest < math.MinInt64+int64(age):
			return fmt.Errorf("a sliding log's entry %d lies before the clock's first instant", i)
		case cost > uint64(p.Bound()-total):
			return fmt.Errorf("a sliding log's entries cost more than %d, the most a log of limit %d holds", p.Bound(), p.limit)
		}
		last = age
		total += int64(cost)
		buf = append(buf, logEntry{ts: newest - int64(age), cost: int64(cost)})
	}
	switch {
	case len(rest) != 0:
		return fmt.Errorf("a sliding log's state has %d bytes after its entries", len(rest))
	case count > 0 && last != 0:
		return errors.New("a sliding log's newest entry is not at its newest time")
	}
	*m = MutexLog{p: p, entries: buf, buf: buf, total: total, newest: newest, cum: cum, refunded: flags == 1}
	return nil
}

// uvarintLen is the length of v's shortest uvarint, the only form a
// state is read in: one state, one form, so that a backend that
// compares bytes compares states.
func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}
