package rls

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConfigNotLoaded: a Config that no LoadOptions loaded (nil, or the
// zero value) is an error for the Server, and holds nothing; it never
// panics.
func TestConfigNotLoaded(t *testing.T) {
	s, _ := serve(t, mustConfig(t, "domain: d\n"), Options{})
	for name, c := range map[string]*Config{"nil": nil, "zero": {}} {
		if _, err := New(c, Options{}); err == nil || !strings.Contains(err.Error(), "needs a configuration") {
			t.Errorf("%s: New = %v, want an error", name, err)
		}
		if err := s.SetConfig(context.Background(), c); err == nil {
			t.Errorf("%s: SetConfig = nil, want an error", name)
		}
		if err := s.CheckConfig(c); err == nil {
			t.Errorf("%s: CheckConfig = nil, want an error", name)
		}
		if c.Domains() != 0 || c.Rules() != 0 {
			t.Errorf("%s: %d domains, %d rules", name, c.Domains(), c.Rules())
		}
	}
}

// TestLoadOptions: LoadOptions reads files, a directory and a push as the
// reader behind it does, its bounds and their errors included, and
// Watch hands over each Config it loads.
func TestLoadOptions(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	write(".hidden.yaml", "not: a config\n")
	files, err := LoadOptions{}.ReadDir(dir, true)
	if err != nil || len(files) != 1 || files[0].Name != filepath.Join(dir, "a.yaml") {
		t.Fatalf("ReadDir = %+v, %v; want a.yaml alone", files, err)
	}
	c, err := LoadOptions{}.Load(files)
	if err != nil || c.Domains() != 1 || c.Rules() != 1 {
		t.Fatalf("Load = %d domains, %d rules, %v; want 1, 1", c.Domains(), c.Rules(), err)
	}
	twice := append(files, File{Name: "b.yaml", Data: files[0].Data})
	if _, err := (LoadOptions{}).Load(twice); err == nil {
		t.Error("a domain in two files loaded without MergeDomains")
	}
	if c, err := (LoadOptions{MergeDomains: true}).Load(twice); err == nil {
		t.Errorf("the same descriptor in two files merged into %d rules", c.Rules())
	}
	if _, err := (LoadOptions{MaxRules: 1}).Load([]File{{Name: "two.yaml", Data: []byte(
		"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: j\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}}); !errors.Is(err, ErrTooManyRules) {
		t.Errorf("two rules over MaxRules 1: %v, want ErrTooManyRules", err)
	}
	if c, err := (LoadOptions{}).LoadXDS(context.Background(), nil); err != nil || c.Domains() != 0 {
		t.Errorf("an empty push: %v, %v", c, err)
	}
	if _, err := (LoadOptions{}).LoadXDS(context.Background(), [][]byte{{}}); err == nil || !strings.Contains(err.Error(), "xds:") {
		t.Errorf("a push of an empty resource: %v, want an error that names it", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ticks := make(chan time.Time)
	got := make(chan *Config)
	done := make(chan struct{})
	go func() {
		defer close(done)
		LoadOptions{}.Watch(ctx, dir, true, ticks, func(c *Config, err error) {
			if err != nil {
				t.Errorf("Watch: %v", err)
			}
			got <- c
		})
	}()
	if c := <-got; c.Rules() != 1 {
		t.Errorf("Watch's first Config holds %d rules, want 1", c.Rules())
	}
	write("b.yaml", "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	ticks <- time.Time{}
	if c := <-got; c.Domains() != 2 || c.Rules() != 2 {
		t.Errorf("Watch's Config after a file was added: %d domains, %d rules; want 2, 2", c.Domains(), c.Rules())
	}
	cancel()
	close(ticks)
	<-done
}
