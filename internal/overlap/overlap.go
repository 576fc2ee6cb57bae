// Package overlap measures how many intervals of time overlap at once:
// the in-flight tests' count of requests held together, from when each
// held its slot.
package overlap

import (
	"slices"
	"sync"
)

// Interval is a span of time, in ns of one clock, From to To.
type Interval struct{ From, To int64 }

// Deepest is the most intervals that overlap at any instant. An end and a
// start at one instant do not overlap: a slot given back and taken again
// in the same nanosecond is not two at once.
func Deepest(ivs []Interval) int {
	type edge struct {
		at   int64
		step int
	}
	es := make([]edge, 0, 2*len(ivs))
	for _, iv := range ivs {
		es = append(es, edge{iv.From, 1}, edge{iv.To, -1})
	}
	slices.SortFunc(es, func(a, b edge) int {
		if a.at != b.at {
			return int(min(max(a.at-b.at, -1), 1))
		}
		return a.step - b.step
	})
	depth, most := 0, 0
	for _, e := range es {
		depth += e.step
		most = max(most, depth)
	}
	return most
}

// Log collects intervals from many goroutines, each with the instant its
// request was asked (Asked, on the same clock), which says whether the
// request came after a given instant.
type Log struct {
	mu  sync.Mutex
	all []Asked
}

// Asked is an interval and when its request was asked, at or before From.
type Asked struct {
	Interval
	At int64
}

// Add records iv, asked at at.
func (l *Log) Add(at int64, iv Interval) {
	l.mu.Lock()
	l.all = append(l.all, Asked{iv, at})
	l.mu.Unlock()
}

// AskedIn returns the intervals whose requests were asked in [from, to).
func (l *Log) AskedIn(from, to int64) []Interval {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ivs []Interval
	for _, a := range l.all {
		if a.At >= from && a.At < to {
			ivs = append(ivs, a.Interval)
		}
	}
	return ivs
}

// Len is how many intervals l holds.
func (l *Log) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.all)
}
