// Command apifile writes and checks the exported surface of floodgate's
// library modules, in the form of Go's own api/ files: one declaration a
// line, sorted, such as
//
//	pkg github.com/floodgate-go/floodgate/redislimit, func NewStore(Config) (*Store, error)
//
// so that every change of what users can import is a diff that a review
// sees. Its arguments are the modules' folders, from the repository's
// root; each module's surface goes to one file in the -dir folder, named
// for the module's folder (the root module for the last element of its
// path): api/floodgate.txt, api/redislimit.txt.
//
// Usage:
//
//	apifile [-go go] [-dir api] [-w | -count] module-folder...
//
// Without a flag it checks the files against the code, prints how they
// differ (- a line of the file that the code no longer has, + a line of
// the code that the file lacks) and exits 1 if they do. -w writes the
// files instead, and removes those of the folder that no module given
// has. -count prints the exported names per package and in total: every
// exported top-level func, type, const and var, and every exported
// method on any type, exported or not.
//
// A module's packages are those of its ./... that are neither internal
// nor main. Their files are those the default build takes (GOOS=linux,
// GOARCH=amd64, no tags), never a _test.go file. The types come from
// go/types, with the export data of the packages they import from
// `go list -export`, which also builds them if they are not in the build
// cache.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	goCmd := flag.String("go", "go", "the go command")
	dir := flag.String("dir", "api", "the folder of the API files")
	write := flag.Bool("w", false, "write the API files instead of checking them")
	count := flag.Bool("count", false, "print the exported names per package and in total")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: apifile [-go go] [-dir api] [-w | -count] module-folder...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 || *write && *count {
		flag.Usage()
		os.Exit(2)
	}
	mods, err := loadModules(*goCmd, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "apifile:", err)
		os.Exit(1)
	}
	switch {
	case *count:
		printCounts(os.Stdout, mods)
	case *write:
		err = writeFiles(*dir, mods)
	default:
		var same bool
		same, err = check(os.Stdout, *dir, mods)
		if err == nil && !same {
			fmt.Fprintf(os.Stderr, "apifile: the exported surface differs from %s: if the change is meant, run make api and commit the files\n", *dir)
			os.Exit(1)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "apifile:", err)
		os.Exit(1)
	}
}
