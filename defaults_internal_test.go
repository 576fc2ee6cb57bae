package floodgate

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestDefaultBounds: MaxKeys 0 is the 64 MiB bound, Unbounded none, and
// IdleTTL 0 starts a sweep that Never does not, on a Limiter and on a
// LocalStore's policies alike.
func TestDefaultBounds(t *testing.T) {
	rule := Rule{Limit: 100, Period: time.Second}
	for _, c := range []struct {
		cfg  Config
		want int
	}{
		{Config{Rule: rule}, 1 << 20},
		{Config{Algorithm: FixedWindow, Rule: rule}, 1 << 20},
		{Config{Algorithm: SlidingLog, Rule: rule}, defaultMemory / (objectKeyBytes + logEntryBytes*100)},
		{Config{Algorithm: SlidingLog, Rule: Rule{Limit: 1 << 20, Period: time.Second}}, 1024},
		{Config{Rule: rule, MaxKeys: Unbounded}, 0},
		{Config{Rule: rule, MaxKeys: 5}, 5},
	} {
		l, err := New(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Stats().MaxKeys; got != c.want {
			t.Errorf("%s, MaxKeys %d: bound %d, want %d", c.cfg.Algorithm, c.cfg.MaxKeys, got, c.want)
		}
		if l.stop == nil {
			t.Errorf("%s: IdleTTL 0 started no sweep", c.cfg.Algorithm)
		}
		l.Close()
		s := NewLocalStore(LocalStoreConfig{MaxKeys: c.cfg.MaxKeys})
		p, err := s.Policy("p", c.cfg.Algorithm, c.cfg.Rule)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Limiter(p).Stats().MaxKeys; got != c.want || s.Limiter(p).stop != nil {
			t.Errorf("%s, a Store's MaxKeys %d: bound %d (want %d), a sweep of its own %v", c.cfg.Algorithm, c.cfg.MaxKeys, got, c.want, s.Limiter(p).stop != nil)
		}
		s.Close()
	}
	l, err := New(Config{Rule: rule, IdleTTL: Never})
	if err != nil {
		t.Fatal(err)
	}
	if l.stop != nil {
		t.Error("IdleTTL Never started a sweep")
	}
	if s := NewLocalStore(LocalStoreConfig{IdleTTL: Never}); s.stop != nil {
		t.Error("a Store's IdleTTL Never started a sweep")
	}
}

// TestLocalStoreNegative: a negative MaxKeys or IdleTTL of a LocalStore
// is an error from every policy it would make, and from CheckRule.
func TestLocalStoreNegative(t *testing.T) {
	for _, cfg := range []LocalStoreConfig{{MaxKeys: -1}, {IdleTTL: -time.Second}} {
		s := NewLocalStore(cfg)
		want := "MaxKeys must be"
		if cfg.IdleTTL < 0 {
			want = "IdleTTL must be"
		}
		if _, err := s.Policy("p", TokenBucket, Rule{Limit: 1, Period: time.Second}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: Policy: %v", cfg, err)
		}
		if err := s.CheckRule(TokenBucket, Rule{Limit: 1, Period: time.Second}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: CheckRule: %v", cfg, err)
		}
		if _, err := s.SlotPolicy("q", 1); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: SlotPolicy: %v", cfg, err)
		}
		s.Close()
	}
}

// TestSweepEndsUncollected: the sweep of a Limiter or a LocalStore
// dropped without Close ends once the collector finds it unreachable.
func TestSweepEndsUncollected(t *testing.T) {
	l, err := New(Config{Rule: Rule{Limit: 1, Period: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	s := NewLocalStore(LocalStoreConfig{})
	ended := []<-chan struct{}{l.swept, s.swept}
	l, s = nil, nil
	_, _ = l, s
	deadline := time.Now().Add(30 * time.Second)
	for _, c := range ended {
		for {
			runtime.GC()
			select {
			case <-c:
			case <-time.After(10 * time.Millisecond):
				if time.Now().After(deadline) {
					t.Fatal("a sweep outlived its dropped owner")
				}
				continue
			}
			break
		}
	}
}
