package stress

import (
	"fmt"
	"math/big"
	"slices"

	"github.com/floodgate-go/floodgate"
)

// ledger records admissions by request time and checks them against the
// invariant of an algorithm's family. Times must be added in order.
type ledger struct {
	family family
	limit  int64 // N, or the refill per period for buckets
	period int64
	burst  int64
	times  []int64
	counts []int64
}

func newLedger(f family, r floodgate.Rule) *ledger {
	return &ledger{family: f, limit: r.Limit, period: int64(r.Period), burst: r.Capacity()}
}

func (l *ledger) add(at, n int64) {
	if n == 0 {
		return
	}
	if len(l.times) > 0 && at < l.times[len(l.times)-1] {
		panic("ledger times must not go backwards")
	}
	l.times = append(l.times, at)
	l.counts = append(l.counts, n)
}

func sortedCopy(ts []int64) []int64 {
	s := slices.Clone(ts)
	slices.Sort(s)
	return s
}

// check verifies the family's invariant over every admission so far.
func (l *ledger) check() error {
	switch l.family {
	case bucket:
		return l.checkBucket()
	case logged:
		var sum int64
		for i, j := 0, 0; j < len(l.times); j++ {
			sum += l.counts[j]
			for l.times[j]-l.times[i] >= l.period {
				sum -= l.counts[i]
				i++
			}
			if sum > l.limit {
				return fmt.Errorf("%d admitted in the window ending at %d, above %d", sum, l.times[j], l.limit)
			}
		}
	case fixed:
		for k, c := range l.perWindow() {
			if c.count > l.limit {
				return fmt.Errorf("window %d admitted %d, above %d", k, c.count, l.limit)
			}
		}
	case sliding:
		windows := l.perWindow()
		for k, c := range windows {
			prev := windows[k-1].count
			// curr×T + prev×(T − e_max) ≤ N×T, where e_max is the latest
			// offset admitted in the window: the weakest weight any
			// admission in it saw.
			lhs := new(big.Int).Mul(big.NewInt(c.count), big.NewInt(l.period))
			lhs.Add(lhs, new(big.Int).Mul(big.NewInt(prev), big.NewInt(l.period-c.lastOffset)))
			if lhs.Cmp(new(big.Int).Mul(big.NewInt(l.limit), big.NewInt(l.period))) > 0 {
				return fmt.Errorf("window %d: %d admitted with %d in the window before (latest offset %d): estimate above %d",
					k, c.count, prev, c.lastOffset, l.limit)
			}
		}
	}
	return nil
}

// checkBucket verifies that no span [t_i, t_j] admitted more than
// B + Limit × (t_j − t_i) / Period, for all i ≤ j, in one pass: with S
// the running total, it is (S_j − B)×P − L×t_j ≤ min over i ≤ j of
// S_{i−1}×P − L×t_i.
func (l *ledger) checkBucket() error {
	var before int64 // S_{i−1}
	best := int64(0)
	for j, t := range l.times {
		if v := before*l.period - l.limit*t; j == 0 || v < best {
			best = v
		}
		before += l.counts[j]
		if (before-l.burst)*l.period-l.limit*t > best {
			return fmt.Errorf("by %d, %d admitted: above burst %d + %d per %d ns over some span", t, before, l.burst, l.limit, l.period)
		}
	}
	return nil
}

// checkTight is check, plus the demand-exceeds-supply property of the
// latest admission time: nothing more could have been admitted then.
func (l *ledger) checkTight() error {
	if err := l.check(); err != nil {
		return err
	}
	if len(l.times) == 0 {
		return fmt.Errorf("nothing admitted")
	}
	last := l.times[len(l.times)-1]
	switch l.family {
	case bucket:
		var total int64
		for _, c := range l.counts {
			total += c
		}
		if want := l.burst + (last-l.times[0])*l.limit/l.period; total != want {
			return fmt.Errorf("admitted %d by %d, want exactly %d", total, last, want)
		}
	case logged:
		var sum int64
		for i, t := range l.times {
			if last-t < l.period {
				sum += l.counts[i]
			}
		}
		if sum != l.limit {
			return fmt.Errorf("the window ending at %d holds %d, want exactly %d", last, sum, l.limit)
		}
	case fixed:
		k, _ := divmod(last, l.period)
		if c := l.perWindow()[k].count; c != l.limit {
			return fmt.Errorf("window %d admitted %d, want exactly %d", k, c, l.limit)
		}
	case sliding:
		windows := l.perWindow()
		k, e := divmod(last, l.period)
		// One more would not fit: (curr+1)×T + prev×(T−e) > N×T.
		lhs := new(big.Int).Mul(big.NewInt(windows[k].count+1), big.NewInt(l.period))
		lhs.Add(lhs, new(big.Int).Mul(big.NewInt(windows[k-1].count), big.NewInt(l.period-e)))
		if lhs.Cmp(new(big.Int).Mul(big.NewInt(l.limit), big.NewInt(l.period))) <= 0 {
			return fmt.Errorf("window %d at offset %d: another request would have fit; the round was not saturated", k, e)
		}
	}
	return nil
}

type windowTotal struct {
	count      int64
	lastOffset int64
}

func (l *ledger) perWindow() map[int64]windowTotal {
	m := map[int64]windowTotal{}
	for i, t := range l.times {
		k, e := divmod(t, l.period)
		w := m[k]
		w.count += l.counts[i]
		w.lastOffset = max(w.lastOffset, e)
		m[k] = w
	}
	return m
}

func divmod(t, period int64) (int64, int64) {
	k, e := t/period, t%period
	if e < 0 {
		k, e = k-1, e+period
	}
	return k, e
}
