package main

import (
	"cmp"
	"fmt"
	"go/ast"
	"io"
	"slices"
)

// exportedNames counts p's exported names as issue 56 counts them: every
// exported top-level func, type, const and var, and every exported
// method declared on any type, exported or not, in the files it was
// read from.
func exportedNames(p *pkg) int {
	n := 0
	for _, f := range p.files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() {
					n++
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							n++
						}
					case *ast.ValueSpec:
						for _, id := range s.Names {
							if id.IsExported() {
								n++
							}
						}
					}
				}
			}
		}
	}
	return n
}

// printCounts prints each package's count, the largest first, then the
// total.
func printCounts(out io.Writer, mods []*module) {
	type row struct {
		path string
		n    int
	}
	var rows []row
	total := 0
	for _, m := range mods {
		for _, p := range m.pkgs {
			n := exportedNames(p)
			rows = append(rows, row{p.path, n})
			total += n
		}
	}
	slices.SortFunc(rows, func(a, b row) int {
		return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.path, b.path))
	})
	for _, r := range rows {
		fmt.Fprintf(out, "%4d %s\n", r.n, r.path)
	}
	fmt.Fprintf(out, "%4d total\n", total)
}
