package floodgate

import (
	"time"

	"github.com/floodgate-go/floodgate/internal/bucket"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// The token bucket and the leaky bucket (see TokenBucket and LeakyBucket),
// with their mutex twins. Both lock-free forms are the same atomic word in
// the flat table: GCRA decides both.

func init() {
	mustRegister(TokenBucket, bucketFactory(func(p bucket.Params) Algorithm { return lockFreeBucket(p) }))
	registerTwin(testhook.TokenBucketMutex, bucketFactory(func(p bucket.Params) Algorithm { return mutexBucket(p) }))
	mustRegister(LeakyBucket, bucketFactory(func(p bucket.Params) Algorithm { return lockFreeBucket(p) }))
	registerTwin(testhook.LeakyBucketMutex, bucketFactory(func(p bucket.Params) Algorithm { return leakyMeter(p) }))
}

// convertBucketSpent is convertSpent for the buckets, whose instant
// carries what they owe: they owe nothing beyond it.
func convertBucketSpent(p *bucket.Params, spent, at int64, to Algorithm) (int64, int64) {
	q := bucketParams(to)
	return p.ConvertSpent(spent, at, &q), 0
}

// bucketParams is the rule of a bucket algorithm.
func bucketParams(a Algorithm) bucket.Params {
	switch a := a.(type) {
	case lockFreeBucket:
		return bucket.Params(a)
	case mutexBucket:
		return bucket.Params(a)
	}
	return bucket.Params(a.(leakyMeter))
}

// bucketFactory is the Factory of an algorithm whose states are buckets
// on bucket.Params: the rule is checked once, here.
func bucketFactory(make func(bucket.Params) Algorithm) Factory {
	return func(r Rule) (Algorithm, error) {
		p, err := bucket.NewParams(r.Limit, r.Period, r.Burst)
		if err != nil {
			return nil, err
		}
		return make(p), nil
	}
}

// lockFreeBucket is the token_bucket and leaky_bucket algorithm: an
// internal/bucket word per key, inline in the flat table.
type lockFreeBucket bucket.Params

func (a lockFreeBucket) traits() traits { return traits{kind: bucketWords, reserves: true} }
func (a lockFreeBucket) convertSpent(spent, _, at int64, to Algorithm) (int64, int64) {
	return convertBucketSpent((*bucket.Params)(&a), spent, at, to)
}
func (a lockFreeBucket) params(rs *ruleSet) { rs.bucket = bucket.Params(a) }
func (a lockFreeBucket) NewState(now int64) State {
	return (*bucketState)(bucket.New(bucket.Params(a), now))
}

// bucketState is an bucket.Bucket seen as a State: the lock-free
// bucket out of line, as the reference limiter of the tests holds it (the
// Limiter holds the bucket's word inline). The conversions are free:
// Decision and bucket.Decision share one layout.
type bucketState bucket.Bucket

func (s *bucketState) b() *bucket.Bucket { return (*bucket.Bucket)(s) }

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
type mutexBucket bucket.Params

func (a mutexBucket) traits() traits { return traits{kind: objects, form: boxed, reserves: true} }
func (a mutexBucket) convertSpent(spent, _, at int64, to Algorithm) (int64, int64) {
	return convertBucketSpent((*bucket.Params)(&a), spent, at, to)
}

func (a mutexBucket) NewState(now int64) State {
	return (*mutexState)(bucket.NewMutex(bucket.Params(a), now))
}

func (a mutexBucket) newSpent(now, spent, _ int64) State {
	return (*mutexState)(bucket.NewMutexSpent(bucket.Params(a), now, spent))
}

func (a mutexBucket) convert(s State, at int64) State {
	if c := s.(*mutexState).b().ConvertTo(at, bucket.Params(a)); c != nil {
		return (*mutexState)(c)
	}
	return nil
}

type mutexState bucket.MutexBucket

func (s *mutexState) b() *bucket.MutexBucket { return (*bucket.MutexBucket)(s) }

func (s *mutexState) AllowN(now, n int64) (Decision, bool) {
	d, live := s.b().AllowN(now, n)
	return fromCore(d), live
}

func (s *mutexState) Take(now, n int64) (bool, bool) { return s.b().Take(now, n) }

func (s *mutexState) Peek(now int64) (Decision, bool) {
	d, live := s.b().Peek(now)
	return Decision(d), live
}

func (s *mutexState) Refund(_, n int64) bool         { return s.b().Refund(n) }
func (s *mutexState) RetireIdle(now int64) bool      { return s.b().RetireIdle(now) }
func (s *mutexState) Retire()                        { s.b().Retire() }
func (s *mutexState) Successor(now int64) State      { return (*mutexState)(s.b().Successor(now)) }
func (s *mutexState) Evict(now int64) (int64, int64) { return s.b().Evict(now), 0 }

func (s *mutexState) ReserveN(now, n int64, maxWait time.Duration) (time.Duration, int64, bool, bool) {
	return s.b().ReserveN(now, n, maxWait)
}
func (s *mutexState) CancelReservation(tat, n int64) bool { return s.b().CancelReservation(tat, n) }

// leakyMeter is the leaky bucket's mutex twin: the meter in its textbook
// form (a level and the time it was last raised), written apart from the
// token bucket, which the tests hold the lock-free word to as well.
type leakyMeter bucket.Params

func (a leakyMeter) traits() traits { return traits{kind: objects, form: boxed, reserves: true} }
func (a leakyMeter) convertSpent(spent, _, at int64, to Algorithm) (int64, int64) {
	return convertBucketSpent((*bucket.Params)(&a), spent, at, to)
}

func (a leakyMeter) NewState(now int64) State {
	return (*leakyState)(bucket.NewLeakyMutex(bucket.Params(a), now))
}

func (a leakyMeter) newSpent(now, spent, _ int64) State {
	return (*leakyState)(bucket.NewLeakyMutexSpent(bucket.Params(a), now, spent))
}

func (a leakyMeter) convert(s State, at int64) State {
	if c := s.(*leakyState).m().ConvertTo(at, bucket.Params(a)); c != nil {
		return (*leakyState)(c)
	}
	return nil
}

type leakyState bucket.LeakyMutex

func (s *leakyState) m() *bucket.LeakyMutex { return (*bucket.LeakyMutex)(s) }

func (s *leakyState) AllowN(now, n int64) (Decision, bool) {
	d, live := s.m().AllowN(now, n)
	return fromCore(d), live
}

func (s *leakyState) Take(now, n int64) (bool, bool) { return s.m().Take(now, n) }

func (s *leakyState) Peek(now int64) (Decision, bool) {
	d, live := s.m().Peek(now)
	return fromCore(d), live
}

func (s *leakyState) Refund(_, n int64) bool         { return s.m().Refund(n) }
func (s *leakyState) RetireIdle(now int64) bool      { return s.m().RetireIdle(now) }
func (s *leakyState) Retire()                        { s.m().Retire() }
func (s *leakyState) Successor(now int64) State      { return (*leakyState)(s.m().Successor(now)) }
func (s *leakyState) Evict(now int64) (int64, int64) { return s.m().Evict(now), 0 }

func (s *leakyState) ReserveN(now, n int64, maxWait time.Duration) (time.Duration, int64, bool, bool) {
	return s.m().ReserveN(now, n, maxWait)
}
func (s *leakyState) CancelReservation(tat, n int64) bool { return s.m().CancelReservation(tat, n) }

func (s *bucketState) ChargeN(now, n int64) (Decision, bool, error) {
	d, live, err := s.b().ChargeN(now, n)
	return fromCore(d), live, err
}

func (s *mutexState) ChargeN(now, n int64) (Decision, bool, error) {
	d, live, err := s.b().ChargeN(now, n)
	return fromCore(d), live, err
}

func (s *leakyState) ChargeN(now, n int64) (Decision, bool, error) {
	d, live, err := s.m().ChargeN(now, n)
	return fromCore(d), live, err
}
