// Package hidden is internal: no line of its own.
package hidden

// Thing has an exported and an unexported field.
type Thing struct {
	ID     int
	secret string
}

// Name is a method.
func (t Thing) Name() string { return t.secret }
