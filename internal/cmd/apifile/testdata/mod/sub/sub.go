// Package sub is a second package of the module.
package sub

// Decision is a struct.
type Decision struct{ Allowed bool }

// Base is embedded in apitest.Config.
type Base struct{ Kind string }

// Close is promoted into apitest.Config's pointer method set.
func (b *Base) Close() error { return nil }
