package memcachelimit

import (
	"context"
	"sync"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/floodgate-go/floodgate"
)

// Group commit. The requests of one ask that wait on the same key in
// this process are decided together: one read of the key, each
// request's Take in turn on the state the one before left (each
// answered its own decision, exactly as if they had come one after the
// other), and one compare-and-swap of the state after them all. While
// a round runs, the requests that arrive for its key gather into the
// next, whose first request leads it once the round before is done. A
// busy key then costs two round trips per round, not per request.

// waiter is one request in a group: its rule and cost, and, once its
// round ran, its answer.
type waiter struct {
	ctx  context.Context
	rl   *ruled
	n    int64
	read *memcache.Item // the key as its request read it, or nil
	d    floodgate.Decision
	at   int64
	o    outcome
	err  error
	done chan struct{} // signalled once its round answered it, unless it led
}

// group is the requests gathered for one key's next round.
type group struct{ ws []*waiter }

var (
	waiters = sync.Pool{New: func() any { return &waiter{done: make(chan struct{}, 1)} }}
	groups  = sync.Pool{New: func() any { return &group{ws: make([]*waiter, 0, 16)} }}
)

// decideGrouped decides a request of cost n for the memcached key mk
// under rl, with the other requests for mk waiting in this process (see
// above), and returns its answer, its grant's at, and the round's
// outcome: answered, abandoned (its ctx ended before its round), or
// unreached (with memcached's error, for the FailureMode).
//
// inside says the caller runs within a guarded call of its own (see
// guardedIn); a round that such a caller leads does not ask the breaker
// again.
//
// read, if not nil, is the key's item as the caller read it: a round
// that it leads alone writes over that (a lost write reads again), in
// place of a read of its own.
func (s *Store) decideGrouped(ctx context.Context, mk string, rl *ruled, n int64, inside bool, read *memcache.Item) (floodgate.Decision, int64, outcome, error) {
	w := waiters.Get().(*waiter)
	w.ctx, w.rl, w.n, w.read = ctx, rl, n, read
	s.gmu.Lock()
	if g := s.gathering[mk]; g != nil {
		g.ws = append(g.ws, w)
		s.gmu.Unlock()
		<-w.done
	} else {
		g := groups.Get().(*group)
		g.ws = append(g.ws[:0], w)
		s.gathering[mk] = g
		s.gmu.Unlock()
		stripe := &s.stripes[s.stripe(mk)]
		stripe.Lock()
		s.gmu.Lock()
		delete(s.gathering, mk) // the requests that come now gather for the next round
		s.gmu.Unlock()
		s.round(mk, g.ws, inside)
		stripe.Unlock()
		for _, o := range g.ws[1:] {
			o.done <- struct{}{}
		}
		clear(g.ws)
		g.ws = g.ws[:0]
		groups.Put(g)
	}
	d, at, o, err := w.d, w.at, w.o, w.err
	*w = waiter{done: w.done}
	waiters.Put(w)
	return d, at, o, err
}

// round decides ws, the requests gathered for mk, in one read and one
// write, retried on a lost write; a request whose ctx has ended is
// abandoned, and charged nothing. inside is its leader's (see
// decideGrouped).
func (s *Store) round(mk string, ws []*waiter, inside bool) {
	live := 0
	var read *memcache.Item
	for _, w := range ws {
		if err := w.ctx.Err(); err != nil {
			w.o, w.err = abandoned, err
			s.abandoned.Add(1)
			continue
		}
		live++
		read = w.read
	}
	if live == 0 {
		return
	}
	if live > 1 {
		read = nil // the others read nothing: read the key once for all
	}
	o, err := s.guardedIn(context.Background(), inside, func(t *trip) error {
		it := read
		if it == nil {
			var err error
			if it, err = s.reread(t, mk); err != nil {
				return err
			}
		}
		for {
			cur := stateOf(it)
			var last *ruled
			changed := false
			now := s.set.clock.Now()
			for _, w := range ws {
				if w.o == abandoned {
					continue
				}
				d, nx, at, err := w.rl.m.Take(cur, now, w.n, nil)
				if err != nil {
					return &keyError{err}
				}
				w.d, w.at = d, at
				if nx != nil {
					cur, changed, last = nx, true, w.rl
				}
			}
			if !changed {
				return nil
			}
			fresh, err := last.m.Fresh(cur)
			if err != nil {
				return &keyError{err}
			}
			ok, err := s.store(t, mk, it, cur, expiry(fresh, now))
			if err != nil || ok {
				return err
			}
			if it, err = s.reread(t, mk); err != nil {
				return err
			}
		}
	})
	for _, w := range ws {
		if w.o != abandoned {
			w.o, w.err = o, err
		}
	}
}
