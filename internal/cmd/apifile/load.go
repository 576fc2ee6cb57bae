package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
)

// A module is one library module's packages.
type module struct {
	dir  string // its folder, as given
	path string // its module path
	pkgs []*pkg // sorted by import path
}

// A pkg is one package of a module, parsed and type-checked.
type pkg struct {
	path  string
	files []*ast.File
	types *types.Package
}

// buildContext is the default build whose files the surface is read
// from: linux/amd64, cgo on, no tags beyond the toolchain's own.
var buildContext = func() build.Context {
	c := build.Default
	c.GOOS, c.GOARCH = "linux", "amd64"
	c.CgoEnabled = true
	c.BuildTags = nil
	return c
}()

// loadModules loads the modules in dirs, several at once.
func loadModules(goCmd string, dirs []string) ([]*module, error) {
	mods := make([]*module, len(dirs))
	errs := make([]error, len(dirs))
	sem := make(chan struct{}, runtime.NumCPU())
	var wg sync.WaitGroup
	for i, dir := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			mods[i], errs[i] = loadModule(goCmd, filepath.Clean(dir))
		}()
	}
	wg.Wait()
	return mods, errors.Join(errs...)
}

// listed is what go list says of a package.
type listed struct {
	ImportPath string
	Dir        string
	Export     string
	DepOnly    bool
	Module     *struct{ Path string }
}

// loadModule lists the module in dir with the export data of every
// package its packages import, and type-checks its public packages from
// their source.
func loadModule(goCmd, dir string) (*module, error) {
	cmd := exec.Command(goCmd, "list", "-e", "-tags=", "-export", "-deps",
		"-json=ImportPath,Dir,Export,DepOnly,Module", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS="+buildContext.GOOS, "GOARCH="+buildContext.GOARCH, "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: go list: %v: %s", dir, err, bytes.TrimSpace(stderr.Bytes()))
	}
	m := &module{dir: dir}
	exports := map[string]string{}
	var own []listed
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("%s: go list: %v", dir, err)
		}
		if p.Export != "" {
			exports[p.ImportPath] = p.Export
		}
		if !p.DepOnly && p.Module != nil {
			m.path = p.Module.Path
			own = append(own, p)
		}
	}
	if m.path == "" {
		return nil, fmt.Errorf("%s: no package", dir)
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("go list gave no export data for %s", path)
		}
		return os.Open(f)
	})
	for _, l := range own {
		if internal(strings.TrimPrefix(l.ImportPath, m.path)) {
			continue
		}
		p, err := loadPackage(fset, imp, l)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", dir, err)
		}
		if p != nil {
			m.pkgs = append(m.pkgs, p)
		}
	}
	slices.SortFunc(m.pkgs, func(a, b *pkg) int { return strings.Compare(a.path, b.path) })
	return m, nil
}

// internal reports whether the import path p (or its part below its
// module's path) names an internal package.
func internal(p string) bool {
	return slices.Contains(strings.Split(path.Clean("/"+p), "/"), "internal")
}

// loadPackage parses the files of l that buildContext takes, no test, and
// type-checks them. It returns nil for a main package or a folder with
// no such file.
func loadPackage(fset *token.FileSet, imp types.Importer, l listed) (*pkg, error) {
	entries, err := os.ReadDir(l.Dir)
	if err != nil {
		return nil, err
	}
	p := &pkg{path: l.ImportPath}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		if ok, err := buildContext.MatchFile(l.Dir, name); err != nil {
			return nil, err
		} else if !ok {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(l.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		p.files = append(p.files, f)
	}
	if len(p.files) == 0 || p.files[0].Name.Name == "main" {
		return nil, nil
	}
	conf := types.Config{Importer: imp, Sizes: types.SizesFor("gc", buildContext.GOARCH)}
	if p.types, err = conf.Check(p.path, fset, p.files, nil); err != nil {
		return nil, fmt.Errorf("%s: %v", p.path, err)
	}
	return p, nil
}
