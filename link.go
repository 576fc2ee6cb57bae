package floodgate

import "github.com/floodgate-go/floodgate/internal/storelink"

// Package storekit, which imports this one, reaches what it gives a
// Store outside this module through storelink: the Slot of a slot held
// elsewhere, whose fields are unexported, and Settle's checks.
func init() {
	storelink.HeldSlot = func(h interface{ Release() bool }) Slot { return Slot{held: h} }
	storelink.CheckSettle = checkSettle
}
