package plan

import (
	"errors"
	"math"
	"testing"
	"time"
)

// ask is a test's ask: a policy, a key, a cost and a shadow switch.
type ask struct {
	p, key string
	n      int64
	shadow bool
}

// prepare is Prepare over asks, each policy's capacity 10.
func prepare(t *testing.T, asks []ask) (*Plan, error) {
	t.Helper()
	var p Plan
	err := p.Prepare(len(asks),
		func(i, j int) bool { return asks[i].p == asks[j].p && asks[i].key == asks[j].key },
		func(i int) bool { return asks[i].shadow },
		func(i int) int64 { return asks[i].n },
		func(int) int64 { return 10 })
	return &p, err
}

// TestPrepare: repeats merge into the first, summed and saturating;
// costs below 1 or past the capacity are Bad, refusing the request when
// enforced; Live keeps the rest in order.
func TestPrepare(t *testing.T) {
	p, err := prepare(t, []ask{{"a", "k", 3, false}, {"b", "k", 2, true}, {"a", "k", 4, false}, {"c", "k", 11, true}, {"a", "j", 1, false}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Of[2] != 0 || p.Cost[0] != 7 || p.Of[1] != 1 {
		t.Fatalf("Of %v, Cost %v: want ask 2 merged into ask 0, of cost 7", p.Of[:p.N], p.Cost[:p.N])
	}
	if !p.Bad[3] || p.Refused != -1 || p.NLive != 3 || p.Live[0] != 0 || p.Live[1] != 1 || p.Live[2] != 4 {
		t.Fatalf("Bad %v, Refused %d, Live %v", p.Bad[:p.N], p.Refused, p.Live[:p.NLive])
	}
	// A shadow Bad ask refuses alone: it is the refusal unless an
	// enforced ask refused, or a shadow before it.
	if r := p.Refusal(-1); r != 3 {
		t.Errorf("no live refusal: %d, want the Bad shadow 3", r)
	}
	if r := p.Refusal(1); r != 1 {
		t.Errorf("the shadow at 1 refused: %d, want 1", r)
	}
	if r := p.Refusal(2); r != 4 {
		t.Errorf("the enforced ask 4 refused: %d, want 4", r)
	}

	p, _ = prepare(t, []ask{{"a", "k", 1, true}, {"b", "k", 0, false}, {"a", "k", math.MaxInt64, true}, {"c", "k", 12, false}})
	if p.Refused != 1 || p.Cost[0] != math.MaxInt64 || !p.Bad[0] {
		t.Fatalf("Refused %d, Cost %v, Bad %v: want the enforced 1 refusing, the shadows' sum saturated and Bad", p.Refused, p.Cost[:p.N], p.Bad[:p.N])
	}
	if r := p.Refusal(-1); r != 1 {
		t.Errorf("Refusal %d, want 1", r)
	}
	// A cost below 1 merged with any other stays below 1.
	p, _ = prepare(t, []ask{{"a", "k", -3, false}, {"a", "k", 5, false}})
	if !p.Bad[0] || p.Refused != 0 {
		t.Errorf("-3 and 5: Bad %v, Refused %d", p.Bad[:p.N], p.Refused)
	}
}

// TestPrepareErrors: no asks, too many, and one policy and key as a
// shadow and enforced.
func TestPrepareErrors(t *testing.T) {
	for name, asks := range map[string][]ask{
		"none":  nil,
		"nine":  make([]ask, Max+1),
		"mixed": {{"a", "k", 1, false}, {"a", "k", 1, true}},
	} {
		if _, err := prepare(t, asks); !errors.Is(err, ErrAsks) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestVerdict: the refusing enforced answer; else the most restrictive
// enforced one (the shadows aside when one refused); else of all.
func TestVerdict(t *testing.T) {
	shadow := []bool{true, false, false, true}
	remaining := []int64{0, 5, 5, 1}
	reset := []time.Duration{time.Second, time.Second, 2 * time.Second, time.Second}
	v := func(refused int, sh []bool) int {
		return Verdict(len(sh), refused, func(i int) bool { return sh[i] },
			func(i int) int64 { return remaining[i] }, func(i int) time.Duration { return reset[i] })
	}
	if got := v(2, shadow); got != 2 {
		t.Errorf("enforced 2 refused: %d", got)
	}
	if got := v(0, shadow); got != 2 {
		t.Errorf("shadow 0 refused: %d, want 2 (5 left, the longer reset)", got)
	}
	if got := v(-1, shadow); got != 0 {
		t.Errorf("none refused: %d, want 0 (none left)", got)
	}
	if got := v(3, []bool{true, true, true, true}); got != 3 {
		t.Errorf("every ask a shadow, 3 refused: %d, want 3", got)
	}
}

// TestPick: the most owed, then the fewest remaining, then the
// longest ResetAfter, the first of equals; the answers passed over are
// not candidates, and with none left the index is -1.
func TestPick(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		name    string
		answers []Answer
		pass    []bool // passed over
		want    int
	}{
		{"none", nil, nil, -1},
		{"fewest remaining", []Answer{{0, 5, s}, {0, 2, s}, {0, 3, 9 * s}}, nil, 1},
		{"longest reset among equals", []Answer{{0, 2, s}, {0, 2, 3 * s}, {0, 2, 2 * s}}, nil, 1},
		{"first of equals", []Answer{{0, 4, s}, {0, 2, s}, {0, 2, s}}, nil, 1},
		{"owed first", []Answer{{0, 0, 9 * s}, {1, 7, s}, {3, 9, 0}}, nil, 2},
		{"passed over", []Answer{{0, 0, s}, {0, 5, s}, {0, 1, s}}, []bool{true, false, false}, 2},
		{"all passed over", []Answer{{0, 0, s}, {0, 5, s}}, []bool{true, true}, -1},
	} {
		var p Pick
		for i, a := range c.answers {
			if c.pass == nil || !c.pass[i] {
				p.Offer(i, a)
			}
		}
		if got := p.Index(); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
