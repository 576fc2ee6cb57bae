package inflight_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"testing"

	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// side is one of the two Limiters a differential run drives, with what it
// holds: the slots it was given, those it released, and its waiters.
type side struct {
	l        *inflight.Limiter
	slots    []inflight.Slot
	released []inflight.Slot
	waiters  map[string][]*pending // per key, in the order they queued
	global   bool                  // the Limiter has a global cap
}

// pending is one Acquire that queued.
type pending struct {
	cancel context.CancelFunc
	done   chan result
}

// FuzzTwins drives the lock-free Limiter and its mutex twin with the same
// operations, over a few keys, and requires the same answer to each and
// the same state after each: slots held and waiters queued per key, keys
// held, slots in use, and which waiter a release served (the first). A
// third Limiter spreads every key it may (testhook.InFlightSpread): with
// no queue and no global cap, its releases park slots in its lanes, which
// must change no answer either.
func FuzzTwins(f *testing.F) {
	// An op is what*9... : op%9 says what (see apply), op/9%4 the key.
	op := func(what, key int) byte { return byte(key*9 + what) }
	f.Add(uint8(2), uint8(2), uint8(0), []byte{op(0, 0), op(0, 0), op(0, 0), op(0, 1), op(1, 0), op(1, 0), op(0, 2), op(2, 0), op(3, 0), op(4, 0), op(5, 0), op(0, 0)})
	f.Add(uint8(1), uint8(3), uint8(0), []byte{op(0, 0), op(4, 0), op(4, 0), op(4, 0), op(1, 0), op(1, 0), op(5, 0), op(1, 0), op(1, 0), op(6, 0), op(7, 0)})
	f.Add(uint8(1), uint8(2), uint8(3), []byte{op(0, 0), op(0, 1), op(0, 2), op(0, 3), op(4, 1), op(1, 0), op(1, 0), op(6, 1), op(7, 1), op(7, 2)})
	f.Add(uint8(3), uint8(0), uint8(2), []byte{op(0, 0), op(0, 1), op(0, 2), op(4, 0), op(1, 0), op(1, 0), op(6, 0), op(7, 0), op(7, 0)})
	f.Add(uint8(0), uint8(3), uint8(0), []byte{op(0, 0), op(4, 0), op(4, 0), op(4, 0), op(8, 2), op(1, 0), op(8, 0), op(1, 0), op(1, 0), op(1, 0), op(1, 0)})
	f.Add(uint8(2), uint8(2), uint8(4), []byte{op(0, 0), op(0, 0), op(0, 0), op(4, 0), op(4, 0), op(8, 0), op(1, 0), op(1, 0), op(8, 3), op(1, 0), op(1, 0), op(1, 0)})
	f.Add(uint8(1), uint8(4), uint8(0), []byte{op(0, 1), op(4, 1), op(4, 1), op(4, 2), op(5, 1), op(8, 1), op(1, 0), op(1, 0), op(1, 0), op(6, 0), op(7, 0)})
	// No queue and no global cap: the spread Limiter parks what it releases.
	f.Add(uint8(2), uint8(0), uint8(0), []byte{op(0, 0), op(0, 0), op(0, 0), op(1, 0), op(0, 0), op(0, 0), op(2, 0), op(3, 0), op(6, 0), op(7, 0), op(7, 0), op(1, 0), op(1, 0), op(6, 0), op(0, 1), op(1, 0)})
	f.Add(uint8(3), uint8(0), uint8(0), []byte{op(0, 0), op(0, 0), op(0, 0), op(0, 0), op(2, 0), op(2, 0), op(8, 0), op(0, 0), op(0, 0), op(1, 0), op(8, 3), op(0, 0), op(0, 0), op(0, 0), op(7, 0), op(1, 0), op(1, 0), op(7, 0), op(7, 0)})
	// A stale copy of a slot lent by a lane, once the lane lent it again.
	f.Add(uint8(1), uint8(0), uint8(0), []byte{op(0, 0), op(1, 0), op(0, 0), op(1, 0), op(0, 0), op(3, 0), op(1, 0), op(3, 0)})
	// A spread key that holds a slot, with no loan from its lanes between
	// two sweeps, loses its lanes (Sweep), and answers the same after.
	f.Add(uint8(3), uint8(0), uint8(0), []byte{op(0, 0), op(0, 0), op(2, 0), op(7, 0), op(0, 0), op(3, 0), op(0, 0), op(1, 0), op(7, 0), op(1, 0), op(1, 0), op(7, 0), op(7, 0), op(0, 0), op(2, 0)})
	f.Fuzz(twins)
}

// twins is FuzzTwins's run of one input.
func twins(t *testing.T, limit, queue, global uint8, ops []byte) {
	{
		if len(ops) > 200 {
			ops = ops[:200]
		}
		cfg := inflight.Config{Limit: int(limit%4) + 1, Queue: int(queue % 5), Global: int(global % 6)}
		var sides [3]*side // lock-free, twin, spread
		forms := []string{"lock-free", "twin", "spread"}
		for k := range sides {
			c := cfg
			switch k {
			case 1:
				c = testhook.InFlightTwin(cfg).(inflight.Config)
			case 2:
				c = testhook.InFlightSpread(cfg).(inflight.Config)
			}
			l, err := inflight.New(c)
			if err != nil {
				t.Fatal(err)
			}
			sides[k] = &side{l: l, waiters: map[string][]*pending{}, global: cfg.Global > 0}
		}
		keys := []string{"a", "b", "c", "d"}
		for n, op := range ops {
			key := keys[op/9%4]
			what := fmt.Sprintf("op %d (%d on %s)", n, op%9, key)
			var answers, states [3]string
			for k, s := range sides {
				answers[k] = s.apply(t, op, key)
			}
			for k, s := range sides {
				states[k] = s.state(keys)
			}
			for _, k := range []int{0, 2} {
				if answers[k] != answers[1] {
					t.Fatalf("%s: %s %s, twin %s", what, forms[k], answers[k], answers[1])
				}
				if states[k] != states[1] {
					t.Fatalf("after %s: %s %s, twin %s", what, forms[k], states[k], states[1])
				}
			}
		}
		for _, s := range sides {
			s.finish(t, keys)
		}
	}
}

// apply runs one operation and returns its answer as text.
func (s *side) apply(t *testing.T, op byte, key string) string {
	switch op % 9 {
	case 0:
		sl, ok := s.l.TryAcquire(key)
		if ok {
			s.slots = append(s.slots, sl)
		}
		return fmt.Sprint("try ", ok)
	case 1, 2:
		// Release the oldest (1) or newest (2) slot held.
		if len(s.slots) == 0 {
			return "none"
		}
		j := 0
		if op%9 == 2 {
			j = len(s.slots) - 1
		}
		sl := s.slots[j]
		s.slots = append(s.slots[:j], s.slots[j+1:]...)
		s.released = append(s.released, sl)
		before := s.waiting()
		ok := sl.Release()
		return fmt.Sprint("release ", ok, " ", s.served(t, before))
	case 3:
		// A stale copy of a released slot releases nothing.
		if len(s.released) == 0 {
			return "none"
		}
		return fmt.Sprint("stale ", s.released[len(s.released)-1].Release())
	case 4:
		ctx, cancel := context.WithCancel(context.Background())
		p := &pending{cancel: cancel, done: make(chan result, 1)}
		before := s.l.Waiting(key)
		go func() {
			sl, err := s.l.Acquire(ctx, key)
			p.done <- result{sl, err}
		}()
		for len(p.done) == 0 && s.l.Waiting(key) == before {
			runtime.Gosched()
		}
		if len(p.done) == 0 {
			s.waiters[key] = append(s.waiters[key], p)
			return "queued"
		}
		cancel()
		r := <-p.done
		if r.err == nil {
			s.slots = append(s.slots, r.slot)
		}
		return fmt.Sprint("acquire ", errName(r.err))
	case 5:
		// The first waiter of the key gives up.
		q := s.waiters[key]
		if len(q) == 0 {
			return "none"
		}
		s.waiters[key] = q[1:]
		q[0].cancel()
		r := <-q[0].done
		return fmt.Sprint("cancel ", errName(r.err), " ", r.slot.Held())
	case 6:
		return fmt.Sprint("evict ", s.l.EvictIdle())
	case 7:
		return fmt.Sprint("sweep ", s.l.Sweep())
	default:
		// A new limit, 1 to 4: a higher one serves the waiters it makes
		// room for, in order. Not under a global cap: which keys' waiters
		// the cap's last slots go to is not specified.
		if s.l.InUse() > 0 || s.global {
			return "none"
		}
		before := s.waiting()
		err := s.l.SetLimit(int(op/36)%4 + 1)
		return fmt.Sprint("limit ", err, s.served(t, before))
	}
}

// waiting returns the waiters queued per key.
func (s *side) waiting() map[string]int {
	m := map[string]int{}
	for k := range s.waiters {
		m[k] = s.l.Waiting(k)
	}
	return m
}

// served finds the waiters that a release or a new limit served, by the
// keys whose queues shrank, and requires them to be the first of their
// key's waiters: n served must be the first n.
func (s *side) served(t *testing.T, before map[string]int) string {
	out := ""
	for _, k := range []string{"a", "b", "c", "d"} {
		q := s.waiters[k]
		n := before[k] - s.l.Waiting(k)
		if len(q) == 0 || n <= 0 {
			continue
		}
		pending := map[int]bool{}
		for j := range n {
			pending[j] = true
		}
		for range n {
			cases := make([]reflect.SelectCase, len(q))
			for j, p := range q {
				cases[j] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.done)}
				if j < n && !pending[j] {
					cases[j].Chan = reflect.Value{} // received already: never chosen
				}
			}
			j, v, _ := reflect.Select(cases)
			if j >= n {
				t.Fatalf("%d waiters of %s were served, and one was waiter %d", n, k, j)
			}
			delete(pending, j)
			r := v.Interface().(result)
			if r.err != nil {
				t.Fatalf("a served waiter of %s: %v", k, r.err)
			}
			s.slots = append(s.slots, r.slot)
		}
		for _, p := range q[:n] {
			p.cancel()
		}
		s.waiters[k] = q[n:]
		out += fmt.Sprintf(" served %s:%d", k, n)
	}
	return out
}

// state describes what the Limiter holds.
func (s *side) state(keys []string) string {
	out := fmt.Sprintf("len %d inuse %d", s.l.Len(), s.l.InUse())
	for _, k := range keys {
		out += fmt.Sprintf(" %s:%d/%d", k, s.l.Held(k), s.l.Waiting(k))
	}
	return out
}

// finish closes the Limiter, which must wake every waiter, releases every
// slot, and requires nothing to be held.
func (s *side) finish(t *testing.T, keys []string) {
	s.l.Close()
	for _, q := range s.waiters {
		for _, p := range q {
			r := <-p.done
			p.cancel()
			if !errors.Is(r.err, inflight.ErrClosed) {
				t.Fatalf("a waiter at Close: %v", r.err)
			}
		}
	}
	for _, sl := range s.slots {
		if !sl.Release() {
			t.Fatal("a held slot did not release")
		}
	}
	if st := s.state(keys); s.l.EvictIdle() != s.l.Len()+0 && s.l.Len() != 0 {
		t.Fatalf("at the end: %s", st)
	}
	for _, k := range keys {
		if s.l.Held(k) != 0 || s.l.Waiting(k) != 0 {
			t.Fatalf("at the end: %s", s.state(keys))
		}
	}
	if s.l.InUse() != 0 || s.l.Len() != 0 {
		t.Fatalf("at the end: %s", s.state(keys))
	}
}

func errName(err error) string {
	for _, e := range []error{inflight.ErrFull, inflight.ErrGlobal, inflight.ErrKeys, inflight.ErrClosed, context.Canceled} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if err != nil {
		return "unexpected " + err.Error()
	}
	return "ok"
}
