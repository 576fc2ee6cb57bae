//go:build !race

package httplimit

// raceDetector is true when the tests run under the race detector.
const raceDetector = false
