package shardlog

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/twintest"
)

// FuzzLogTwins does the same for Log and MutexLog, whose rings also grow
// under bursts and shrink after gaps; then it drives a fresh pair through
// the same bytes as debt operations (see debtOps): charges into debt and
// past the bound, grants refunded in part.
func FuzzLogTwins(f *testing.F) {
	if !lockFreeLog {
		f.Skip("no 16-byte CAS on this machine")
	}
	f.Add([]byte{0, 1, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{3, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 13, 0, 0, 0, 0})
	f.Add([]byte{2, 0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 33, 43, 53, 7, 17, 27})
	f.Add([]byte{4, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 83, 1, 1, 1})
	// Debt: charges of 10 and to the bound on limit 2, grants refunded in
	// part and whole, denials while owing, time moving both ways.
	f.Add([]byte{1, 1, 0, 0, 81, 8, 7, 45, 121, 249, 170, 18, 3, 11, 83, 5, 201, 84, 0, 65, 8, 2, 3, 6, 5, 45, 8, 7})
	f.Add([]byte{0, 2, 0, 0, 9, 9, 9, 249, 249, 57, 0, 15, 113, 13, 2, 26, 3, 4, 12, 5, 253, 1, 7, 71})
	f.Add([]byte{3, 0, 0, 0, 18, 18, 11, 3, 18, 27, 4, 241, 1, 0, 133, 6, 2, 3, 10, 10, 10, 135, 15, 249, 7})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		limit, period := twintest.Pick(data, []int64{1, 2, 5, 16, 100}, []time.Duration{1, 10, time.Millisecond, time.Second, 30 * 24 * time.Hour})
		p, err := NewParams(limit, period)
		if err != nil {
			t.Fatal(err)
		}
		now := int64(int16(binary.LittleEndian.Uint16(data[2:4]))) * int64(period)
		twintest.Run(t, data[4:], now, limit, period, New(p, now), NewMutex(p, now), func(a, m twintest.Twin, now int64) (twintest.Twin, twintest.Twin) {
			return a.(*Log).Successor(now), m.(*MutexLog).Successor(now)
		}, func(now, sa, oa, sm, om int64) (twintest.Twin, twintest.Twin) {
			return NewSpent(p, now, sa, oa), NewMutexSpent(p, now, sm, om)
		})
		debtOps(t, data[4:], now, p, New(p, now), NewMutex(p, now))
	})
}

// debtOps applies one operation per byte of ops to a lock-free log a and
// its twin m, and fails at the first answer on which they differ: grants,
// grants with a Grant, Take, Peek, charges (small, to the bound and past
// it, below 1), Refund, RefundGrant of a recent grant in part or whole,
// idle retirement, the clock moving both ways.
func debtOps(t *testing.T, ops []byte, now int64, p Params, a *Log, m *MutexLog) {
	t.Helper()
	N, B := p.limit, p.Bound()
	step := max(1, p.period/N)
	var grants []Grant
	for i, b := range ops {
		op, arg := b%8, int64(b/8)
		n := arg % (N + 2) // 0 and N+1 are invalid costs
		switch op {
		case 0:
			da, la := a.AllowN(now, n)
			dm, lm := m.AllowN(now, n)
			if da != dm || la != lm {
				t.Fatalf("debt op %d AllowN(%d, %d): lock-free %+v, mutex %+v", i, now, n, da, dm)
			}
		case 1:
			dp, _ := m.Peek(now)
			switch {
			case arg >= 24: // to the bound, and one past it
				n = max(1, B-held(dp)+arg%2)
			case arg >= 16:
				n = arg * N
			default:
				n = arg // 0 is an error
			}
			da, la, ea := a.ChargeN(now, n)
			dm, lm, em := m.ChargeN(now, n)
			if da != dm || la != lm || (ea == nil) != (em == nil) || ea != nil && ea.Error() != em.Error() {
				t.Fatalf("debt op %d ChargeN(%d, %d): lock-free %+v %v, mutex %+v %v", i, now, n, da, ea, dm, em)
			}
			if da.Owed < 0 || da.Owed > B-N || da.Remaining < 0 || da.RetryAfter < 0 || da.ResetAfter < 0 {
				t.Fatalf("debt op %d: decision out of range: %+v", i, da)
			}
		case 2:
			da, ga, la := a.AllowGrant(now, n)
			dm, gm, lm := m.AllowGrant(now, n)
			if da != dm || ga != gm || la != lm {
				t.Fatalf("debt op %d AllowGrant(%d, %d): lock-free %+v %+v, mutex %+v %+v", i, now, n, da, ga, dm, gm)
			}
			if da.Allowed {
				grants = append(grants, ga)
			}
		case 3:
			if len(grants) == 0 {
				continue
			}
			g := grants[len(grants)-1-int(arg)%min(len(grants), 2)]
			back := 1 + arg%g.Cost()
			if arg%2 == 0 {
				ra, ea := a.RefundGrant(g, back)
				rm, em := m.RefundGrant(g, back)
				if ra != rm || ea != nil || em != nil {
					t.Fatalf("debt op %d RefundGrant(%+v, %d): lock-free %v %v, mutex %v %v", i, g, back, ra, ea, rm, em)
				}
				break
			}
			da, aa, ea := a.SettleGrant(g, back, now)
			dm, am, em := m.SettleGrant(g, back, now)
			if ea != nil || em != nil || am != true || (aa && da != dm) {
				t.Fatalf("debt op %d SettleGrant(%+v, %d, %d): lock-free %+v %v %v, mutex %+v %v %v", i, g, back, now, da, aa, ea, dm, am, em)
			}
		case 4:
			a.Refund(now, n)
			m.Refund(now, n)
		case 5:
			now += arg * step / 2
		case 6:
			now -= arg * step / 3
		case 7:
			da, la := a.Peek(now)
			dm, lm := m.Peek(now)
			if da != dm || la != lm {
				t.Fatalf("debt op %d Peek(%d): lock-free %+v, mutex %+v", i, now, da, dm)
			}
			if arg%4 == 0 {
				if a.RetireIdle(now) != m.RetireIdle(now) {
					t.Fatalf("debt op %d RetireIdle(%d) differs", i, now)
				}
			} else if ta, dm := mustTake(a, now, n), mustAllow(m, now, n); ta != dm.Allowed {
				t.Fatalf("debt op %d: Take(%d, %d) = %v, mutex %+v", i, now, n, ta, dm)
			}
		}
		if _, live := a.Peek(now); !live {
			a, m, grants = a.Successor(now), m.Successor(now), nil
		}
	}
	if c := a.ring.Load().capacity(); c > ringCap(p) {
		t.Fatalf("a ring of %d entries, above the %d the bound allows", c, ringCap(p))
	}
}

func mustTake(s twin, now, n int64) bool {
	ok, _ := s.Take(now, n)
	return ok
}

func mustAllow(s twin, now, n int64) Decision {
	d, _ := s.AllowN(now, n)
	return d
}
