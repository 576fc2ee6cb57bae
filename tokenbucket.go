package floodgate

import (
	"time"

	"github.com/floodgate-go/floodgate/atomicbucket"
	"github.com/floodgate-go/floodgate/internal/hook"
)

// LeakyBucket names the leaky bucket as a meter: a level that drains at
// Limit per Period from capacity Burst (Limit when 0); a request of cost n
// passes if and only if level + n ≤ capacity, and then the level rises by
// n. Its decisions are the token bucket's for the same rule and sequence —
// both are GCRA — so its lock-free form is the same atomic bucket. Its
// mutex twin is the meter in its textbook form (a level and the time it
// was last raised) behind a mutex, written independently; the tests hold
// the lock-free bucket against it.
const LeakyBucket = "leaky_bucket"

func init() {
	mustRegister(TokenBucket, bucketFactory(func(p atomicbucket.Params) Algorithm { return lockFreeBucket(p) }))
	registerTwin(hook.TokenBucketMutex, bucketFactory(func(p atomicbucket.Params) Algorithm { return mutexBucket(p) }))
	mustRegister(LeakyBucket, bucketFactory(func(p atomicbucket.Params) Algorithm { return lockFreeBucket(p) }))
	registerTwin(hook.LeakyBucketMutex, bucketFactory(func(p atomicbucket.Params) Algorithm { return leakyMeter(p) }))
}

// lockFreeBucket is the token_bucket algorithm: one atomicbucket.Bucket per key.
type lockFreeBucket atomicbucket.Params

func (a lockFreeBucket) NewState(now int64) State {
	return (*bucketState)(atomicbucket.New(atomicbucket.Params(a), now))
}

// bucketState is an atomicbucket.Bucket seen as a State. The conversions
// are free: Decision and atomicbucket.Decision share one layout.
type bucketState atomicbucket.Bucket

func (s *bucketState) b() *atomicbucket.Bucket { return (*atomicbucket.Bucket)(s) }

func (s *bucketState) AllowN(now, n int64) (Decision, bool) {
	d, live := s.b().AllowN(now, n)
	return fromCore(d), live
}

func (s *bucketState) Take(now, n int64) (bool, bool) { return s.b().Take(now, n) }

func (s *bucketState) Peek(now int64) (Decision, bool) {
	d, live := s.b().Peek(now)
	return Decision(d), live
}

func (s *bucketState) Refund(_, n int64) bool    { return s.b().Refund(n) }
func (s *bucketState) RetireIdle(now int64) bool { return s.b().RetireIdle(now) }
func (s *bucketState) Retire()                   { s.b().Retire() }
func (s *bucketState) Successor(now int64) State { return (*bucketState)(s.b().Successor(now)) }

// mutexBucket is the token bucket's mutex twin.
type mutexBucket atomicbucket.Params

func (a mutexBucket) NewState(now int64) State {
	return (*mutexState)(atomicbucket.NewMutex(atomicbucket.Params(a), now))
}

type mutexState atomicbucket.MutexBucket

func (s *mutexState) b() *atomicbucket.MutexBucket { return (*atomicbucket.MutexBucket)(s) }

func (s *mutexState) AllowN(now, n int64) (Decision, bool) {
	d, live := s.b().AllowN(now, n)
	return fromCore(d), live
}

func (s *mutexState) Take(now, n int64) (bool, bool) { return s.b().Take(now, n) }

func (s *mutexState) Peek(now int64) (Decision, bool) {
	d, live := s.b().Peek(now)
	return Decision(d), live
}

func (s *mutexState) Refund(_, n int64) bool    { return s.b().Refund(n) }
func (s *mutexState) RetireIdle(now int64) bool { return s.b().RetireIdle(now) }
func (s *mutexState) Retire()                   { s.b().Retire() }
func (s *mutexState) Successor(now int64) State { return (*mutexState)(s.b().Successor(now)) }

// leakyMeter is the leaky bucket's mutex twin.
type leakyMeter atomicbucket.Params

func (a leakyMeter) NewState(now int64) State {
	return (*leakyState)(atomicbucket.NewLeakyMutex(atomicbucket.Params(a), now))
}

type leakyState atomicbucket.LeakyMutex

func (s *leakyState) m() *atomicbucket.LeakyMutex { return (*atomicbucket.LeakyMutex)(s) }

func (s *leakyState) AllowN(now, n int64) (Decision, bool) {
	d, live := s.m().AllowN(now, n)
	return fromCore(d), live
}

func (s *leakyState) Take(now, n int64) (bool, bool) { return s.m().Take(now, n) }

func (s *leakyState) Peek(now int64) (Decision, bool) {
	d, live := s.m().Peek(now)
	return fromCore(d), live
}

func (s *leakyState) Refund(_, n int64) bool    { return s.m().Refund(n) }
func (s *leakyState) RetireIdle(now int64) bool { return s.m().RetireIdle(now) }
func (s *leakyState) Retire()                   { s.m().Retire() }
func (s *leakyState) Successor(now int64) State { return (*leakyState)(s.m().Successor(now)) }

// The methods below let MaxKeys evict a key held out of line without
// giving it a fresh allowance when it returns (see spentAlgorithm).

func (a mutexBucket) newSpent(now, spent int64) State {
	return (*mutexState)(atomicbucket.NewMutexSpent(atomicbucket.Params(a), now, spent))
}

func (a leakyMeter) newSpent(now, spent int64) State {
	return (*leakyState)(atomicbucket.NewLeakyMutexSpent(atomicbucket.Params(a), now, spent))
}

func (s *mutexState) Evict(now int64) int64 { return s.b().Evict(now) }
func (s *leakyState) Evict(now int64) int64 { return s.m().Evict(now) }

// The bucket states reserve (see Limiter.WaitN): their twins alike, so
// that the differential tests cover waiting too.
func (s *bucketState) ReserveN(now, n int64, maxWait time.Duration) (time.Duration, int64, bool, bool) {
	return s.b().ReserveN(now, n, maxWait)
}
func (s *bucketState) CancelReservation(tat, n int64) bool { return s.b().CancelReservation(tat, n) }
func (s *mutexState) ReserveN(now, n int64, maxWait time.Duration) (time.Duration, int64, bool, bool) {
	return s.b().ReserveN(now, n, maxWait)
}
func (s *mutexState) CancelReservation(tat, n int64) bool { return s.b().CancelReservation(tat, n) }
func (s *leakyState) ReserveN(now, n int64, maxWait time.Duration) (time.Duration, int64, bool, bool) {
	return s.m().ReserveN(now, n, maxWait)
}
func (s *leakyState) CancelReservation(tat, n int64) bool { return s.m().CancelReservation(tat, n) }
