//go:build !race

package floodgate_test

// raceDetector is true when the tests run under the race detector.
const raceDetector = false
