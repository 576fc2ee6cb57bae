package tsc

import "testing"

// TestRead: where the counter is invariant, readings on one goroutine move
// forward; elsewhere Invariant says not to use it.
func TestRead(t *testing.T) {
	if !Invariant() {
		t.Skip("no invariant time stamp counter on this processor")
	}
	a := Read()
	for range 1000 {
		b := Read()
		if b < a {
			t.Fatalf("counter went from %d back to %d", a, b)
		}
		a = b
	}
	if a == 0 {
		t.Fatal("counter reads 0")
	}
}
