//go:build race

package rls

// raceDetector is true when the tests run under the race detector.
const raceDetector = true
