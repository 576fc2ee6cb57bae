package policy

import (
	"cmp"
	"context"

	"github.com/floodgate-go/floodgate"
)

// This file takes a request's slots of a Set's in-flight policies
// (Set.Acquire), and holds them until the request ends (Held).

// Slotted reports whether s has in-flight policies: a request must take
// their slots with Acquire before Decide, and give them back when it
// ends.
func (s *Set) Slotted() bool { return len(s.slots) > 0 }

// Acquire takes a slot of key from each of the Set's in-flight policies,
// into h, before its rate policies decide the request (Decide or
// Reserve, which do not count it again): all or nothing, so that a
// request that any enforced in-flight policy refuses holds no slot, and
// is charged by no rate policy. A shadow policy that has no slot free
// counts the request as shadow_denied and lets it pass without one.
// It reports whether to go on, and writes the refusal to *refusal when
// not: its Limit is the policy's, Remaining 0, and RetryAfter and
// ResetAfter the policy's RetryAfter. The refusal is counted as denied
// under the policy; a caller gone before the Store answered is counted
// by the Store alone. A request refused afterwards, by a rate policy or
// another route, must Release h; one served Releases it when it ends.
func (s *Set) Acquire(ctx context.Context, key string, refusal *floodgate.Decision, h *Held) bool {
	for _, e := range s.slots {
		slot, ok, err := e.Slots.Acquire(ctx, key)
		switch {
		case ok:
			h.add(slot, e, s.uncounted)
			continue
		case err == nil && e.Spec.Shadow:
			s.count(e.count, entryShadow)
			continue
		case err == nil:
			s.count(e.count, entryDenied)
		}
		h.Release()
		wait := cmp.Or(e.Spec.RetryAfter, DefaultRetryAfter)
		*refusal = floodgate.Decision{Limit: int64(e.Slots.Limit()), RetryAfter: wait, ResetAfter: wait}
		return false
	}
	return true
}

// Held is the slots a request took (Set.Acquire), for as long as it
// runs: its zero value holds none. It is not safe for concurrent use.
type Held struct {
	n       int
	slots   [2 * floodgate.MaxPolicies]floodgate.Slot // two Sets, for a request that two routes decide
	entries [2 * floodgate.MaxPolicies]*Entry         // nil where the gauge is not counted
}

func (h *Held) add(slot floodgate.Slot, e *Entry, uncounted bool) {
	if uncounted {
		e = nil
	} else {
		e.count.Add(entryHeld, 1)
	}
	h.slots[h.n], h.entries[h.n] = slot, e
	h.n++
}

// Release gives back every slot h holds, once: a second Release gives
// back nothing, nor does Release of a nil Held.
func (h *Held) Release() {
	if h == nil {
		return
	}
	for i := range h.n {
		h.slots[i].Release() // false for a slot that holds nothing (a Store's FailOpen): counted all the same
		if h.entries[i] != nil {
			h.entries[i].count.Add(entryHeld, -1)
		}
		h.slots[i], h.entries[i] = floodgate.Slot{}, nil
	}
	h.n = 0
}

// Len returns the number of slots h holds.
func (h *Held) Len() int { return h.n }
