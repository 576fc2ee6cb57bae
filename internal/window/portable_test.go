package window

import (
	"bytes"
	"testing"
	"time"
)

// FuzzPortable: any bytes either load as a MutexWindow's state, which
// writes back the same bytes and answers every method without
// panicking, or are refused.
func FuzzPortable(f *testing.F) {
	for _, kind := range []Kind{Fixed, Sliding} {
		p, _ := NewParams(kind, 5, time.Second)
		s := NewMutex(p, 1e9)
		s.AllowN(1e9+5, 3)
		b, _ := s.AppendState(nil)
		f.Add(b, int64(1e9+7), kind == Sliding)
	}
	f.Add(bytes.Repeat([]byte{0x7f}, 16), int64(-1<<63), true)
	f.Fuzz(func(t *testing.T, data []byte, now int64, sliding bool) {
		kind := Fixed
		if sliding {
			kind = Sliding
		}
		p, _ := NewParams(kind, 5, time.Second)
		var s MutexWindow
		if len(data) < MutexBytes || s.LoadState(p, data[:MutexBytes]) != nil {
			return
		}
		if back, err := s.AppendState(nil); err != nil || !bytes.Equal(back, data[:MutexBytes]) {
			t.Fatalf("a window's state writes back as %x, %v; read %x", back, err, data[:MutexBytes])
		}
		s.FreshAt()
		s.AllowN(now, 2)
		s.ChargeN(now, 7)
		s.Refund(now, 3)
		s.Peek(now)
	})
}

// TestPortableRoundTrip: a window's state written and loaded again
// answers every later request as the window does.
func TestPortableRoundTrip(t *testing.T) {
	for _, kind := range []Kind{Fixed, Sliding} {
		p, _ := NewParams(kind, 5, time.Second)
		s := NewMutex(p, 1e9)
		now := int64(1e9)
		for i := range 200 {
			now += int64(i%5) * 90_000_000
			b, err := s.AppendState(nil)
			if err != nil {
				t.Fatal(err)
			}
			var s2 MutexWindow
			if err := s2.LoadState(p, b); err != nil {
				t.Fatal(err)
			}
			if s.FreshAt() != s2.FreshAt() {
				t.Fatalf("step %d: FreshAt differs after a round trip", i)
			}
			d1, _ := s.AllowN(now, int64(i%3+1))
			d2, _ := s2.AllowN(now, int64(i%3+1))
			if d1 != d2 {
				t.Fatalf("kind %d, step %d: %+v, %+v after a round trip", kind, i, d1, d2)
			}
		}
	}
}
