package config

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// MaxFileSize bounds each configuration file ReadDir reads: a file larger
// is an error, not a load that exhausts memory.
const MaxFileSize = 64 << 20

// ReadDir reads every regular file below dir, in every subdirectory, in
// the order of their paths: the files envoyproxy/ratelimit loads from
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, whatever their
// extension. With ignoreDot (RUNTIME_IGNOREDOTFILES), files and
// directories whose names begin with a dot are left out. Symbolic links
// are followed, as a runtime root is usually one. Each File's Name is
// its path.
func ReadDir(dir string, ignoreDot bool) ([]File, error) {
	var paths []string
	err := walk(dir, ignoreDot, map[string]bool{}, &paths)
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	files := make([]File, 0, len(paths))
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if st.Size() > MaxFileSize {
			return nil, fmt.Errorf("%s: %d bytes, more than the %d a configuration file may hold", p, st.Size(), MaxFileSize)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		files = append(files, File{Name: p, Data: data})
	}
	return files, nil
}

// walk appends the regular files below dir to paths, following links;
// seen holds the directories already walked, by their resolved path, so
// that a link back up the tree ends the walk instead of looping.
func walk(dir string, ignoreDot bool, seen map[string]bool, paths *[]string) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	if seen[real] {
		return nil
	}
	seen[real] = true
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if ignoreDot && strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		st, err := os.Stat(p) // through a link
		if err != nil {
			return err
		}
		switch {
		case st.IsDir():
			if err := walk(p, ignoreDot, seen, paths); err != nil {
				return err
			}
		case st.Mode().IsRegular():
			*paths = append(*paths, p)
		}
	}
	return nil
}
