package bucket

import (
	"encoding/binary"
	"testing"
	"time"
)

// FuzzTwins feeds the same operations to Bucket, MutexBucket and the
// leaky-bucket meter LeakyMutex, and requires the same answer from all
// three at every step: the lock-free bucket against its twin, and the token
// bucket against the leaky bucket. The input picks a rule,
// then a stream of operations: clock moves (forward, backward, far), costs
// (valid and not), peeks, refunds, idle retirement, resets, and evictions
// whose states are made again with NewSpent and its twins.
func FuzzTwins(f *testing.F) {
	f.Add([]byte{0, 10, 1, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{3, 7, 2, 1, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 4, 5, 200, 9, 9})
	f.Add([]byte{255, 255, 255, 255, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3})
	f.Add([]byte{1, 1, 0, 0, 6, 6, 6, 7, 7, 0, 0, 5, 5, 5, 5})
	f.Add([]byte{9, 200, 3, 2, 4, 128, 4, 129, 8, 8, 8, 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		limits := []int64{1, 2, 3, 7, 10, 1000, 999_983}
		periods := []time.Duration{7, time.Microsecond, time.Millisecond, time.Second, time.Minute, 30 * 24 * time.Hour}
		limit := limits[int(data[0])%len(limits)]
		period := periods[int(data[1])%len(periods)]
		burst := int64(data[2] % 8)
		p, err := NewParams(limit, period, burst)
		if err != nil {
			return // rules outside the range are covered by TestNewParamsRejects
		}
		origin := int64(binary.LittleEndian.Uint16(data[2:4])) << 20
		a, m, lk := New(p, origin), NewMutex(p, origin), NewLeakyMutex(p, origin)
		now := origin
		step := int64(period) / limit
		for i := 4; i < len(data); i++ {
			op, arg := data[i]%10, int64(data[i]/10)
			switch op {
			case 2: // Take on one twin, AllowN on the other: the same verdict
				n := arg % (p.capacity + 2)
				ta, la := a.Take(now, n)
				dm, lm := m.AllowN(now, n)
				tl, ll := lk.Take(now, n)
				if ta != dm.Allowed || la != lm || tl != ta || ll != la {
					t.Fatalf("op %d: Take(%d, %d) = %v %v, AllowN = %+v %v", i, now, n, ta, la, dm, lm)
				}
			case 0, 1:
				n := arg % (p.capacity + 2) // 0 and capacity+1 are invalid costs
				da, la := a.AllowN(now, n)
				dm, lm := m.AllowN(now, n)
				dl, ll := lk.AllowN(now, n)
				if da != dm || la != lm || da != dl || la != ll {
					t.Fatalf("op %d AllowN(%d, %d): lock-free %+v %v, mutex %+v %v, leaky %+v %v", i, now, n, da, la, dm, lm, dl, ll)
				}
				if da.Remaining < 0 || da.Remaining > p.capacity || da.RetryAfter < 0 || da.ResetAfter < 0 {
					t.Fatalf("op %d: decision out of range: %+v", i, da)
				}
			case 3:
				now += arg * step / 4
			case 4:
				now -= arg * step / 8
			case 5:
				da, la := a.Peek(now)
				dm, lm := m.Peek(now)
				dl, ll := lk.Peek(now)
				if da != dm || la != lm || da != dl || la != ll {
					t.Fatalf("op %d Peek: lock-free %+v %v, mutex %+v %v, leaky %+v %v", i, da, la, dm, lm, dl, ll)
				}
			case 6:
				n := arg % (p.capacity + 1)
				ra, rm, rl := a.Refund(n), m.Refund(n), lk.Refund(n)
				if ra != rm || ra != rl {
					t.Fatalf("op %d Refund(%d) differs: %v %v %v", i, n, ra, rm, rl)
				}
			case 7:
				ra, rm, rl := a.RetireIdle(now), m.RetireIdle(now), lk.RetireIdle(now)
				if ra != rm || ra != rl {
					t.Fatalf("op %d RetireIdle differs: %v %v %v", i, ra, rm, rl)
				}
			case 8:
				now += arg << 55 // far jumps: out of range, rebase
			case 9:
				switch arg % 4 {
				case 0:
					a.Retire()
					m.Retire()
					lk.Retire()
				case 1: // evict, and make the key again from what it held
					sa, sm, sl := a.Evict(now), m.Evict(now), lk.Evict(now)
					if sa != sm || sa != sl {
						t.Fatalf("op %d Evict(%d) differs: %d %d %d", i, now, sa, sm, sl)
					}
					a, m, lk = NewSpent(p, now, sa), NewMutexSpent(p, now, sm), NewLeakyMutexSpent(p, now, sl)
				}
			}
			// Replace retired states the way the registry does.
			_, la := a.Peek(now)
			_, lm := m.Peek(now)
			_, ll := lk.Peek(now)
			if la != lm || la != ll {
				t.Fatalf("op %d: one twin retired, another not", i)
			}
			if !la {
				a, m, lk = a.Successor(now), m.Successor(now), lk.Successor(now)
			}
		}
	})
}

// FuzzReserveTwins holds ReserveN and CancelReservation of Bucket,
// MutexBucket and LeakyMutex against each other, among grants, peeks and
// clock moves: the same wait, the same verdict, the same instant left
// behind (the bucket's TAT is the meter's emptying instant), and the same
// cancellations honoured, exact only for the latest reservation.
func FuzzReserveTwins(f *testing.F) {
	f.Add([]byte{0, 10, 1, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{3, 7, 2, 1, 12, 22, 32, 42, 52, 3, 1, 3, 11, 21, 31, 41})
	f.Add([]byte{1, 3, 0, 0, 92, 92, 92, 1, 91, 81, 3, 23, 5, 5, 1, 1})
	f.Add([]byte{4, 2, 5, 9, 250, 240, 230, 7, 17, 27, 4, 4, 4, 1, 6, 8})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		limits := []int64{1, 2, 3, 7, 10, 1000}
		periods := []time.Duration{7, time.Microsecond, time.Millisecond, time.Second, time.Hour}
		p, err := NewParams(limits[int(data[0])%len(limits)], periods[int(data[1])%len(periods)], int64(data[2]%8))
		if err != nil {
			return
		}
		origin := int64(binary.LittleEndian.Uint16(data[2:4])) << 20
		a, m, lk := New(p, origin), NewMutex(p, origin), NewLeakyMutex(p, origin)
		now := origin
		step := p.interval / p.scale
		type res struct{ a, m, l, n int64 }
		var held []res
		for i := 4; i < len(data); i++ {
			op, arg := data[i]%10, int64(data[i]/10)
			switch op {
			case 0, 1, 2: // reserve, with a longest wait of arg intervals (or none)
				n := arg%(p.capacity+1) + int64(op&1) // sometimes capacity+1: never
				limit := time.Duration(arg%5) * time.Duration(step)
				if op == 2 {
					limit = time.Duration(1 << 62)
				}
				wa, ta, oa, la := a.ReserveN(now, n, limit)
				wm, tm, om, lm := m.ReserveN(now, n, limit)
				wl, tl, ol, ll := lk.ReserveN(now, n, limit)
				if wa != wm || wa != wl || oa != om || oa != ol || la != lm || la != ll || ta != tm || ta != tl {
					t.Fatalf("op %d ReserveN(%d, %d, %v): lock-free %v %d %v %v, mutex %v %d %v %v, leaky %v %d %v %v",
						i, now, n, limit, wa, ta, oa, la, wm, tm, om, lm, wl, tl, ol, ll)
				}
				if oa && wa > limit {
					t.Fatalf("op %d: reserved a wait of %v beyond %v", i, wa, limit)
				}
				if oa {
					held = append(held, res{ta, tm, tl, n})
				}
			case 3, 4: // cancel a reservation: the latest, or another
				if len(held) == 0 {
					continue
				}
				k := len(held) - 1
				if op == 4 {
					k = int(arg) % len(held)
				}
				r := held[k]
				held = append(held[:k], held[k+1:]...)
				ca, cm, cl := a.CancelReservation(r.a, r.n), m.CancelReservation(r.m, r.n), lk.CancelReservation(r.l, r.n)
				if ca != cm || ca != cl {
					t.Fatalf("op %d CancelReservation differs: %v %v %v", i, ca, cm, cl)
				}
			case 5:
				n := arg % (p.capacity + 1)
				da, _ := a.AllowN(now, n)
				dm, _ := m.AllowN(now, n)
				dl, _ := lk.AllowN(now, n)
				if da != dm || da != dl {
					t.Fatalf("op %d AllowN(%d): %+v %+v %+v", i, n, da, dm, dl)
				}
			case 6:
				da, _ := a.Peek(now)
				dm, _ := m.Peek(now)
				dl, _ := lk.Peek(now)
				if da != dm || da != dl {
					t.Fatalf("op %d Peek: %+v %+v %+v", i, da, dm, dl)
				}
			case 7:
				now += arg * step / 2
			case 8:
				now -= arg * step / 8
			case 9:
				now += arg << 56 // out of range: the states retire
			}
			_, la := a.Peek(now)
			_, lm := m.Peek(now)
			_, ll := lk.Peek(now)
			if la != lm || la != ll {
				t.Fatalf("op %d: one twin retired, another not", i)
			}
			if !la {
				a, m, lk = a.Successor(now), m.Successor(now), lk.Successor(now)
				held = nil
			}
		}
	})
}
