package main

import (
	"strings"
	"testing"
	"time"
)

// TestRun runs two rounds of two limiters and checks the table: a line
// per limiter, and the last one's ratio to itself is exactly 1.
func TestRun(t *testing.T) {
	var out strings.Builder
	err := run([]string{"-impls", "floodgate-sl,floodgate-sl-mutex", "-keys", "10", "-rounds", "2",
		"-round", time.Millisecond.String(), "-dist", "zipf"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "floodgate-sl ") {
		t.Fatalf("want a heading and a line per limiter, got:\n%s", out.String())
	}
	if !strings.Contains(lines[2], "÷ floodgate-sl-mutex 1.000 (quartiles 1.000–1.000)") {
		t.Fatalf("the last limiter's ratio to itself is not 1:\n%s", lines[2])
	}
}

// TestRunErrors checks that bad flags are errors, not panics.
func TestRunErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-impls", "no-such-limiter"},
		{"-keys", "0"},
		{"-round", "0s"},
		{"-dist", "normal"},
	} {
		if err := run(args, &strings.Builder{}); err == nil {
			t.Errorf("run(%q) = nil, want an error", args)
		}
	}
}
