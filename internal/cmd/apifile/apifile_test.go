package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/apitest.txt from testdata/mod")

// mod is the test module's folder, and want its expected API file.
const (
	mod  = "testdata/mod"
	want = "testdata/apitest.txt"
)

// load loads the test module twice at once, and fails unless both loads
// give the same API file.
func load(t *testing.T) *module {
	t.Helper()
	mods, err := loadModules("go", []string{mod, mod})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := contents(mods[0]), contents(mods[1]); !bytes.Equal(a, b) {
		t.Fatalf("two loads of %s differ:\n%s\n%s", mod, a, b)
	}
	return mods[0]
}

// TestAPIFile holds the API file of a module with one declaration of
// every kind (and files, packages and names that must have no line) to
// the one in testdata.
func TestAPIFile(t *testing.T) {
	m := load(t)
	got := contents(m)
	if *update {
		if err := os.WriteFile(want, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, w) {
		removed, added := setDiff(w, got)
		t.Errorf("the API file of %s differs from %s (go test -update rewrites it):\nonly in the file: %q\nonly in the code: %q\ngot:\n%s",
			mod, want, removed, added, got)
	}
	var paths []string
	for _, p := range m.pkgs {
		paths = append(paths, p.path)
	}
	if wantPaths := []string{"example.com/apitest", "example.com/apitest/sub"}; !slices.Equal(paths, wantPaths) {
		t.Errorf("packages %q, want %q (no internal, main or testdata package)", paths, wantPaths)
	}
}

// TestCount counts the test module's names as issue 56 does: a method of
// an unexported type counts, the names of files the default build leaves
// out and of test files do not.
func TestCount(t *testing.T) {
	m := load(t)
	var out bytes.Buffer
	printCounts(&out, []*module{m})
	const wantOut = "  27 example.com/apitest\n   3 example.com/apitest/sub\n  30 total\n"
	if out.String() != wantOut {
		t.Errorf("counts:\n%s\nwant:\n%s", out.String(), wantOut)
	}
}

// TestCheck writes the API file, checks it, then changes it as a change
// of the code would and checks that the diff says so, and that a file no
// module has is reported, then removed by the next write.
func TestCheck(t *testing.T) {
	m := load(t)
	mods := []*module{m}
	dir := t.TempDir()
	if err := writeFiles(dir, mods); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, fileName(m))
	if fileName(m) != "testdata-mod.txt" {
		t.Errorf("file name %q, want testdata-mod.txt", fileName(m))
	}
	var out bytes.Buffer
	if same, err := check(&out, dir, mods); err != nil || !same || out.Len() != 0 {
		t.Fatalf("check after write: same %v, err %v, output %q", same, err, out.String())
	}

	// The file lacks a line the code has, and has one the code lacks.
	const gone = "pkg example.com/apitest, func NewStore(Config) (*Store, error)"
	const extra = "pkg example.com/apitest, func Removed()"
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(b), gone+"\n", extra+"\n", 1)
	if edited == string(b) {
		t.Fatalf("%s has no line %q", file, gone)
	}
	if err := os.WriteFile(file, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "old.txt")
	if err := os.WriteFile(stale, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	same, err := check(&out, dir, mods)
	if err != nil || same {
		t.Fatalf("check after edit: same %v, err %v", same, err)
	}
	for _, l := range []string{"-" + extra, "+" + gone, "--- " + stale} {
		if !slices.Contains(strings.Split(out.String(), "\n"), l) {
			t.Errorf("check's output has no line %q:\n%s", l, out.String())
		}
	}

	// The same lines out of order differ too: the file is the tool's.
	lines := strings.SplitAfter(string(b), "\n")
	lines[0], lines[1] = lines[1], lines[0]
	if err := os.WriteFile(file, []byte(strings.Join(lines, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if same, err := check(&out, dir, mods); err != nil || same {
		t.Errorf("check of reordered lines: same %v, err %v", same, err)
	}

	if err := writeFiles(dir, mods); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("write left %s: %v", stale, err)
	}
	out.Reset()
	if same, err := check(&out, dir, mods); err != nil || !same {
		t.Errorf("check after the second write: same %v, err %v, output %q", same, err, out.String())
	}
}

// TestInternal tells internal packages by an element of their path.
func TestInternal(t *testing.T) {
	for rel, want := range map[string]bool{
		"":                 false,
		"/internal":        true,
		"/internal/plan":   true,
		"/a/internal/b":    true,
		"/internalize":     false,
		"/x/notinternal/y": false,
	} {
		if got := internal(rel); got != want {
			t.Errorf("internal(%q) = %v, want %v", rel, got, want)
		}
	}
}
