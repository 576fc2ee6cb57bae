package storetest_test

import (
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/storetest"
)

// A backend runs the suite from a test of its own: here on floodgate's
// LocalStore, whose decisions read the suite's clock through
// LocalStoreConfig.Clock. A Store on a server that its replicas share
// sets Shared, and an Outage that takes the server away.
func ExampleRun() {
	testConformance := func(t *testing.T) { // func TestConformance(t *testing.T) in a _test.go file
		storetest.Run(t, storetest.Harness{
			New: func(t *testing.T, clock *floodgate.ManualClock) floodgate.Store {
				s := floodgate.NewLocalStore(floodgate.LocalStoreConfig{Clock: clock})
				t.Cleanup(func() { _ = s.Close() })
				return s
			},
		})
	}
	_ = testConformance
}
