package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadDir: every file below the directory, nested ones included, in
// path order, whatever the extension; dot files only without ignoreDot;
// links followed, and a link back up the tree read once.
func TestReadDir(t *testing.T) {
	root := t.TempDir()
	write := func(rel, data string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("config/b.yaml", "domain: b\n")
	write("config/a.yml", "domain: a\n")
	write("config/nested/c.conf", "domain: c\n")
	write("config/.hidden.yaml", "domain: h\n")
	write("config/.dotdir/d.yaml", "domain: d\n")
	if err := os.Symlink(filepath.Join(root, "config"), filepath.Join(root, "config", "nested", "loop")); err != nil {
		t.Fatal(err)
	}
	names := func(fs []File) string {
		var s []string
		for _, f := range fs {
			s = append(s, strings.TrimPrefix(f.Name, root+"/"))
		}
		return strings.Join(s, " ")
	}
	all, err := ReadDir(filepath.Join(root, "config"), false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(all), "config/.dotdir/d.yaml config/.hidden.yaml config/a.yml config/b.yaml config/nested/c.conf"; got != want {
		t.Fatalf("ReadDir read %q, want %q", got, want)
	}
	some, err := ReadDir(filepath.Join(root, "config"), true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(some), "config/a.yml config/b.yaml config/nested/c.conf"; got != want {
		t.Fatalf("ReadDir with ignoreDot read %q, want %q", got, want)
	}
	c, err := Load(some)
	if err != nil || c.Domains() != 3 {
		t.Fatalf("Load: %v, %v", c, err)
	}
	if _, err := ReadDir(filepath.Join(root, "missing"), false); err == nil {
		t.Fatal("a missing directory read without error")
	}
}
