// Package bench holds benchmarks that compare floodgate with other code:
// libraries it depends on, and (later) the rate limiters users choose
// between. It is its own module so that nothing it imports for comparison
// reaches the library's go.mod.
package bench
