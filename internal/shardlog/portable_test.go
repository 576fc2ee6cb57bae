package shardlog

import (
	"bytes"
	"testing"
	"time"
)

// FuzzPortable: any bytes either load as a MutexLog's state, which
// writes back the same bytes and answers every method without
// panicking, or are refused; a log never holds more entries than the
// bytes could carry.
func FuzzPortable(f *testing.F) {
	p, _ := NewParams(5, time.Second)
	m := NewMutex(p, 1e9)
	m.AllowN(1e9+5, 3)
	m.ChargeN(1e9+9, 4)
	b, _ := m.AppendState(nil)
	f.Add(b, int64(1e9+7))
	f.Add(append(make([]byte, 17), 0xff, 0xff, 0xff, 0x7f), int64(0))
	f.Fuzz(func(t *testing.T, data []byte, now int64) {
		var m MutexLog
		if m.LoadState(p, data) != nil {
			return
		}
		if len(m.entries) > len(data)/2 {
			t.Fatalf("%d entries from %d bytes", len(m.entries), len(data))
		}
		if back, err := m.AppendState(nil); err != nil || !bytes.Equal(back, data) {
			t.Fatalf("a log's state writes back as %x, %v; read %x", back, err, data)
		}
		m.FreshAt()
		m.AllowN(now, 2)
		m.RefundCum(m.Cum(), 1)
		m.ChargeN(now, 7)
		m.Peek(now)
	})
}

// TestPortableRoundTrip: a log's state written and loaded again answers
// every later request as the log does, refunds included.
func TestPortableRoundTrip(t *testing.T) {
	p, _ := NewParams(5, time.Second)
	m := NewMutex(p, 1e9)
	now := int64(1e9)
	for i := range 300 {
		now += int64(i%5) * 90_000_000
		b, err := m.AppendState(nil)
		if err != nil {
			t.Fatal(err)
		}
		var m2 MutexLog
		if err := m2.LoadState(p, b); err != nil {
			t.Fatal(err)
		}
		if m.FreshAt() != m2.FreshAt() {
			t.Fatalf("step %d: FreshAt differs after a round trip", i)
		}
		n := int64(i%3 + 1)
		d1, _ := m.AllowN(now, n)
		d2, _ := m2.AllowN(now, n)
		if d1 != d2 {
			t.Fatalf("step %d: %+v, %+v after a round trip", i, d1, d2)
		}
		if i%4 == 0 && d1.Allowed {
			if m.RefundCum(m.Cum(), 1) != m2.RefundCum(m2.Cum(), 1) {
				t.Fatalf("step %d: a refund differs after a round trip", i)
			}
		}
	}
}
