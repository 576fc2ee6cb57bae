package window

import (
	"math"
	"sync"
)

// MutexWindow is Window's twin behind a mutex: the same rule, the same
// transitions, the same answers. Tests check Window against it; benchmarks
// show what the CAS loop buys.
type MutexWindow struct {
	mu     sync.Mutex
	word   uint64
	origin int64
	p      Params
	next   *MutexWindow
}

// NewMutex returns a MutexWindow as New returns a Window.
func NewMutex(p Params, now int64) *MutexWindow {
	k, _ := floorDivMod(now, p.period)
	return &MutexWindow{origin: k, p: p}
}

// NewMutexSpent returns a MutexWindow as NewSpent returns a Window.
func NewMutexSpent(p Params, now, spent, owed int64) *MutexWindow {
	origin, w := p.spentState(now, spent, owed)
	return &MutexWindow{word: w, origin: origin, p: p}
}

// AllowN is Window.AllowN under a mutex.
func (s *MutexWindow) AllowN(now, n int64) (Decision, bool) {
	rel, e, pos := s.p.locate(now, s.origin)
	s.mu.Lock()
	defer s.mu.Unlock()
	next, d, live := s.p.allow(s.word, rel, e, pos, n)
	s.word = next
	return d, live
}

// Take is Window.Take under a mutex.
func (s *MutexWindow) Take(now, n int64) (bool, bool) {
	rel, e, pos := s.p.locate(now, s.origin)
	s.mu.Lock()
	defer s.mu.Unlock()
	next, allowed, live := s.p.admit(s.word, rel, e, pos, n)
	s.word = next
	return allowed, live
}

// Peek is Window.Peek under a mutex.
func (s *MutexWindow) Peek(now int64) (Decision, bool) {
	rel, e, pos := s.p.locate(now, s.origin)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p.peek(s.word, rel, e, pos)
}

// ChargeN is Window.ChargeN under a mutex.
func (s *MutexWindow) ChargeN(now, n int64) (d Decision, live bool, err error) {
	if err := checkCharge(n); err != nil {
		return Decision{}, true, err
	}
	rel, e, pos := s.p.locate(now, s.origin)
	s.mu.Lock()
	defer s.mu.Unlock()
	next, d, live, err := s.p.charge(s.word, rel, e, pos, n)
	s.word = next
	return d, live, err
}

// Refund is Window.Refund under a mutex.
func (s *MutexWindow) Refund(now, n int64) bool {
	rel, _, pos := s.p.locate(now, s.origin)
	s.mu.Lock()
	defer s.mu.Unlock()
	if pos != inRange && !isRetired(s.word) {
		return true
	}
	next, live := s.p.refund(s.word, rel, n)
	s.word = next
	return live
}

// RetireIdle is Window.RetireIdle under a mutex.
func (s *MutexWindow) RetireIdle(now int64) bool {
	rel, _, pos := s.p.locate(now, s.origin)
	s.mu.Lock()
	defer s.mu.Unlock()
	next, ok := s.p.retireIdle(s.word, rel, pos)
	s.word = next
	return ok
}

// Retire is Window.Retire under a mutex.
func (s *MutexWindow) Retire() {
	s.mu.Lock()
	s.word = resetWord
	s.mu.Unlock()
}

// Evict is Window.Evict under a mutex: the reading and the retirement are
// one critical section.
func (s *MutexWindow) Evict(now int64) (spent, owed int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if isRetired(s.word) {
		return math.MinInt64, 0
	}
	spent, owed = s.p.SpentOwed(s.word, s.origin, now)
	s.word = resetWord
	return spent, owed
}

// Successor is Window.Successor under a mutex.
func (s *MutexWindow) Successor(now int64) *MutexWindow {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next != nil {
		return s.next
	}
	origin, w := s.p.successor(s.word, s.origin, now)
	n := &MutexWindow{word: w, origin: origin, p: s.p}
	if isRetired(s.word) {
		s.next = n
	}
	return n
}
