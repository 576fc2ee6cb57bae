package main

import (
	"strings"
	"testing"
)

// TestRun: one short round prints the summary for the group it fell in,
// and bad flags are refused.
func TestRun(t *testing.T) {
	var out strings.Builder
	if err := run([]string{"-rounds", "1", "-round", "1ms", "-q"}, &out); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "1 rounds of 1ms") || !strings.Contains(s, "sl-hot-par ÷ twin-hot-par") || !strings.Contains(s, "sl-1K-par ÷ twin-1K-par") {
		t.Fatalf("output:\n%s", s)
	}
	for _, args := range [][]string{{"-rounds", "0"}, {"-round", "0s"}} {
		if err := run(args, &strings.Builder{}); err == nil {
			t.Errorf("run(%q) accepted", args)
		}
	}
}
