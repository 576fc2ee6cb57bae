package bucket

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Portable states: a twin's fields as bytes, for a backend that keeps
// each key's state outside the process and replaces it with a
// compare-and-swap (see storekit's Machine). Only a live twin is
// written: a caller that met a retired one has moved on to its
// Successor. Loading checks every field against the ranges the twin's
// transitions keep, so that no bytes make a later step overflow.

// MutexBytes is the length of a MutexBucket's portable state.
const MutexBytes = 16

// LeakyBytes is the length of a LeakyMutex's portable state.
const LeakyBytes = 24

// errRetired is Append's error for a retired twin.
var errRetired = errors.New("bucket: a retired state has no portable form")

// AppendState appends b's origin and TAT to dst.
func (b *MutexBucket) AppendState(dst []byte) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if isRetired(b.tat) {
		return dst, errRetired
	}
	dst = binary.BigEndian.AppendUint64(dst, uint64(b.origin))
	return binary.BigEndian.AppendUint64(dst, uint64(b.tat)), nil
}

// LoadState makes b the live bucket of rule p whose portable state is
// src (MutexBytes long), or returns an error that says what is wrong
// with src and leaves b as it was.
func (b *MutexBucket) LoadState(p Params, src []byte) error {
	if len(src) != MutexBytes {
		return fmt.Errorf("a token bucket's state is %d bytes, got %d", MutexBytes, len(src))
	}
	origin := int64(binary.BigEndian.Uint64(src))
	tat := int64(binary.BigEndian.Uint64(src[8:]))
	if tat < floorTAT || tat > maxT {
		return fmt.Errorf("a token bucket's arrival time of %d ticks lies outside [%d, %d]", tat, int64(floorTAT), int64(maxT))
	}
	*b = MutexBucket{origin: origin, tat: tat, p: p}
	return nil
}

// FreshAt is the instant from which b answers as a new bucket: full,
// owing nothing. b must be live.
func (b *MutexBucket) FreshAt() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.p.SpentValue(uint64(b.tat), b.origin)
}

// AppendState appends m's origin, level and the instant it was last
// raised to dst.
func (m *LeakyMutex) AppendState(dst []byte) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired {
		return dst, errRetired
	}
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.origin))
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.level))
	return binary.BigEndian.AppendUint64(dst, uint64(m.lct)), nil
}

// LoadState makes m the live meter of rule p whose portable state is src
// (LeakyBytes long), or returns an error that says what is wrong with
// src and leaves m as it was.
func (m *LeakyMutex) LoadState(p Params, src []byte) error {
	if len(src) != LeakyBytes {
		return fmt.Errorf("a leaky bucket's state is %d bytes, got %d", LeakyBytes, len(src))
	}
	origin := int64(binary.BigEndian.Uint64(src))
	level := int64(binary.BigEndian.Uint64(src[8:]))
	lct := int64(binary.BigEndian.Uint64(src[16:]))
	// The meter sets lct to an in-range reading and keeps lct + level,
	// the instant it empties, within the bucket's TAT range.
	if lct < minT || lct > maxT {
		return fmt.Errorf("a leaky bucket's last raise at %d ticks lies outside [%d, %d]", lct, int64(minT), int64(maxT))
	}
	if level < floorTAT-lct || level > maxT-lct {
		return fmt.Errorf("a leaky bucket's level of %d ticks at %d empties outside [%d, %d]", level, lct, int64(floorTAT), int64(maxT))
	}
	*m = LeakyMutex{origin: origin, level: level, lct: lct, p: p}
	return nil
}

// FreshAt is the instant from which m answers as a new meter: empty,
// owing nothing. m must be live.
func (m *LeakyMutex) FreshAt() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.p.SpentValue(uint64(m.empties()), m.origin)
}

// Open makes b a new bucket of rule p, full at now, its origin: the
// state NewMutex returns, in place.
func (b *MutexBucket) Open(p Params, now int64) { *b = MutexBucket{origin: now, p: p} }

// Open makes m a new meter of rule p, empty at now, its origin: the
// state NewLeakyMutex returns, in place.
func (m *LeakyMutex) Open(p Params, now int64) { *m = LeakyMutex{origin: now, p: p} }
