package floodgate

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/internal/tsc"
	"golang.org/x/sys/cpu"
)

// TSCClock is an opt-in Clock on the processor's time stamp counter, for
// machines where reading the monotonic clock costs as much as a request
// (tens of nanoseconds on some virtual machines). Now is one
// plain RDTSC, a multiply and one load of a line that changes every 10ms;
// unlike the monotonic clock's ordered read it does not wait for the
// request's earlier cache misses.
//
// It is exact only to the extent its calibration is. A goroutine anchors
// the counter to the monotonic clock every 10ms and measures its rate over
// the last few seconds, so a reading strays from SystemClock's by at most
// the rate's error over one interval (well under a microsecond), and the
// error never accumulates. A reading that strays ahead lets a limiter
// refill that much early: at most the allowance of a microsecond, against
// a CoarseClock's whole resolution. A reading may also be a few cycles
// early, or, right after an anchor, step back by that error; a Limiter
// treats an earlier reading as finding fewer tokens, never more.
//
// NewTSCClock spends a millisecond measuring the counter's first rate.
// Where the processor has no invariant counter (amd64 without one, and
// every other architecture), Now reads SystemClock: the clock is then
// exact and no faster. Readings are on SystemClock's scale, so the two
// can be mixed. Stop ends the goroutine; the counter then runs on from
// the last anchor.
type TSCClock struct {
	_      cpu.CacheLinePad // the anchor every request reads, on its own line
	anchor atomic.Pointer[tscAnchor]
	_      cpu.CacheLinePad

	counter  func() uint64 // nil: the processor's counter
	mono     func() int64
	anchored chan<- struct{} // nil; a test's: told after each tick is handled
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

// tscAnchor is one reading of the counter and the monotonic clock taken
// together, and the counter's rate: nanoseconds per tick, 32.32 fixed
// point.
type tscAnchor struct {
	tsc uint64
	ns  int64
	mul uint64
}

// tscRefresh is how often a TSCClock anchors the counter; every
// tscRebaseEvery anchors it starts measuring the rate from a newer pair,
// so that a change of rate (a live migration, say) is followed within
// seconds.
// NewTSCClock spends tscWarmup measuring the first rate.
const (
	tscRefresh     = 10 * time.Millisecond
	tscRebaseEvery = 256
	tscWarmup      = int64(time.Millisecond)
)

// NewTSCClock starts a TSCClock, or, where the processor has no invariant
// time stamp counter, returns one that reads SystemClock (no goroutine
// runs then).
func NewTSCClock() *TSCClock {
	if !tsc.Invariant() {
		return &TSCClock{mono: systemClock{}.Now}
	}
	t := time.NewTicker(tscRefresh)
	c := newTSCClock(t.C, nil, nil, systemClock{}.Now, tscWarmup)
	go func() {
		<-c.done
		t.Stop()
	}()
	return c
}

// newTSCClock starts the anchoring goroutine on ticks of tick, with the
// counter and the monotonic clock given (a nil counter is the processor's).
// With a warmup, it first spins that many nanoseconds of the monotonic
// clock and anchors, so that the clock reads the counter from the start.
// Tests drive it with a channel and counters of their own, and no warmup;
// a non-nil anchored hears once each tick has been handled, so that a test
// changes its clocks only between anchors.
func newTSCClock(tick <-chan time.Time, anchored chan<- struct{}, counter func() uint64, mono func() int64, warmup int64) *TSCClock {
	c := &TSCClock{counter: counter, mono: mono, anchored: anchored, stop: make(chan struct{}), done: make(chan struct{})}
	base := c.pair()
	if warmup > 0 {
		for c.mono()-base.ns < warmup {
		}
		c.anchorFrom(base)
	}
	next, n := base, 0
	go func() {
		defer close(c.done)
		for {
			select {
			case <-c.stop:
				return
			case <-tick:
				now := c.anchorFrom(base)
				if n++; n%tscRebaseEvery == 0 {
					base, next = next, now
				}
				if c.anchored != nil {
					c.anchored <- struct{}{}
				}
			}
		}
	}()
	return c
}

// anchorFrom anchors the clock at a fresh pair, with the rate measured
// since base, and returns the pair.
func (c *TSCClock) anchorFrom(base tscAnchor) tscAnchor {
	now := c.pair()
	if mul, ok := tscRate(base, now); ok {
		now.mul = mul
		c.anchor.Store(&now)
	}
	return now
}

// pair reads the counter on both sides of one monotonic reading and keeps
// the midpoint, so that the two belong to one instant as closely as the
// reads allow; of three tries it keeps the tightest, so that a goroutine
// preempted between its reads does not skew the rate.
func (c *TSCClock) pair() tscAnchor {
	var best tscAnchor
	width := ^uint64(0)
	for range 3 {
		a := c.read()
		ns := c.mono()
		b := c.read()
		if b-a < width {
			best, width = tscAnchor{tsc: a + (b-a)/2, ns: ns}, b-a
		}
	}
	return best
}

// tscRate is the counter's rate between two pairs, or false if the pair
// says nothing (no time or no ticks between them, or a clock that went
// back).
func tscRate(from, to tscAnchor) (uint64, bool) {
	ticks := to.tsc - from.tsc
	ns := to.ns - from.ns
	if int64(ticks) <= 0 || ns <= 0 {
		return 0, false
	}
	hi, lo := uint64(ns)>>32, uint64(ns)<<32
	if hi >= ticks {
		return 0, false // more than 2^32 ns a tick: no counter runs that slow
	}
	mul, _ := bits.Div64(hi, lo, ticks)
	return mul, true
}

func (c *TSCClock) read() uint64 {
	if c.counter != nil {
		return c.counter()
	}
	return tsc.Read()
}

// Now returns nanoseconds on SystemClock's scale, extrapolated from the
// latest anchor by the counter.
func (c *TSCClock) Now() int64 {
	a := c.anchor.Load()
	if a == nil {
		return c.mono()
	}
	d := int64(c.read() - a.tsc)
	if d < 0 {
		d = 0 // a core a little behind the anchoring one: an earlier reading
	}
	hi, lo := bits.Mul64(uint64(d), a.mul)
	return a.ns + int64(hi<<32|lo>>32)
}

// Stop ends the anchoring goroutine and waits for it. Later readings
// extrapolate from the last anchor. Stop is idempotent.
func (c *TSCClock) Stop() {
	c.once.Do(func() {
		if c.stop != nil {
			close(c.stop)
			<-c.done
		}
	})
}
