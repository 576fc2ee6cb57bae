// Package chaos widens the window between an atomic load and the
// compare-and-swap that depends on it, so that tests can prove the retry
// paths of the lock-free code are taken and correct.
//
// The race detector cannot find an atomicity bug in code whose every access
// is atomic: a lost update there is a logic error, not a data race. Built
// with the "chaos" tag, Yield gives up the processor every time between a
// load and its CAS, which turns rare interleavings into common ones, and
// Retried counts how often a CAS lost. Without the tag every function here
// is an empty body that the compiler removes.
package chaos
