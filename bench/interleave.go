package bench

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Slice calls l.Allow from g goroutines for d, each on ks[seq[i]] for
// successive i from a random start, pausing after each call for a random
// number of steps of a short busy loop, pause on average (0: none), and
// returns the wall time per call, pauses included, and the calls made and
// refused.
func Slice(l Limiter, ks []string, seq []uint32, g, pause int, d time.Duration) (ns float64, calls, denied int64) {
	var refused atomic.Int64
	calls, elapsed := runFor(g, d, picker(l, ks, seq, pause, &refused))
	return float64(elapsed.Nanoseconds()) / float64(calls), calls, refused.Load()
}

// picker is a timed worker that calls Allow on ks[seq[i]] for successive i
// from a random starting point, in rounds of 64 calls between looks at
// stop, the first round before the first look (a goroutine scheduled only
// after stop is set still counts calls, so a slice's ns per call is never
// a division by zero), and counts in denied the calls refused; with pause
// above 0 it pauses after each call (see Slice). seq must have a
// power-of-two length.
func picker(l Limiter, ks []string, seq []uint32, pause int, denied *atomic.Int64) func(*atomic.Bool) int {
	mask := len(seq) - 1
	return func(stop *atomic.Bool) int {
		i, n, x := rand.IntN(len(seq)), 0, rand.Uint64()|1
		for {
			for range 64 {
				if !l.Allow(ks[seq[i&mask]]) {
					denied.Add(1)
				}
				i++
				if pause > 0 {
					x = spin(x, pause)
				}
			}
			n += 64
			if stop.Load() {
				return n
			}
		}
	}
}

// spin is a pause between calls, which touches no memory: a random
// number of xorshift steps from 0 to 2×mean, drawn from x, and the state
// after them (each step depends on the last, so none can be left out).
func spin(x uint64, mean int) uint64 {
	for k := x % uint64(2*mean+1); k > 0; k-- {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// runFor runs g goroutines of work for d, once, and returns the calls
// they made, summed from what each returns, and the wall time taken.
func runFor(g int, d time.Duration, work func(stop *atomic.Bool) int) (calls int64, elapsed time.Duration) {
	var (
		stop  atomic.Bool
		total atomic.Int64
		wg    sync.WaitGroup
	)
	start := time.Now()
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			total.Add(int64(work(&stop)))
		}()
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	return total.Load(), time.Since(start)
}

// Interleaved is what Interleave measured, for each limiter: the median
// ns per call over the rounds, and the median over the rounds of its
// figure divided by the last limiter's in the same round, with that
// ratio's quartiles; and the share of its counted calls that were
// refused.
type Interleaved struct {
	Ns, Ratio, Q1, Q3, Denied []float64
}

// Interleave runs each limiter in ls for one slice of d, in turn, round
// after round, the order rotating each round and the heap collected
// before each, so that a burst of load from another tenant of a shared
// machine falls on all of them alike; a first round, not counted, warms
// them. seq must have a power-of-two length.
func Interleave(ls []Limiter, ks []string, seq []uint32, g, pause, rounds int, d time.Duration) Interleaved {
	for _, l := range ls {
		Slice(l, ks, seq, g, pause, d)
	}
	ns := make([][]float64, len(ls))
	ratio := make([][]float64, len(ls))
	cur := make([]float64, len(ls))
	calls := make([]int64, len(ls))
	denied := make([]int64, len(ls))
	for k := range rounds {
		runtime.GC()
		for j := range ls {
			i := (j + k) % len(ls)
			var c, r int64
			cur[i], c, r = Slice(ls[i], ks, seq, g, pause, d)
			calls[i] += c
			denied[i] += r
		}
		for i := range ls {
			ns[i] = append(ns[i], cur[i])
			ratio[i] = append(ratio[i], cur[i]/cur[len(ls)-1])
		}
	}
	var out Interleaved
	for i := range ls {
		out.Ns = append(out.Ns, quantile(ns[i], 0.5))
		out.Ratio = append(out.Ratio, quantile(ratio[i], 0.5))
		out.Q1 = append(out.Q1, quantile(ratio[i], 0.25))
		out.Q3 = append(out.Q3, quantile(ratio[i], 0.75))
		out.Denied = append(out.Denied, float64(denied[i])/float64(max(calls[i], 1)))
	}
	return out
}

// quantile returns the q-quantile of xs, the nearest rank below.
func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}
