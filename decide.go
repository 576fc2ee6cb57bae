package floodgate

import "github.com/floodgate-go/floodgate/internal/plan"

// decideIn decides one request in process, all or nothing: the one
// decision of Limits and LocalStore. The request asks the Limiters ls:
// with p nil, a Limits' request, each of them for n of key, in order,
// enforced; else a LocalStore's, whose asks p prepared (see plan.Plan),
// its live ones, each for its Cost of its Key, from ls[i].
//
// decideIn asks the enforced asks in order, then, if they all admitted
// and no shadow refused before (p.ShadowsRefused), the shadows in order,
// writing ask i's answer to all[i] and what it took to taken[i] (a
// Limits' request, which keeps no grant, may give taken nil). The first
// ask of a group that refuses ends its group (see refund), and every
// ask of a group that is not asked answers with its Limiter's Peek. It
// returns the index, among the asks that go to their Limiters (in
// p.Live; in ls for p nil), of the one that refused, or -1.
//
// A Limits' request has a loop of its own, with no groups and no plan
// to read, and one Limiter takes no grant, which it would never give
// back: through the general loop, two Limiters that admit took about
// 160 instructions a request more than before (11%), most of them
// spills. The arguments are loose, not a struct: a struct built for the
// call was copied through memory in widths that stall store forwarding
// (8% of Limits' time in a CPU profile).
func decideIn(ls []*Limiter, key string, n int64, all []Decision, taken *[MaxPolicies]grant, p *plan.Plan, asks []Ask) int {
	if p == nil {
		if len(ls) == 1 { // nothing to give back: one Limiter's own answer
			l := ls[0]
			if l.allowAt(key, l.now(), n, nil, &all[0]); !all[0].Allowed {
				return 0
			}
			return -1
		}
		if taken == nil {
			taken = new([MaxPolicies]grant) // on the stack: allowAt keeps no grant
		}
		for k, l := range ls {
			l.allowAt(key, l.now(), n, &taken[k], &all[k])
			if !all[k].Allowed {
				refund(ls, inOrder[:len(ls)], k, key, nil, all, taken)
				return k
			}
		}
		return -1
	}
	refused := -1
	for _, shadows := range [2]bool{false, true} {
		var group, at [MaxPolicies]int8 // the group's asks, and their places in p.Live
		m := 0
		for k, i := range p.Live[:p.NLive] {
			if p.Shadow[i] == shadows {
				group[m], at[m] = i, int8(k)
				m++
			}
		}
		if refused >= 0 || shadows && p.ShadowsRefused {
			for _, i := range group[:m] {
				all[i] = ls[i].Peek(asks[i].Key) // charged nothing
			}
			continue
		}
		for j, i := range group[:m] {
			l := ls[i]
			l.allowAt(asks[i].Key, l.now(), p.Cost[i], &taken[i], &all[i])
			if !all[i].Allowed {
				refund(ls, group[:m], j, "", asks, all, taken)
				refused = int(at[j])
				break
			}
		}
	}
	return refused
}

// inOrder is the asks of a Limits' request, its one group: every
// Limiter, in order.
var inOrder = func() (o [MaxPolicies]int8) {
	for i := range o {
		o[i] = int8(i)
	}
	return o
}()

// refund ends a group of decideIn's request (its asks, in order) whose
// k-th ask refused: the asks before it give back what they took (taken),
// the latest first, and every other ask of the group answers with its
// Limiter's Peek for its key (asks[i].Key; key, for asks nil), after
// the refunds. A grant given back counts as a denial in its Limiter's
// Stats.
func refund(ls []*Limiter, group []int8, k int, key string, asks []Ask, all []Decision, taken *[MaxPolicies]grant) {
	for j := k - 1; j >= 0; j-- {
		i := group[j]
		ls[i].giveBack(&taken[i])
	}
	for j, i := range group {
		if j == k {
			continue
		}
		if asks != nil {
			key = asks[i].Key
		}
		all[i] = ls[i].Peek(key)
	}
}
