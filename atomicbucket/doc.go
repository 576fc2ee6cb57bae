// Package atomicbucket holds floodgate's token bucket: Bucket, lock-free on
// one atomic word, and MutexBucket, its twin behind a mutex with the same
// semantics. Params validates a rule once and converts it to the exact
// fixed point all of them compute with.
//
// The leaky bucket as a meter decides exactly as the token bucket does, so
// Bucket serves for both; LeakyMutex is the meter in its textbook form,
// written independently, against which the tests hold Bucket.
//
// Most users want the root package, floodgate, which keeps one bucket per
// key. This package is for callers that manage their own buckets and for
// the tests and benchmarks that compare the two twins.
package atomicbucket
