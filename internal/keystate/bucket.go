package keystate

import (
	"time"

	"github.com/floodgate-go/floodgate/internal/bucket"
	"github.com/floodgate-go/floodgate/internal/decision"
)

// Bucket is a bucket.Bucket seen as a State: the lock-free bucket out of
// line, as the reference limiter holds it (the Limiter holds the bucket's
// word inline).
type Bucket bucket.Bucket

func (s *Bucket) b() *bucket.Bucket { return (*bucket.Bucket)(s) }

func (s *Bucket) AllowN(now, n int64) (decision.Decision, bool) { return s.b().AllowN(now, n) }
func (s *Bucket) Take(now, n int64) (bool, bool)                { return s.b().Take(now, n) }
func (s *Bucket) Peek(now int64) (decision.Decision, bool)      { return s.b().Peek(now) }
func (s *Bucket) Refund(_, n int64) bool                        { return s.b().Refund(n) }
func (s *Bucket) RetireIdle(now int64) bool                     { return s.b().RetireIdle(now) }
func (s *Bucket) Retire()                                       { s.b().Retire() }
func (s *Bucket) Successor(now int64) State                     { return (*Bucket)(s.b().Successor(now)) }

func (s *Bucket) ChargeN(now, n int64) (decision.Decision, bool, error) {
	return s.b().ChargeN(now, n)
}

// MutexBucket is the token bucket's mutex twin, a bucket.MutexBucket, seen
// as a State.
type MutexBucket bucket.MutexBucket

func (s *MutexBucket) b() *bucket.MutexBucket { return (*bucket.MutexBucket)(s) }

func (s *MutexBucket) AllowN(now, n int64) (decision.Decision, bool) { return s.b().AllowN(now, n) }
func (s *MutexBucket) Take(now, n int64) (bool, bool)                { return s.b().Take(now, n) }
func (s *MutexBucket) Peek(now int64) (decision.Decision, bool)      { return s.b().Peek(now) }
func (s *MutexBucket) Refund(_, n int64) bool                        { return s.b().Refund(n) }
func (s *MutexBucket) RetireIdle(now int64) bool                     { return s.b().RetireIdle(now) }
func (s *MutexBucket) Retire()                                       { s.b().Retire() }
func (s *MutexBucket) Successor(now int64) State                     { return (*MutexBucket)(s.b().Successor(now)) }
func (s *MutexBucket) Evict(now int64) (int64, int64)                { return s.b().Evict(now), 0 }

func (s *MutexBucket) ChargeN(now, n int64) (decision.Decision, bool, error) {
	return s.b().ChargeN(now, n)
}

func (s *MutexBucket) ReserveN(now, n int64, maxWait time.Duration) (time.Duration, int64, bool, bool) {
	return s.b().ReserveN(now, n, maxWait)
}

func (s *MutexBucket) CancelReservation(tat, n int64) bool { return s.b().CancelReservation(tat, n) }

// LeakyMeter is the leaky bucket's mutex twin, a bucket.LeakyMutex (the
// meter in its textbook form), seen as a State.
type LeakyMeter bucket.LeakyMutex

func (s *LeakyMeter) m() *bucket.LeakyMutex { return (*bucket.LeakyMutex)(s) }

func (s *LeakyMeter) AllowN(now, n int64) (decision.Decision, bool) { return s.m().AllowN(now, n) }
func (s *LeakyMeter) Take(now, n int64) (bool, bool)                { return s.m().Take(now, n) }
func (s *LeakyMeter) Peek(now int64) (decision.Decision, bool)      { return s.m().Peek(now) }
func (s *LeakyMeter) Refund(_, n int64) bool                        { return s.m().Refund(n) }
func (s *LeakyMeter) RetireIdle(now int64) bool                     { return s.m().RetireIdle(now) }
func (s *LeakyMeter) Retire()                                       { s.m().Retire() }
func (s *LeakyMeter) Successor(now int64) State                     { return (*LeakyMeter)(s.m().Successor(now)) }
func (s *LeakyMeter) Evict(now int64) (int64, int64)                { return s.m().Evict(now), 0 }

func (s *LeakyMeter) ChargeN(now, n int64) (decision.Decision, bool, error) {
	return s.m().ChargeN(now, n)
}

func (s *LeakyMeter) ReserveN(now, n int64, maxWait time.Duration) (time.Duration, int64, bool, bool) {
	return s.m().ReserveN(now, n, maxWait)
}

func (s *LeakyMeter) CancelReservation(empties, n int64) bool {
	return s.m().CancelReservation(empties, n)
}
