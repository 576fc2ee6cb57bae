package memcachelimit

import (
	"context"

	"github.com/floodgate-go/floodgate"
)

// peek is a policy's Peek: one get, and the Machine's Peek.
func (s *Store) peek(ctx context.Context, p *policy, key string) (floodgate.Decision, error) {
	rl := p.cur.Load()
	k := p.key(key)
	var d floodgate.Decision
	o, err := s.guarded(ctx, func(t *trip) error {
		it, err := s.reread(t, k)
		if err != nil {
			return err
		}
		d, err = rl.m.Peek(stateOf(it), s.set.clock.Now())
		if err != nil {
			return &keyError{err}
		}
		return nil
	})
	switch o {
	case answered:
		return d, nil
	case abandoned:
		return floodgate.Decision{Limit: rl.capacity}, err
	}
	s.fallbacks.Add(1)
	switch s.set.mode {
	case FailOpen:
		return floodgate.Decision{Allowed: true, Unreached: true, Limit: rl.capacity, Remaining: rl.capacity - 1}, nil
	case FailClosed:
		return s.refusedUnreached(rl.capacity), nil
	case FailError:
		return s.refusedUnreached(rl.capacity), s.unreachedErr(err)
	}
	t, lerr := p.local()
	if lerr != nil { // CheckRule took the rule: not reached
		return s.refusedUnreached(rl.capacity), nil
	}
	return t.lim.Peek(key), nil
}

// fallbackMany is the FailureMode's answer for r's asks, which memcached
// did not decide for the reason cause, all or nothing: FailOpen admits,
// FailClosed refuses (by the first enforced ask), FailError refuses with
// its error, and FailLocal decides by the policies' in-process limiters,
// on the Store's LocalStore, as floodgate decides asks there. With h (a
// Reserve), FailLocal's Hold is the LocalStore's, which Settle then
// settles there; FailOpen's holds nothing, so that Settle charges the
// whole cost.
func (s *Store) fallbackMany(ctx context.Context, r *request, cause error, h *floodgate.Hold) (int, result, error) {
	s.fallbacks.Add(1)
	n := len(r.asks)
	all := r.all[:n]
	switch s.set.mode {
	case FailOpen:
		for i := range n {
			c := r.rl[i].capacity
			all[i] = floodgate.Decision{Allowed: true, Unreached: true, Limit: c, Remaining: max(c-r.asks[i].N, 0)}
		}
		if h != nil {
			h.N, h.Admitted = n, true
		}
		return -1, resFailOpen, nil
	case FailClosed, FailError:
		refused := 0
		for i := range n {
			if !r.asks[i].Shadow {
				refused = i
				break
			}
		}
		for i := range n {
			all[i] = s.refusedUnreached(r.rl[i].capacity)
		}
		if s.set.mode == FailError {
			return refused, resFailError, s.unreachedErr(cause)
		}
		return refused, resFailClosed, nil
	}
	var asks [maxAsks]floodgate.Ask
	if err := s.localAsks(r, &asks); err != nil {
		return 0, resFailLocal, err
	}
	ls := s.localStore()
	if h != nil {
		_, refused, err := ls.Reserve(ctx, asks[:n], all, h)
		h.Parts[0].Ref = refLocal
		return refused, resFailLocal, err
	}
	_, refused, err := ls.Decide(ctx, asks[:n], all)
	return refused, resFailLocal, err
}

// refLocal marks, in a Hold's first part's Ref, a Hold that FailLocal's
// LocalStore reserved.
const refLocal = 1

// localAsks are r's asks on the policies' FailLocal limiters.
func (s *Store) localAsks(r *request, asks *[maxAsks]floodgate.Ask) error {
	for i := range r.asks {
		t, err := r.ps[i].local()
		if err != nil {
			return err
		}
		a := r.asks[i]
		a.Policy = t.pol
		asks[i] = a
	}
	return nil
}
