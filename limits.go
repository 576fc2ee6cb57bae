package floodgate

import (
	"errors"
	"fmt"

	"github.com/floodgate-go/floodgate/atomicbucket"
	"github.com/floodgate-go/floodgate/registry"
)

// Limits decides each request against several Limiters together, for
// rules such as "10 a second and 1,000 an hour": a request passes only if
// every one of them admits it. The Limiters are asked in order; when one
// refuses, the ones before it are given back what they took (the key's
// grant and any global cap's), as a Limiter's own global cap is, so a
// refused request consumes nothing anywhere. Between the grant and its
// refund, a concurrent request for the key may find less than was there,
// never more, so no Limiter ever admits more than its rule.
//
// A refund is exact for every algorithm but the sliding log, which drops
// one when another grant for the key landed in between (it is then charged
// for the refused request, never the reverse): put a sliding-log Limiter
// last, where it is never refunded.
//
// Each Limiter keeps its own keys, clock and options; a key means the same
// client in all of them. Limits is safe for concurrent use. It does not
// own its Limiters: Close them when done.
type Limits struct {
	ls []*Limiter
}

// maxLimits is the most Limiters one Limits holds: a request keeps what
// each granted on its stack until all have answered.
const maxLimits = 8

// NewLimits returns Limits over ls, asked in the order given. It is an
// error to pass none, a nil Limiter, or more than 8.
func NewLimits(ls ...*Limiter) (*Limits, error) {
	if len(ls) == 0 {
		return nil, errors.New("floodgate: NewLimits needs at least one Limiter")
	}
	if len(ls) > maxLimits {
		return nil, fmt.Errorf("floodgate: NewLimits takes at most %d Limiters, got %d", maxLimits, len(ls))
	}
	for i, l := range ls {
		if l == nil {
			return nil, fmt.Errorf("floodgate: NewLimits: Limiter %d is nil", i)
		}
	}
	return &Limits{ls: append([]*Limiter(nil), ls...)}, nil
}

// Len returns the number of Limiters: not keys, which Limiter.Len counts.
//
// Deprecated: a Limits holds the Limiters given to NewLimits, in that
// order; size Decide's each by their number.
func (m *Limits) Len() int { return len(m.ls) }

// Allow reports whether one request for key passes every Limiter now, and
// if so consumes one from each.
func (m *Limits) Allow(key string) bool { return m.AllowN(key, 1).Allowed }

// AllowN asks every Limiter for n units for key, each at its own clock's
// now. It returns the most restrictive answer: on admission, the Decision
// of the Limiter with the fewest requests remaining (the longest
// ResetAfter among equals); on refusal, the refusing Limiter's, and
// nothing is consumed.
func (m *Limits) AllowN(key string, n int64) Decision {
	d, _ := m.Decide(key, n, nil)
	return d
}

// AllowEach is Decide without the index of the refusing Limiter.
//
// Deprecated: use Decide, which answers the same and also names the
// Limiter that refused.
func (m *Limits) AllowEach(key string, n int64, each []Decision) Decision {
	d, _ := m.Decide(key, n, each)
	return d
}

// Decide is AllowN that also reports each Limiter's own answer, and which
// one refused. each[k], for every k below len(each) (nil reports none;
// pass as many entries as Limiters for all), receives the k-th Limiter's
// answer: what it decided, or, for a refused request, what it would
// answer to one request now (its Peek, after any refund), so that every
// policy can be reported. The index is that of the Limiter that refused
// the request, or -1 if every one admitted it: a middleware counts a
// refusal under the policy that made it.
func (m *Limits) Decide(key string, n int64, each []Decision) (Decision, int) {
	var buf [maxLimits]Decision
	all := buf[:len(m.ls)]
	j := m.DecideTo(key, n, all)
	copy(each, all)
	if j >= 0 {
		return all[j], j
	}
	best := 0
	for k := 1; k < len(all); k++ {
		if d, b := &all[k], &all[best]; d.Remaining < b.Remaining || d.Remaining == b.Remaining && d.ResetAfter > b.ResetAfter {
			best = k
		}
	}
	return all[best], -1
}

// DecideTo is Decide for a caller that reads the answers in each: it
// writes the k-th Limiter's answer to each[k], as Decide does, and
// returns the index of the Limiter that refused, or -1. The request's own
// answer is then each[j] for the j-th, if each holds it. With an entry
// per Limiter, it copies no Decision whole, which Decide's answer costs: a
// few nanoseconds at a request's pace.
func (m *Limits) DecideTo(key string, n int64, each []Decision) int {
	if len(each) < len(m.ls) {
		var buf [maxLimits]Decision
		j := m.DecideTo(key, n, buf[:len(m.ls)])
		copy(each, buf[:])
		return j
	}
	each = each[:len(m.ls)] // nothing past the last Limiter's is written
	if len(m.ls) == 1 {     // nothing to give back: one Limiter's own answer
		l := m.ls[0]
		l.allowAt(key, l.now(), n, nil, &each[0])
		if !each[0].Allowed {
			return 0
		}
		return -1
	}
	var taken [maxLimits]grant
	for j, l := range m.ls {
		l.allowAt(key, l.now(), n, &taken[j], &each[j])
		if !each[j].Allowed {
			for k := j - 1; k >= 0; k-- {
				m.ls[k].giveBack(&taken[k])
			}
			for k := range each {
				if k != j {
					each[k] = m.ls[k].Peek(key)
				}
			}
			return j
		}
	}
	return -1
}

// grant is what one admitted request took from a Limiter, so that Limits
// can give it back whole: the key's state (an object, or the slot of an
// inline word, found again by the key's identity if it moved), and the
// global cap's state if the cap was asked.
type grant struct {
	s      State // for states held as objects
	id     registry.ID
	t      *registry.Table // for inline words: the slot the grant landed in
	i      int
	g      *atomicbucket.Bucket
	now, n int64
}

// refundKey gives the key's own state back what gr took from it.
func (l *Limiter) refundKey(gr *grant) {
	if gr.s != nil {
		l.returnObject(gr.s, gr.now, gr.n)
	} else {
		l.returnWord(gr.id, gr.t, gr.i, gr.now, gr.n, false, 0)
	}
}

// giveBack returns all that an admitted request took, the global cap's
// share included: a later check refused the request. The decision then
// counts as a denial in Stats.
func (l *Limiter) giveBack(gr *grant) {
	l.refundKey(gr)
	if gr.g != nil {
		l.returnGlobal(gr.g, gr.now, gr.n)
	}
	if c := l.count; c != nil {
		c.Add(countAllowed, -1)
		c.Inc(countDenied)
	}
}

// Ask is one part of a request that DecideAll decides: N units for Key,
// from Limiter.
type Ask struct {
	Limiter *Limiter
	Key     string
	N       int64
}

// askStack is how many asks DecideAll keeps the grants of on its stack;
// past it, one allocation holds them.
const askStack = 16

// DecideAll decides the asks together, all or nothing, as Limits does for
// one key: each ask may name its own Limiter, key and cost. The asks are
// made in order; when one is refused, every one before it is given back
// what it took, so a refused request consumes nothing anywhere, and no
// Limiter ever admits more than its rule (between a grant and its refund
// a concurrent request may find less, never more). Two asks may name the
// same Limiter and key: the second then finds what the first left.
//
// each[k], for every k below len(each), receives the k-th ask's answer:
// what it decided, or, for a refused request, what its Limiter would
// answer to one request for its key now (its Peek, after any refund).
// DecideAll returns the index of the ask that refused, or -1 if every
// ask was admitted. An ask whose N is below 1, or whose Limiter is nil,
// is refused, as AllowN refuses it. A sliding log's refund is inexact
// (see Limits): put such asks last.
//
// Up to 16 asks, DecideAll allocates nothing.
func DecideAll(asks []Ask, each []Decision) int {
	var buf [askStack]grant
	taken := buf[:]
	if len(asks) > askStack {
		taken = make([]grant, len(asks))
	}
	var spare Decision
	for j := range asks {
		a := &asks[j]
		d := &spare
		if j < len(each) {
			d = &each[j]
		}
		if a.Limiter == nil {
			*d = Decision{RetryAfter: Never}
		} else {
			a.Limiter.allowAt(a.Key, a.Limiter.now(), a.N, &taken[j], d)
		}
		if d.Allowed {
			continue
		}
		for k := j - 1; k >= 0; k-- {
			asks[k].Limiter.giveBack(&taken[k])
		}
		for k := range min(len(each), len(asks)) {
			if k != j {
				if l := asks[k].Limiter; l != nil {
					each[k] = l.Peek(asks[k].Key)
				} else {
					each[k] = Decision{RetryAfter: Never}
				}
			}
		}
		return j
	}
	return -1
}
