package storekit_test

import (
	"fmt"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/storekit"
)

// counter is a toy backend's policy: how many units each key has left,
// out of its capacity, with no refill.
type counter struct {
	capacity int64
	left     map[string]int64
}

func (c *counter) holds(key string) int64 {
	if n, ok := c.left[key]; ok {
		return n
	}
	return c.capacity
}

// decide is a toy backend's Decide: the asks prepared by a Plan, the
// live ones charged in order and given back if one refuses, and the
// request's Decision picked by Verdict. (A real Store also decides the
// shadows after the enforced asks, and answers the asks it did not
// charge with a Peek's answer; see the package documentation.)
func decide(asks []floodgate.Ask, policies []*counter) (floodgate.Decision, int, error) {
	var p storekit.Plan
	err := p.Prepare(len(asks),
		func(i, j int) bool { return policies[i] == policies[j] && asks[i].Key == asks[j].Key },
		func(i int) bool { return asks[i].Shadow },
		func(i int) int64 { return asks[i].N },
		func(i int) int64 { return policies[i].capacity })
	if err != nil {
		return floodgate.Decision{RetryAfter: floodgate.Never}, 0, err
	}
	all := make([]floodgate.Decision, len(asks))
	live := -1 // the index in p.Live of the ask that refused
	if p.Refused < 0 {
		for k, i := range p.Live[:p.NLive] {
			c, key := policies[i], asks[i].Key
			left := c.holds(key)
			if left < p.Cost[i] {
				all[i] = floodgate.Decision{Limit: c.capacity, Remaining: left, RetryAfter: floodgate.Never}
				for _, j := range p.Live[:k] { // give back what the others took
					policies[j].left[asks[j].Key] += p.Cost[j]
				}
				live = k
				break
			}
			c.left[key] = left - p.Cost[i]
			all[i] = floodgate.Decision{Allowed: true, Limit: c.capacity, Remaining: left - p.Cost[i]}
		}
	}
	for i := range all {
		if f := int(p.Of[i]); f != i {
			all[i] = all[f] // a repeat answers as the ask it repeats
		} else if p.Bad[i] {
			all[i] = floodgate.Decision{Limit: policies[i].capacity, RetryAfter: floodgate.Never}
		}
	}
	refused := p.Refusal(live)
	return all[storekit.Verdict(asks, all, refused)], refused, nil
}

// A backend decides two asks, a client's per-minute and per-day
// policies, through a Plan and Verdict: admitted while both hold the
// cost, refused by the first that does not, which then charges neither.
func Example() {
	minute := &counter{capacity: 3, left: map[string]int64{}}
	day := &counter{capacity: 5, left: map[string]int64{}}
	policies := []*counter{minute, day}
	for range 4 {
		asks := []floodgate.Ask{{Key: "client", N: 2}, {Key: "client", N: 2}}
		d, refused, err := decide(asks, policies)
		fmt.Println(d.Allowed, d.Remaining, refused, err)
		minute.left["client"] = minute.capacity // a new minute
	}
	// Output:
	// true 1 -1 <nil>
	// true 1 -1 <nil>
	// false 1 1 <nil>
	// false 1 1 <nil>
}
