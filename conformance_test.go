package floodgate_test

import (
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/storetest"
)

// TestConformance runs the Store conformance suite on LocalStore: one
// Store per replica, which shares nothing with another.
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T, clock *floodgate.ManualClock) floodgate.Store {
			s := floodgate.NewLocalStore(floodgate.LocalStoreConfig{Clock: clock})
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	})
}
