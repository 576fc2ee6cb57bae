package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// fileName is the name of m's API file: its folder's path with "/" as
// "-", or for the module at ".", the last element of its module path.
func fileName(m *module) string {
	if m.dir == "." {
		return path.Base(m.path) + ".txt"
	}
	return strings.ReplaceAll(filepath.ToSlash(m.dir), "/", "-") + ".txt"
}

// contents is m's API file: every line of its packages, sorted.
func contents(m *module) []byte {
	var lines []string
	for _, p := range m.pkgs {
		lines = append(lines, apiLines(p.types)...)
	}
	slices.Sort(lines)
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// writeFiles writes every module's API file into dir, and removes the
// files of dir that no module has.
func writeFiles(dir string, mods []*module) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, m := range mods {
		if err := os.WriteFile(filepath.Join(dir, fileName(m)), contents(m), 0o644); err != nil {
			return err
		}
	}
	stale, err := staleFiles(dir, mods)
	for _, name := range stale {
		err = errors.Join(err, os.Remove(filepath.Join(dir, name)))
	}
	return err
}

// staleFiles are the .txt files of dir that no module in mods has.
func staleFiles(dir string, mods []*module) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var stale []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".txt") && !slices.ContainsFunc(mods, func(m *module) bool { return fileName(m) == e.Name() }) {
			stale = append(stale, e.Name())
		}
	}
	return stale, nil
}

// check compares every module's API file in dir with its code, prints
// how each that differs does to out, and reports whether all agree.
func check(out io.Writer, dir string, mods []*module) (bool, error) {
	same := true
	for _, m := range mods {
		name := filepath.Join(dir, fileName(m))
		want, err := os.ReadFile(name)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
		got := contents(m)
		if bytes.Equal(want, got) {
			continue
		}
		same = false
		fmt.Fprintf(out, "--- %s\n+++ the code of %s\n", name, m.path)
		removed, added := setDiff(want, got)
		for _, l := range removed {
			fmt.Fprintf(out, "-%s\n", l)
		}
		for _, l := range added {
			fmt.Fprintf(out, "+%s\n", l)
		}
		if len(removed)+len(added) == 0 {
			fmt.Fprintln(out, "(the same lines, in another order or form)")
		}
	}
	stale, err := staleFiles(dir, mods)
	for _, name := range stale {
		same = false
		fmt.Fprintf(out, "--- %s\n(no library module has it)\n", filepath.Join(dir, name))
	}
	return same, err
}

// setDiff returns the lines of want that got lacks and those of got that
// want lacks, each sorted (an API file's lines are a sorted set).
func setDiff(want, got []byte) (removed, added []string) {
	w, g := lineSet(want), lineSet(got)
	for _, l := range sortedKeys(w) {
		if !g[l] {
			removed = append(removed, l)
		}
	}
	for _, l := range sortedKeys(g) {
		if !w[l] {
			added = append(added, l)
		}
	}
	return removed, added
}

func lineSet(b []byte) map[string]bool {
	set := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" {
			set[l] = true
		}
	}
	return set
}

func sortedKeys(set map[string]bool) []string {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
