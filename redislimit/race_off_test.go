//go:build !race

package redislimit

// raceDetector is true when the tests run under the race detector.
const raceDetector = false
