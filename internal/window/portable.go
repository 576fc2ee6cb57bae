package window

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Portable states: a MutexWindow's fields as bytes, for a backend that
// keeps each key's state outside the process and replaces it with a
// compare-and-swap (see storekit's Machine). Only a live window is
// written: a caller that met a retired one has moved on to its
// Successor. Loading checks every field against what the transitions
// keep, so that no bytes make a later step misbehave.

// MutexBytes is the length of a MutexWindow's portable state.
const MutexBytes = 16

// AppendState appends s's origin (a window index) and word to dst.
func (s *MutexWindow) AppendState(dst []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if isRetired(s.word) {
		return dst, errors.New("window: a retired state has no portable form")
	}
	dst = binary.BigEndian.AppendUint64(dst, uint64(s.origin))
	return binary.BigEndian.AppendUint64(dst, s.word), nil
}

// LoadState makes s the live window of rule p whose portable state is
// src (MutexBytes long), or returns an error that says what is wrong
// with src and leaves s as it was.
func (s *MutexWindow) LoadState(p Params, src []byte) error {
	if len(src) != MutexBytes {
		return fmt.Errorf("a window's state is %d bytes, got %d", MutexBytes, len(src))
	}
	origin := int64(binary.BigEndian.Uint64(src))
	w := binary.BigEndian.Uint64(src[8:])
	if isRetired(w) {
		return errors.New("a window's state word is marked retired")
	}
	ks, curr, prev := p.unpack(w)
	switch {
	case p.pack(ks, curr, prev) != w:
		return fmt.Errorf("a window's state word %#x has bits outside its fields", w)
	case ks < -p.maxRel || ks > p.maxRel:
		return fmt.Errorf("a window's state names window %d of its origin, beyond ±%d", ks, p.maxRel)
	case curr > p.MaxCount() || prev > p.MaxCount():
		return fmt.Errorf("a window's counts %d and %d pass %d, the most a window of limit %d holds", curr, prev, p.MaxCount(), p.limit)
	case ks > 0 && origin > maxIndex-ks, ks < 0 && origin < minIndex-ks:
		return fmt.Errorf("a window's state names window %d past origin %d, outside the clock", ks, origin)
	}
	*s = MutexWindow{origin: origin, word: w, p: p}
	return nil
}

// The window indices of the clock's first and last instants are ±2^63/T;
// an origin and its windows lie in int64 however far apart (an index is
// at most the reading, in ns), so these bound the sum origin + ks.
const (
	maxIndex = 1<<63 - 1
	minIndex = -1 << 63
)

// FreshAt is the instant from which s answers as a new window: every
// count it holds, debts included, has stopped weighing. s must be live.
func (s *MutexWindow) FreshAt() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p.SpentValue(s.word, s.origin)
}

// Open makes s a new window of rule p at now: the state NewMutex
// returns, in place.
func (s *MutexWindow) Open(p Params, now int64) {
	*s = MutexWindow{origin: p.Origin(now), p: p}
}
