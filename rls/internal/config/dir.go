package config

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ReadDir reads every regular file below dir, in every subdirectory, in
// the order of their paths: the files envoyproxy/ratelimit loads from
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, whatever their
// extension. With ignoreDot (RUNTIME_IGNOREDOTFILES), files and
// directories whose names begin with a dot are left out. Symbolic links
// are followed, as a runtime root is usually one. Each File's Name is
// its path. It is Options{}.ReadDir.
func ReadDir(dir string, ignoreDot bool) ([]File, error) { return Options{}.ReadDir(dir, ignoreDot) }

// ReadDir is ReadDir bounded by o.MaxBytes: files that hold more together
// are an error, and no more than that is read.
func (o Options) ReadDir(dir string, ignoreDot bool) ([]File, error) {
	var paths []string
	err := walk(dir, ignoreDot, map[string]bool{}, &paths)
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	left := int64(o.maxBytes())
	files := make([]File, 0, len(paths))
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(io.LimitReader(f, left+1))
		f.Close()
		if err != nil {
			return nil, err
		}
		if left -= int64(len(data)); left < 0 {
			return nil, fmt.Errorf("%s: the configuration's files hold more than %d bytes together", p, o.maxBytes())
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
