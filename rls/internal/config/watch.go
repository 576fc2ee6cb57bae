package config

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// stamp describes a runtime directory's files as they stand: each one's
// path, the path it resolves to (a runtime root swapped by a link
// changes it), its size and its modification time. Two equal stamps mean
// nothing to load again.
func stamp(dir string, ignoreDot bool) (string, error) {
	var paths []string
	if err := walk(dir, ignoreDot, map[string]bool{}, &paths); err != nil {
		return "", err
	}
	sort.Strings(paths)
	var b strings.Builder
	for _, p := range paths {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return "", err
		}
		st, err := os.Stat(real)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%q %q %d %d\n", p, real, st.Size(), st.ModTime().UnixNano())
	}
	return b.String(), nil
}

// Watch loads the configuration in dir (see ReadDir) and passes it to
// apply, then looks at dir again on every tick, and loads and applies it
// again whenever a file was added, removed, changed, or swapped by a
// link. A load that fails passes its error, and apply keeps what it had:
// the files are tried again when they next change. Write each file
// whole (to a temporary name outside dir, then renamed in), or swap the
// root's link: a file caught half-written fails to load, and loads at
// the next tick. Watch returns when ctx ends. Give it a time.Ticker's channel: a tick of 250 ms picks a
// change up within a second.
func Watch(ctx context.Context, dir string, ignoreDot bool, ticks <-chan time.Time, apply func(*Config, error)) {
	Options{}.Watch(ctx, dir, ignoreDot, ticks, apply)
}

// Watch is Watch with the files loaded as o loads them.
func (o Options) Watch(ctx context.Context, dir string, ignoreDot bool, ticks <-chan time.Time, apply func(*Config, error)) {
	last := "\x00" // no stamp: load at once
	for {
		// One round reads one tree: the link is resolved once, so that a
		// root swapped mid-round is read whole at the next.
		real, err := filepath.EvalSymlinks(dir)
		var s string
		if err == nil {
			s, err = stamp(real, ignoreDot)
		}
		if err != nil {
			if last != "" { // report a missing directory once, not on every tick
				apply(nil, err)
			}
			last = ""
		} else if s != last {
			last = s
			files, err := o.ReadDir(real, ignoreDot)
			if err == nil {
				var c *Config
				if c, err = o.Load(files); err == nil {
					apply(c, nil)
				}
			}
			if err != nil {
				apply(nil, err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
	}
}
