// Package storelink hands package storekit what only package floodgate
// can do, since storekit imports floodgate and floodgate cannot import
// it: floodgate's init sets each variable, and storekit's asserts it to
// its func type once, when storekit is initialised (after floodgate, which
// it imports). Each variable is an any so that this package names no type
// of floodgate's.
package storelink

// HeldSlot is floodgate's func(interface{ Release() bool }) floodgate.Slot:
// the Slot of a slot that a SlotStore other than LocalStore holds.
var HeldSlot any

// CheckSettle is floodgate's func([]floodgate.Ask, *floodgate.Hold) error:
// a Settle's arguments checked against its Hold.
var CheckSettle any
