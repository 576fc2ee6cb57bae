package inflight

import (
	"context"
	"sync"

	"github.com/floodgate-go/floodgate/internal/flat"
)

// twin is the Limiter's mutex twin: the plain form of the same semantics,
// every key's count and queue in one map behind one mutex, against which
// the tests hold the lock-free form. Users cannot build one (see
// testhook.InFlightTwin).
type twin struct {
	l      *Limiter
	limit  uint64
	mu     sync.Mutex
	keys   map[flat.ID]*twinKey
	inUse  int64
	closed bool
}

type twinKey struct {
	held    uint64
	touched bool
	queue   []*twinWaiter
}

type twinWaiter struct {
	ready chan struct{}
	state waitState
}

func newTwin(l *Limiter) *twin {
	return &twin{l: l, limit: l.limit.Load(), keys: make(map[flat.ID]*twinKey)}
}

// setLimit is SetLimit: a higher limit serves the waiters it makes room
// for, in order, while the global cap has slots free.
func (tw *twin) setLimit(limit uint64) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.limit = limit
	for _, k := range tw.keys {
		for len(k.queue) > 0 && k.held < limit {
			if g := tw.l.global; g != nil && tw.inUse >= g.max {
				break
			}
			w := k.queue[0]
			k.queue = k.queue[1:]
			k.held++
			tw.inUse++
			w.state = handed
			close(w.ready)
		}
	}
}

// key returns id's state, created if absent, or nil when MaxKeys are held
// and every one of them is busy. Under the lock.
func (tw *twin) key(id flat.ID) *twinKey {
	if k := tw.keys[id]; k != nil {
		return k
	}
	if tw.l.max > 0 && len(tw.keys) >= tw.l.max {
		evicted := false
		for other, k := range tw.keys {
			if k.held == 0 && len(k.queue) == 0 {
				delete(tw.keys, other)
				evicted = true
				break
			}
		}
		if !evicted {
			return nil
		}
	}
	k := new(twinKey)
	tw.keys[id] = k
	return k
}

// grab takes a slot of id if one is free and no one waits for it. Under
// the lock.
func (tw *twin) grab(id flat.ID) refusal {
	if g := tw.l.global; g != nil && tw.inUse >= g.max {
		return globalFull
	}
	k := tw.key(id)
	switch {
	case k == nil:
		return keysFull
	case len(k.queue) > 0 || k.held >= tw.limit:
		return keyFull
	}
	k.held++
	k.touched = true
	tw.inUse++
	return granted
}

func (tw *twin) acquire(id flat.ID) (Slot, refusal) {
	tw.mu.Lock()
	r := tw.grab(id)
	tw.mu.Unlock()
	if r != granted {
		return Slot{}, r
	}
	return tw.l.issue(id), granted
}

func (tw *twin) wait(ctx context.Context, id flat.ID) (Slot, error) {
	tw.mu.Lock()
	if tw.closed {
		tw.mu.Unlock()
		return Slot{}, ErrClosed
	}
	switch r := tw.grab(id); r {
	case granted:
		tw.mu.Unlock()
		return tw.l.issue(id), nil
	case keyFull:
	default:
		tw.mu.Unlock()
		return Slot{}, r.err()
	}
	k := tw.keys[id]
	if uint64(len(k.queue)) >= tw.l.queue {
		tw.mu.Unlock()
		return Slot{}, ErrFull
	}
	w := &twinWaiter{ready: make(chan struct{})}
	k.queue = append(k.queue, w)
	k.touched = true
	tw.mu.Unlock()

	select {
	case <-w.ready:
	case <-ctx.Done():
		tw.mu.Lock()
		state := w.state
		if state == queued {
			for j, x := range k.queue {
				if x == w {
					k.queue = append(k.queue[:j], k.queue[j+1:]...)
					break
				}
			}
		}
		tw.mu.Unlock()
		if state == handed {
			tw.release(id)
		}
		return Slot{}, ctx.Err()
	}
	if w.state == shut {
		return Slot{}, ErrClosed
	}
	return tw.l.issue(id), nil
}

func (tw *twin) release(id flat.ID) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	k := tw.keys[id]
	if k == nil || k.held == 0 {
		panic("inflight: a slot was released on a key that holds none")
	}
	if len(k.queue) > 0 && k.held <= tw.limit {
		w := k.queue[0]
		k.queue = k.queue[1:]
		w.state = handed
		close(w.ready)
		return
	}
	k.held--
	tw.inUse--
}

func (tw *twin) count(id flat.ID) (int, int) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if k := tw.keys[id]; k != nil {
		return int(k.held), len(k.queue)
	}
	return 0, 0
}

func (tw *twin) len() int {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return len(tw.keys)
}

// evictIdle removes the keys that hold nothing; with untouched, only those
// not acquired since the previous call, clearing the mark of the others.
func (tw *twin) evictIdle(untouched bool) int {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	n := 0
	for id, k := range tw.keys {
		switch {
		case k.held == 0 && len(k.queue) == 0 && (!untouched || !k.touched):
			delete(tw.keys, id)
			n++
		case untouched:
			k.touched = false
		}
	}
	return n
}

func (tw *twin) close() {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.closed = true
	for _, k := range tw.keys {
		for _, w := range k.queue {
			w.state = shut
			close(w.ready)
		}
		k.queue = nil
	}
}

func (tw *twin) inUseNow() int {
	if tw.l.global == nil {
		return 0
	}
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return int(tw.inUse)
}
