package bucket

import (
	"bytes"
	"testing"
	"time"
)

// FuzzPortable: any bytes either load as a twin's state, which writes
// back the same bytes and answers every method without panicking, or
// are refused.
func FuzzPortable(f *testing.F) {
	p, err := NewParams(7, 300*time.Millisecond, 10)
	if err != nil {
		f.Fatal(err)
	}
	b, m := NewMutex(p, 1e9), NewLeakyMutex(p, 1e9)
	b.AllowN(1e9+5, 3)
	m.AllowN(1e9+5, 3)
	sb, _ := b.AppendState(nil)
	sm, _ := m.AppendState(nil)
	f.Add(sb, int64(1e9+7))
	f.Add(sm, int64(1e9+7))
	f.Add(make([]byte, 24), int64(-1<<63))
	f.Add(bytes.Repeat([]byte{0xff}, 24), int64(1<<62))
	f.Fuzz(func(t *testing.T, data []byte, now int64) {
		var b MutexBucket
		if len(data) >= MutexBytes && b.LoadState(p, data[:MutexBytes]) == nil {
			if back, err := b.AppendState(nil); err != nil || !bytes.Equal(back, data[:MutexBytes]) {
				t.Fatalf("a token bucket's state writes back as %x, %v; read %x", back, err, data[:MutexBytes])
			}
			b.FreshAt()
			b.AllowN(now, 2)
			b.ChargeN(now, 5)
			b.Refund(3)
			b.Peek(now)
		}
		var m LeakyMutex
		if len(data) >= LeakyBytes && m.LoadState(p, data[:LeakyBytes]) == nil {
			if back, err := m.AppendState(nil); err != nil || !bytes.Equal(back, data[:LeakyBytes]) {
				t.Fatalf("a leaky bucket's state writes back as %x, %v; read %x", back, err, data[:LeakyBytes])
			}
			m.FreshAt()
			m.AllowN(now, 2)
			m.ChargeN(now, 5)
			m.Refund(3)
			m.Peek(now)
			if _, err := m.AppendState(nil); err != nil && !m.retired {
				t.Fatal(err)
			}
		}
	})
}

// TestPortableRoundTrip: a twin's state written and loaded again
// answers every later request as the twin does.
func TestPortableRoundTrip(t *testing.T) {
	p, _ := NewParams(7, 300*time.Millisecond, 10)
	b, m := NewMutex(p, 1e9), NewLeakyMutex(p, 1e9)
	now := int64(1e9)
	for i := range 200 {
		now += int64(i%5) * 9_000_000
		n := int64(i%4 + 1)
		sb, err := b.AppendState(nil)
		if err != nil {
			t.Fatal(err)
		}
		sm, err := m.AppendState(nil)
		if err != nil {
			t.Fatal(err)
		}
		var b2 MutexBucket
		var m2 LeakyMutex
		if err := b2.LoadState(p, sb); err != nil {
			t.Fatal(err)
		}
		if err := m2.LoadState(p, sm); err != nil {
			t.Fatal(err)
		}
		if b.FreshAt() != b2.FreshAt() || m.FreshAt() != m2.FreshAt() {
			t.Fatalf("step %d: FreshAt differs after a round trip", i)
		}
		d1, _ := b.AllowN(now, n)
		d2, _ := b2.AllowN(now, n)
		d3, _ := m.AllowN(now, n)
		d4, _ := m2.AllowN(now, n)
		if d1 != d2 || d3 != d4 || d1 != d3 {
			t.Fatalf("step %d: %+v, %+v after a round trip; the meter %+v, %+v", i, d1, d2, d3, d4)
		}
		if i%7 == 0 {
			b.Refund(1)
			m.Refund(1)
		}
	}
}
