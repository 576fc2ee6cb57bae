package main

import (
	"strings"
	"testing"
	"time"
)

// TestPacer: a load paced yields its processor every yield while it
// runs, rests after each run, and runs again; a call after a pause (the
// next load) starts a new run, with no rest.
func TestPacer(t *testing.T) {
	clock := time.Unix(1e9, 0)
	var events []string
	p := newPacer(2*time.Millisecond, 3*time.Millisecond, time.Millisecond)
	p.now = func() time.Time { return clock }
	p.sleep = func(d time.Duration) { events = append(events, "rest "+d.String()); clock = clock.Add(d) }
	p.gosched = func() { events = append(events, "yield") }
	step := func(d time.Duration) { clock = clock.Add(d); p.pace() }
	check := func(when string, want ...string) {
		t.Helper()
		if got := strings.Join(events, ", "); got != strings.Join(want, ", ") {
			t.Fatalf("%s: %q, want %q", when, got, want)
		}
	}
	p.pace() // a load's first call
	step(500 * time.Microsecond)
	check("0.5 ms in")
	step(500 * time.Microsecond)
	check("1 ms in", "yield")
	step(500 * time.Microsecond)
	check("1.5 ms in", "yield")
	step(500 * time.Microsecond)
	check("2 ms in", "yield", "rest 3ms")
	step(time.Millisecond)
	check("1 ms after the rest", "yield", "rest 3ms", "yield")
	step(time.Millisecond)
	check("2 ms after the rest", "yield", "rest 3ms", "yield", "rest 3ms")
	clock = clock.Add(time.Second) // the load ends; the next begins a second later
	p.pace()
	step(500 * time.Microsecond)
	check("a new load", "yield", "rest 3ms", "yield", "rest 3ms")
}
