package bucket

import (
	"math"
	"sync"
	"time"
)

// MutexBucket is Bucket's twin behind a mutex: the same rule, the same
// transitions and the same answers, synchronised the plain way. It exists
// so that tests can check the lock-free Bucket against it and benchmarks
// can show what the CAS loop buys.
type MutexBucket struct {
	mu     sync.Mutex
	tat    int64
	next   *MutexBucket
	origin int64
	p      Params
}

// NewMutex returns a mutex-guarded bucket for rule p that is full at now, its origin.
func NewMutex(p Params, now int64) *MutexBucket {
	return &MutexBucket{origin: now, p: p}
}

// NewMutexSpent is NewSpent for a MutexBucket.
func NewMutexSpent(p Params, now, spent int64) *MutexBucket {
	return NewMutex(p, max(now, spent))
}

// AllowN is Bucket.AllowN under a mutex.
func (b *MutexBucket) AllowN(now, n int64) (Decision, bool) {
	t, pos := b.p.ticks(now, b.origin)
	b.mu.Lock()
	next, d, live := b.p.allow(b.tat, t, pos, n)
	b.tat = next
	b.mu.Unlock()
	return d, live
}

// ChargeN is Bucket.ChargeN under a mutex.
func (b *MutexBucket) ChargeN(now, n int64) (d Decision, live bool, err error) {
	t, pos := b.p.ticks(now, b.origin)
	b.mu.Lock()
	next, d, live, err := b.p.chargeAt(b.tat, t, pos, n)
	b.tat = next
	b.mu.Unlock()
	return d, live, err
}

// Take is Bucket.Take under a mutex.
func (b *MutexBucket) Take(now, n int64) (allowed, live bool) {
	t, pos := b.p.ticks(now, b.origin)
	b.mu.Lock()
	next, allowed, live := b.p.admit(b.tat, t, pos, n)
	b.tat = next
	b.mu.Unlock()
	return allowed, live
}

// ReserveN is Bucket.ReserveN under a mutex.
func (b *MutexBucket) ReserveN(now, n int64, maxWait time.Duration) (wait time.Duration, tat int64, ok, live bool) {
	t, pos := b.p.ticks(now, b.origin)
	b.mu.Lock()
	defer b.mu.Unlock()
	if isRetired(b.tat) || pos != inRange {
		next, _, live := b.p.allow(b.tat, t, pos, n)
		b.tat = next
		return 0, 0, false, live
	}
	if !b.p.validCost(n) {
		return 0, 0, false, true
	}
	next, ticks, ok := b.p.reserve(b.tat, t, n, b.p.waitTicks(maxWait))
	if !ok {
		return b.p.duration(ticks), 0, false, true
	}
	b.tat = next
	return b.p.duration(ticks), next, true, true
}

// CancelReservation is Bucket.CancelReservation under a mutex.
func (b *MutexBucket) CancelReservation(tat, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	next, ok := b.p.cancel(b.tat, tat, n)
	b.tat = next
	return ok
}

// Peek is Bucket.Peek under a mutex.
func (b *MutexBucket) Peek(now int64) (Decision, bool) {
	t, pos := b.p.ticks(now, b.origin)
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.p.peek(b.tat, t, pos)
}

// Refund is Bucket.Refund under a mutex.
func (b *MutexBucket) Refund(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	next, live := b.p.refund(b.tat, n)
	b.tat = next
	return live
}

// RetireIdle is Bucket.RetireIdle under a mutex.
func (b *MutexBucket) RetireIdle(now int64) bool {
	t, pos := b.p.ticks(now, b.origin)
	b.mu.Lock()
	defer b.mu.Unlock()
	next, ok := b.p.retireIdle(b.tat, t, pos)
	b.tat = next
	return ok
}

// Retire is Bucket.Retire under a mutex.
func (b *MutexBucket) Retire() {
	b.mu.Lock()
	b.tat = retire(resetMark)
	b.mu.Unlock()
}

// Evict is Bucket.Evict under a mutex: the reading and the retirement are
// one critical section.
func (b *MutexBucket) Evict(int64) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if isRetired(b.tat) {
		return math.MinInt64
	}
	spent := b.p.SpentValue(uint64(b.tat), b.origin)
	b.tat = retire(resetMark)
	return spent
}

// Successor is Bucket.Successor under a mutex.
func (b *MutexBucket) Successor(now int64) *MutexBucket {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.next != nil {
		return b.next
	}
	origin, w := b.p.successor(b.tat, b.origin, now)
	s := &MutexBucket{tat: w, origin: origin, p: b.p}
	if isRetired(b.tat) {
		b.next = s
	}
	return s
}
