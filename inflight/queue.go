package inflight

import (
	"context"
	"sync"

	"github.com/floodgate-go/floodgate/internal/chaos"
	"github.com/floodgate-go/floodgate/internal/flat"
	"github.com/floodgate-go/floodgate/internal/word"
	"golang.org/x/sys/cpu"
)

// The queues. A key's waiters wait in a FIFO list kept in one of a fixed
// set of stripes, chosen by the key's identity; its lock guards the lists
// of its keys, and every change to a key's waiter count in its word is
// made under it (see word.go). Only keys with waiters have a list, and
// only requests that wait, or releases that find a waiter, take a lock.

const stripes = 64

type queues struct {
	s [stripes]stripe
}

type stripe struct {
	mu     sync.Mutex
	keys   map[flat.ID]*list
	closed bool // set by Close: no waiter queues any more
	_      cpu.CacheLinePad
}

// list is a key's waiters, in the order they came.
type list struct{ head, tail *waiter }

// waiter is one Acquire waiting for a slot. Its state changes once, under
// the stripe's lock, from waiting to granted (a release handed it a slot)
// or closed, and then ready is closed.
type waiter struct {
	ready      chan struct{}
	state      waitState
	prev, next *waiter
}

type waitState uint8

const (
	queued waitState = iota
	handed
	shut
)

func (q *queues) of(id flat.ID) *stripe { return &q.s[id.Lo%stripes] }

func (ls *list) push(w *waiter) {
	w.prev = ls.tail
	if ls.tail != nil {
		ls.tail.next = w
	} else {
		ls.head = w
	}
	ls.tail = w
}

func (ls *list) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		ls.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		ls.tail = w.prev
	}
	w.prev, w.next = nil, nil
}

// locate returns key id's word, creating it if it was removed meanwhile
// (it held nothing then), or a slot below 0 at MaxKeys.
func (l *Limiter) locate(id flat.ID) (*flat.Table, int) {
	t, i := l.flat.Find(id)
	if i < 0 || t.Word(i).Load() == word.Dead {
		return l.create(id)
	}
	return t, i
}

// wait queues an Acquire on key id, whose slots were all held a moment
// ago, and waits for a release to hand it a slot. Before it queues, under
// the lock, it takes a slot if one has been freed meanwhile.
func (l *Limiter) wait(ctx context.Context, id flat.ID) (Slot, error) {
	s := l.queues.of(id)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Slot{}, ErrClosed
	}
	var w *waiter
	for w == nil {
		t, i := l.locate(id)
		if i < 0 {
			s.mu.Unlock()
			return Slot{}, ErrKeys
		}
		wd := t.Word(i)
		v := wd.Load()
		switch {
		case word.IsMark(v):
			continue
		case v&waitMask == 0 && held(v) < l.limit.Load(): // freed meanwhile
			if g := l.global; g != nil && !g.take() {
				s.mu.Unlock()
				return Slot{}, ErrGlobal
			}
			chaos.Yield()
			if wd.CompareAndSwap(v, (v+1)|touched) {
				s.mu.Unlock()
				return l.issue(id), nil
			}
			if g := l.global; g != nil {
				g.n.Add(-1)
			}
		case waiting(v) >= l.queue:
			s.mu.Unlock()
			return Slot{}, ErrFull
		default:
			chaos.Yield()
			if wd.CompareAndSwap(v, (v+waitOne)|touched) {
				w = &waiter{ready: make(chan struct{})}
			}
		}
		if w == nil {
			chaos.Lost("inflight.queue")
		}
	}
	if s.keys == nil {
		s.keys = make(map[flat.ID]*list)
	}
	ls := s.keys[id]
	if ls == nil {
		ls = new(list)
		s.keys[id] = ls
	}
	ls.push(w)
	s.mu.Unlock()

	select {
	case <-w.ready:
	case <-ctx.Done():
		s.mu.Lock()
		if w.state == queued {
			l.dequeue(s, id, ls, w)
			s.mu.Unlock()
			return Slot{}, ctx.Err()
		}
		s.mu.Unlock()
		if w.state == handed {
			// Handed a slot as the context ended: give it on.
			l.release(id, pid())
		}
		return Slot{}, ctx.Err()
	}
	if w.state == shut {
		return Slot{}, ErrClosed
	}
	return l.issue(id), nil
}

// dequeue takes waiter w off key id's list ls, and the key's waiter count
// down by one. Under the stripe's lock.
func (l *Limiter) dequeue(s *stripe, id flat.ID, ls *list, w *waiter) {
	ls.remove(w)
	if ls.head == nil {
		delete(s.keys, id)
	}
	for {
		t, i := l.flat.Find(id) // a key with waiters is never removed
		wd := t.Word(i)
		v := wd.Load()
		if v == word.Moved {
			continue
		}
		chaos.Yield()
		if wd.CompareAndSwap(v, v-waitOne) {
			return
		}
		chaos.Lost("inflight.dequeue")
	}
}

// handOff gives a released slot of key id to its first waiter, and
// reports whether there was one: the key's waiter count goes down by one
// and its held slots stay as they are.
func (l *Limiter) handOff(id flat.ID) bool {
	s := l.queues.of(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := s.keys[id]
	if ls == nil {
		return false // it left, or was never queued when the release looked
	}
	w := ls.head
	l.dequeue(s, id, ls, w)
	w.state = handed
	close(w.ready)
	return true
}

// serveRoom serves, after SetLimit raised the limit, the waiters of every
// key for which it made room, in their order: each takes a slot (and one
// of the global cap, if any, while it has one free).
func (l *Limiter) serveRoom() {
	for k := range l.queues.s {
		s := &l.queues.s[k]
		s.mu.Lock()
		for id, ls := range s.keys {
			for ls.head != nil && l.serveFirst(id, ls) {
			}
			if ls.head == nil {
				delete(s.keys, id)
			}
		}
		s.mu.Unlock()
	}
}

// serveFirst gives key id's first waiter a slot if the key holds fewer
// than the limit, and reports whether it did. Under the stripe's lock.
func (l *Limiter) serveFirst(id flat.ID, ls *list) bool {
	for {
		t, i := l.flat.Find(id) // a key with waiters is never removed
		wd := t.Word(i)
		v := wd.Load()
		switch {
		case v == word.Moved:
			continue
		case held(v) >= l.limit.Load():
			return false
		}
		if g := l.global; g != nil && !g.take() {
			return false
		}
		chaos.Yield()
		if wd.CompareAndSwap(v, v-waitOne+1) {
			w := ls.head
			ls.remove(w)
			w.state = handed
			close(w.ready)
			return true
		}
		if g := l.global; g != nil {
			g.n.Add(-1)
		}
		chaos.Lost("inflight.room")
	}
}

// closeQueues wakes every waiter with ErrClosed and stops queueing.
func (l *Limiter) closeQueues() {
	for k := range l.queues.s {
		s := &l.queues.s[k]
		s.mu.Lock()
		s.closed = true
		for id, ls := range s.keys {
			for ls.head != nil {
				w := ls.head
				l.dequeue(s, id, ls, w)
				w.state = shut
				close(w.ready)
			}
		}
		s.mu.Unlock()
	}
}
