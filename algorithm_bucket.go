package floodgate

import (
	"github.com/floodgate-go/floodgate/internal/bucket"
	"github.com/floodgate-go/floodgate/internal/keystate"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// The token bucket and the leaky bucket (see TokenBucket and LeakyBucket),
// with their mutex twins. Both lock-free forms are the same atomic word in
// the flat table: GCRA decides both.

func init() {
	mustRegister(TokenBucket, bucketFactory(func(p bucket.Params) algorithm { return lockFreeBucket(p) }))
	registerTwin(testhook.TokenBucketMutex, bucketFactory(func(p bucket.Params) algorithm { return mutexBucket(p) }))
	mustRegister(LeakyBucket, bucketFactory(func(p bucket.Params) algorithm { return lockFreeBucket(p) }))
	registerTwin(testhook.LeakyBucketMutex, bucketFactory(func(p bucket.Params) algorithm { return leakyMeter(p) }))
}

// convertBucketSpent is convertSpent for the buckets, whose instant
// carries what they owe: they owe nothing beyond it.
func convertBucketSpent(p *bucket.Params, spent, at int64, to algorithm) (int64, int64) {
	q := bucketParams(to)
	return p.ConvertSpent(spent, at, &q), 0
}

// bucketParams is the rule of a bucket algorithm.
func bucketParams(a algorithm) bucket.Params {
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
func bucketFactory(make func(bucket.Params) algorithm) factory {
	return func(r Rule) (algorithm, error) {
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
func (a lockFreeBucket) convertSpent(spent, _, at int64, to algorithm) (int64, int64) {
	return convertBucketSpent((*bucket.Params)(&a), spent, at, to)
}
func (a lockFreeBucket) params(rs *ruleSet) { rs.bucket = bucket.Params(a) }
func (a lockFreeBucket) newState(now int64) keystate.State {
	return (*keystate.Bucket)(bucket.New(bucket.Params(a), now))
}

// mutexBucket is the token bucket's mutex twin.
type mutexBucket bucket.Params

func (a mutexBucket) traits() traits { return traits{kind: objects, form: boxed, reserves: true} }
func (a mutexBucket) convertSpent(spent, _, at int64, to algorithm) (int64, int64) {
	return convertBucketSpent((*bucket.Params)(&a), spent, at, to)
}

func (a mutexBucket) newState(now int64) keystate.State {
	return (*keystate.MutexBucket)(bucket.NewMutex(bucket.Params(a), now))
}

func (a mutexBucket) newSpent(now, spent, _ int64) keystate.State {
	return (*keystate.MutexBucket)(bucket.NewMutexSpent(bucket.Params(a), now, spent))
}

func (a mutexBucket) convert(s keystate.State, at int64) keystate.State {
	if c := (*bucket.MutexBucket)(s.(*keystate.MutexBucket)).ConvertTo(at, bucket.Params(a)); c != nil {
		return (*keystate.MutexBucket)(c)
	}
	return nil
}

// leakyMeter is the leaky bucket's mutex twin: the meter in its textbook
// form (a level and the time it was last raised), written apart from the
// token bucket, which the tests hold the lock-free word to as well.
type leakyMeter bucket.Params

func (a leakyMeter) traits() traits { return traits{kind: objects, form: boxed, reserves: true} }
func (a leakyMeter) convertSpent(spent, _, at int64, to algorithm) (int64, int64) {
	return convertBucketSpent((*bucket.Params)(&a), spent, at, to)
}

func (a leakyMeter) newState(now int64) keystate.State {
	return (*keystate.LeakyMeter)(bucket.NewLeakyMutex(bucket.Params(a), now))
}

func (a leakyMeter) newSpent(now, spent, _ int64) keystate.State {
	return (*keystate.LeakyMeter)(bucket.NewLeakyMutexSpent(bucket.Params(a), now, spent))
}

func (a leakyMeter) convert(s keystate.State, at int64) keystate.State {
	if c := (*bucket.LeakyMutex)(s.(*keystate.LeakyMeter)).ConvertTo(at, bucket.Params(a)); c != nil {
		return (*keystate.LeakyMeter)(c)
	}
	return nil
}
