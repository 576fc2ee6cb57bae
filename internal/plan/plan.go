// Package plan prepares the asks of one decision for a Store, so that
// every Store answers a request alike: it merges the asks that repeat a
// policy and key into one of their summed cost, sets aside those that no
// state can admit, maps the answer of the asks that a Store decides
// back onto every ask, and picks the one answer that stands for the
// request: the most restrictive (see Pick), the one order of
// every decision of several limits. floodgate's in-process Store and
// Limits use it, and package storekit gives it to every other Store
// (redislimit's, and those outside this module); it knows none of them,
// only the asks' indices.
package plan

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Max is the most asks one decision takes (floodgate.MaxPolicies).
const Max = 8

// Plan is one decision's asks, prepared. An ask decides for itself and
// for the later asks of its policy and key (Of); of the asks that
// decide, those whose cost no state can admit (Bad) are answered before
// the Store is asked, and the rest (Live) are decided by the Store,
// together.
type Plan struct {
	// N is the number of asks.
	N int
	// Of is, for each ask, the ask that decides it: itself, or the first
	// before it of the same policy and key.
	Of [Max]int8
	// Cost is, for an ask that decides, the summed cost of every ask it
	// decides (math.MaxInt64 past that).
	Cost [Max]int64
	// Bad marks the asks that decide and whose Cost is below 1 (an ask's
	// N below 1) or above their policy's capacity.
	Bad [Max]bool
	// Shadow marks the shadow asks.
	Shadow [Max]bool
	// Live are the asks that decide and are not Bad, in order; NLive
	// their number.
	Live  [Max]int8
	NLive int
	// Refused is the first Bad enforced ask (the request is refused
	// before the Store is asked, and nothing is charged), or -1.
	Refused int
	// ShadowsRefused says a shadow ask is Bad: the shadows refuse, as a
	// shadow refusal does, before the Store is asked. The Store decides
	// the enforced asks alone, and charges no shadow.
	ShadowsRefused bool
	// badShadow is the first Bad shadow ask, or -1.
	badShadow int
}

// ErrAsks is wrapped by Prepare's errors.
var ErrAsks = errors.New("bad asks")

// Prepare fills p for n asks: same reports whether asks j < i name one
// policy and key; shadow, cost and capacity say what they say of ask i.
// It is an error to give no ask, more than Max, or two asks of one
// policy and key of which one is a shadow and the other is not.
func (p *Plan) Prepare(n int, same func(i, j int) bool, shadow func(i int) bool, cost, capacity func(i int) int64) error {
	if n < 1 || n > Max {
		return fmt.Errorf("%w: a decision takes 1 to %d asks, got %d", ErrAsks, Max, n)
	}
	p.N, p.NLive, p.Refused, p.badShadow, p.ShadowsRefused = n, 0, -1, -1, false
	for i := range n {
		p.Of[i], p.Shadow[i], p.Bad[i] = int8(i), shadow(i), false
		c := cost(i)
		if c < 1 {
			c = 0 // below 1 stays below 1, whatever is added
		}
		p.Cost[i] = c
		for j := range i {
			if int(p.Of[j]) != j || !same(i, j) {
				continue
			}
			if p.Shadow[j] != p.Shadow[i] {
				return fmt.Errorf("%w: asks %d and %d name one policy and key, one as a shadow and one enforced", ErrAsks, j, i)
			}
			p.Of[i] = int8(j)
			switch {
			case c == 0 || p.Cost[j] == 0:
				p.Cost[j] = 0
			case p.Cost[j] > math.MaxInt64-c:
				p.Cost[j] = math.MaxInt64
			default:
				p.Cost[j] += c
			}
			break
		}
	}
	for i := range n {
		if int(p.Of[i]) != i {
			continue
		}
		if p.Cost[i] < 1 || p.Cost[i] > capacity(i) {
			p.Bad[i] = true
			switch {
			case !p.Shadow[i] && p.Refused < 0:
				p.Refused = i
			case p.Shadow[i] && p.badShadow < 0:
				p.badShadow, p.ShadowsRefused = i, true
			}
			continue
		}
		p.Live[p.NLive] = int8(i)
		p.NLive++
	}
	return nil
}

// Refusal is the index of the ask that refused the request, from
// live, the index in Live of the ask that refused among the live ones
// (-1 for none): the first enforced ask that refused, else the first
// shadow, a Bad one included, else -1.
func (p *Plan) Refusal(live int) int {
	if p.Refused >= 0 {
		return p.Refused
	}
	r := -1
	if live >= 0 {
		r = int(p.Live[live])
		if !p.Shadow[r] {
			return r
		}
	}
	if b := p.badShadow; b >= 0 && (r < 0 || b < r) {
		return b
	}
	return r
}

// An Answer is what the order of restriction reads of one limit's
// answer to a request: what its key owes, how many requests of 1 it
// allows now, and how long until it is full again.
type Answer struct {
	Owed       int64
	Remaining  int64
	ResetAfter time.Duration
}

// Restricts reports whether a is more restrictive than b: whether it
// owes more, or as much and allows fewer requests now (Remaining), or
// as many and is full again later (ResetAfter). The most restrictive
// answer is the limit that a client whose requests several limits
// decide runs into first: a key that owes admits nothing until its debt
// is paid; of keys that owe alike, the one with the fewest requests left
// refuses first; and of those, the one that takes longest to be full
// again stays tight longest. A decision's answers (a Store's Decide,
// Limits) are ordered by Remaining and ResetAfter alone, their Owed
// left 0; a charge's (Charge, Settle) by what they owe first.
func (a Answer) Restricts(b Answer) bool {
	if a.Owed != b.Owed {
		return a.Owed > b.Owed
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.ResetAfter > b.ResetAfter
}

// A Pick picks the most restrictive of the answers offered to it (see
// Answer.Restricts), the first of equals: every decision of several
// limits in this module picks the answer that stands for the request
// with one. The zero Pick has been offered none.
type Pick struct {
	at   int // the index of the most restrictive answer, plus 1; 0 for none
	best Answer
}

// Offer offers the i-th answer, a. The indices offered grow.
func (p *Pick) Offer(i int, a Answer) {
	if p.at == 0 || a.Restricts(p.best) {
		p.at, p.best = i+1, a
	}
}

// Index is the index of the most restrictive answer offered, or -1 if
// none was.
func (p *Pick) Index() int { return p.at - 1 }

// Verdict is the index of the answer that stands for the whole request
// (see floodgate.Store's Decide), of n answers whose Remaining and
// ResetAfter say what they say, given the ask that refused (-1 for
// none): the refusing enforced ask's; with only shadows refusing, the
// most restrictive enforced answer (the refusing shadow's when every
// ask is a shadow); with none refusing, the most restrictive of all
// (see Pick).
func Verdict(n, refused int, shadow func(i int) bool, remaining func(i int) int64, reset func(i int) time.Duration) int {
	if refused >= 0 && !shadow(refused) {
		return refused
	}
	var best Pick
	for i := range n {
		if refused < 0 || !shadow(i) {
			best.Offer(i, Answer{Remaining: remaining(i), ResetAfter: reset(i)})
		}
	}
	if i := best.Index(); i >= 0 {
		return i
	}
	return refused
}

// Owing is the index of the answer that stands for a charge of n asks
// (a Settler's Charge or Settle), whose answer(i) says what ask i owes
// and holds: the most restrictive with what a key owes first (see
// Answer.Restricts), the first of equals, among the asks that are not
// shadows (every ask, if all are); 0 for none.
func Owing(n int, shadow func(i int) bool, answer func(i int) Answer) int {
	var best Pick
	for pass := range 2 {
		for i := range n {
			if pass == 0 && shadow(i) {
				continue
			}
			best.Offer(i, answer(i))
		}
		if i := best.Index(); i >= 0 {
			return i
		}
	}
	return 0
}
