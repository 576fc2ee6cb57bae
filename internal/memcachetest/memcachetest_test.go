package memcachetest

import "testing"

// TestRestart starts a server, kills it, and starts it again on the same
// port: it answers before and after, and not while killed.
func TestRestart(t *testing.T) {
	s := Start(t)
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("a started server does not answer: %v", err)
	}
	addr := s.Addr()
	s.Kill()
	if err := ping(addr); err == nil {
		t.Fatal("a killed server answers")
	}
	s.Restart()
	if s.Addr() != addr {
		t.Fatalf("Restart moved the server from %s to %s", addr, s.Addr())
	}
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("a restarted server does not answer: %v", err)
	}
	s.Flush()
}
