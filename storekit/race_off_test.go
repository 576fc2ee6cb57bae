//go:build !race

package storekit_test

const raceEnabled = false
