//go:build !race

package config

// raceDetector is true when the tests run under the race detector.
const raceDetector = false
