package overlap

import "testing"

// TestDeepest: nested, chained and disjoint intervals, and an end and a
// start at one instant, which do not overlap.
func TestDeepest(t *testing.T) {
	for _, c := range []struct {
		ivs  []Interval
		want int
	}{
		{nil, 0},
		{[]Interval{{0, 10}}, 1},
		{[]Interval{{0, 10}, {10, 20}, {20, 30}}, 1},
		{[]Interval{{0, 10}, {9, 20}, {19, 30}}, 2},
		{[]Interval{{0, 100}, {10, 20}, {15, 30}, {40, 50}}, 3},
		{[]Interval{{5, 6}, {0, 1}, {2, 3}}, 1},
	} {
		if got := Deepest(c.ivs); got != c.want {
			t.Errorf("Deepest(%v) = %d, want %d", c.ivs, got, c.want)
		}
	}
}

// TestAskedIn: only the intervals asked in the span, from included.
func TestAskedIn(t *testing.T) {
	var l Log
	l.Add(5, Interval{6, 9})
	l.Add(10, Interval{10, 20})
	l.Add(20, Interval{21, 22})
	if got := l.AskedIn(10, 20); len(got) != 1 || got[0] != (Interval{10, 20}) {
		t.Errorf("AskedIn(10, 20) = %v", got)
	}
	if l.Len() != 3 {
		t.Errorf("Len = %d", l.Len())
	}
}
