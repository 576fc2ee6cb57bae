package main

import (
	"sync"
	"time"
)

// loadRun and loadRest pace a configuration's load while the service
// serves (config.Options.Pace): the load runs for loadRun, then rests
// for loadRest, so that it takes at most about half a core, and the
// requests keep the rest. A push of 10,000 rules takes some 30 ms of CPU
// to load here; paced, some 70 ms from its arrival to its use.
const loadRun, loadRest = 2 * time.Millisecond, 2 * time.Millisecond

// pacer is a config.Options.Pace: it sleeps for rest each time run has
// passed since it last woke. A call after a pause longer than rest (the
// next load) starts a new run. Loads are made one at a time; were two
// to run at once, they would share the pace.
type pacer struct {
	mu          sync.Mutex
	run, rest   time.Duration
	now         func() time.Time
	sleep       func(time.Duration)
	start, last time.Time
}

func newPacer(run, rest time.Duration) *pacer {
	return &pacer{run: run, rest: rest, now: time.Now, sleep: time.Sleep}
}

func (p *pacer) pace() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	switch {
	case now.Sub(p.last) > p.rest:
		p.start = now
	case now.Sub(p.start) >= p.run:
		p.sleep(p.rest)
		now = p.now()
		p.start = now
	}
	p.last = now
}
