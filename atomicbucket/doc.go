// Package atomicbucket holds floodgate's token bucket: Bucket, lock-free on
// one atomic word, and MutexBucket, its twin behind a mutex with the same
// semantics. Params validates a rule once and converts it to the exact
// fixed point both compute with.
//
// Most users want the root package, floodgate, which keeps one bucket per
// key. This package is for callers that manage their own buckets and for
// the tests and benchmarks that compare the two twins.
package atomicbucket
