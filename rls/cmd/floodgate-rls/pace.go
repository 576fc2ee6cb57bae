package main

import (
	"runtime"
	"sync"
	"time"
)

// loadRun, loadRest and loadYield pace a configuration's load while the
// service serves (rls.LoadOptions.Pace, rls.Options.Pace): the load runs
// for loadRun, then rests for loadRest, so that it takes at most a
// third of a core and the requests keep the rest; and while it runs it
// yields its processor to the requests waiting for one every loadYield,
// so that none waits for it longer. A push of 10,000 rules, every rule
// changed, takes some 16 ms of CPU to load on a 2-core machine
// (BenchmarkLoadXDS), and some 20 ms more to put in force when every
// rule is in use on Redis (rls's BenchmarkSetConfig); paced, some
// 100–300 ms from the push to its use.
const loadRun, loadRest, loadYield = time.Millisecond, 2 * time.Millisecond, 50 * time.Microsecond

// pacer is an rls.LoadOptions.Pace: it yields (runtime.Gosched) each time
// yield has passed since it last did, and sleeps for rest each time run
// has passed since it last woke. A call after a pause longer than rest
// (the next load) starts a new run. Loads are made one at a time; were
// two to run at once, they would share the pace.
type pacer struct {
	mu                   sync.Mutex
	run, rest, yield     time.Duration
	now                  func() time.Time
	sleep                func(time.Duration)
	gosched              func()
	start, last, yielded time.Time
}

func newPacer(run, rest, yield time.Duration) *pacer {
	return &pacer{run: run, rest: rest, yield: yield, now: time.Now, sleep: time.Sleep, gosched: runtime.Gosched}
}

func (p *pacer) pace() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	switch {
	case now.Sub(p.last) > p.rest:
		p.start, p.yielded = now, now
	case now.Sub(p.start) >= p.run:
		p.sleep(p.rest)
		now = p.now()
		p.start, p.yielded = now, now
	case now.Sub(p.yielded) >= p.yield:
		p.gosched()
		now = p.now()
		p.yielded = now
	}
	p.last = now
}
