package kitstore_test

import (
	"testing"

	"example.com/kitstore"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/storetest"
)

// TestConformance runs storetest's suite on the Store that the kit
// built: every algorithm, Decide's obligations, exactness, SetRule,
// CheckRule, names, the comparison with a Limiter, and the slots.
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T, clock *floodgate.ManualClock) floodgate.Store {
			return kitstore.New(clock)
		},
	})
}
