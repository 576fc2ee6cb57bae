package config

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatch: the first load, a change, a file that fails (the error is
// passed, once), its repair, a new file, and a runtime root swapped by a
// link are each picked up at the next tick; a tick with no change loads
// nothing.
func TestWatch(t *testing.T) {
	root := t.TempDir()
	v1, v2 := filepath.Join(root, "v1"), filepath.Join(root, "v2")
	for _, d := range []string{v1, v2} {
		if err := os.MkdirAll(filepath.Join(d, "config"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(dir, name, data string) {
		t.Helper()
		tmp := filepath.Join(root, "tmp-"+name) // written whole, then renamed in, as Watch asks
		if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "config", name)); err != nil {
			t.Fatal(err)
		}
	}
	write(v1, "a.yaml", "domain: a\n")
	write(v2, "b.yaml", "domain: b\n")
	current := filepath.Join(root, "current")
	if err := os.Symlink(v1, current); err != nil {
		t.Skip("no symbolic links here:", err)
	}
	type event struct {
		domains int
		err     error
	}
	events := make(chan event, 16)
	ticks := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Watch(ctx, filepath.Join(current, "config"), false, ticks, func(c *Config, err error) {
			if err != nil {
				events <- event{err: err}
				return
			}
			events <- event{domains: c.Domains()}
		})
	}()
	next := func(what string, want int, wantErr bool) {
		t.Helper()
		select {
		case e := <-events:
			if (e.err != nil) != wantErr || (!wantErr && e.domains != want) {
				t.Fatalf("%s: %+v (%v), want %d domains (error: %v)", what, e, e.err, want, wantErr)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: nothing applied", what)
		}
	}
	tick := func() { ticks <- time.Time{} }
	quiet := func(what string) {
		t.Helper()
		tick()
		tick() // the watcher has looked at least once since the first tick
		select {
		case e := <-events:
			t.Fatalf("%s: applied %+v with no change", what, e)
		default:
		}
	}
	next("the first load", 1, false)
	quiet("no change")
	write(v1, "c.yaml", "domain: c\n")
	tick()
	next("a new file", 2, false)
	write(v1, "c.yaml", "domain: c\nnope: 1\n")
	tick()
	next("a file that fails", 0, true)
	quiet("the same failure")
	write(v1, "c.yaml", "domain: cc\n")
	tick()
	next("the repair", 2, false)
	tmp := filepath.Join(root, "tmp")
	if err := os.Symlink(v2, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, current); err != nil { // the atomic swap deployments make
		t.Fatal(err)
	}
	tick()
	next("the swapped root", 1, false)
	cancel()
	close(ticks)
	<-done
}
