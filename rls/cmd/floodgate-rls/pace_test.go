package main

import (
	"testing"
	"time"
)

// TestPacer: a load paced runs for its run, then sleeps for its rest,
// then runs again; a call after a pause (the next load) starts a new run
// and sleeps for nothing.
func TestPacer(t *testing.T) {
	clock := time.Unix(1e9, 0)
	var slept []time.Duration
	p := newPacer(2*time.Millisecond, 3*time.Millisecond)
	p.now = func() time.Time { return clock }
	p.sleep = func(d time.Duration) { slept = append(slept, d); clock = clock.Add(d) }
	step := func(d time.Duration) { clock = clock.Add(d); p.pace() }
	p.pace() // a load's first descriptor
	for range 3 {
		step(500 * time.Microsecond) // 1.5 ms of running: no rest yet
	}
	if len(slept) != 0 {
		t.Fatalf("slept %v within the first 2 ms", slept)
	}
	step(500 * time.Microsecond) // 2 ms: rest
	if len(slept) != 1 || slept[0] != 3*time.Millisecond {
		t.Fatalf("after 2 ms of running slept %v, want [3ms]", slept)
	}
	step(time.Millisecond)
	if len(slept) != 1 {
		t.Fatalf("1 ms after resting slept %v", slept)
	}
	step(time.Millisecond)
	if len(slept) != 2 {
		t.Fatalf("2 ms after resting slept %v, want a second rest", slept)
	}
	clock = clock.Add(time.Second) // the load ends; the next begins a second later
	p.pace()
	step(time.Millisecond)
	if len(slept) != 2 {
		t.Fatalf("a new load's first 1 ms slept: %v", slept)
	}
}
