// Command report turns the raw output of `make bench` or `make bench-full`
// (Go benchmark text, possibly many interleaved -count samples of each
// benchmark) into a markdown summary and a few SVG charts comparing
// floodgate with its peers.
//
// Run from the bench module:
//
//	go run ./cmd/report -in ../results/bench-raw.txt -out ../results
//
// It prints the summary to stdout and writes, under -out, summary.md,
// throughput-hotkey.svg, throughput-1M.svg and bytes-per-key.svg. A table
// whose figures are absent (`make bench` runs only the families of the
// headline tables) is left out, and listed at the summary's end with the
// reason; a chart whose data is absent is skipped with a note on stderr,
// and an earlier run's file of it under -out is removed.
//
// Only benchmarks named Family/key=value/... with an impl= component and
// no components other than scenario=, impl= and g= are read; every other
// line is ignored. Each figure is the median of its samples.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// main runs the report and exits 1 on error.
func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

// run is main with its arguments and outputs passed in, for tests.
func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "../results/bench-raw.txt", "raw `go test -bench` output to read")
	out := fs.String("out", "../results", "directory to write summary.md and the SVG charts to")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}

	d, err := parseFile(*in)
	if err != nil {
		return err
	}
	if len(d.order) == 0 {
		return fmt.Errorf("%s: no results of benchmarks named Family/scenario=…/impl=…", *in)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	charts, err := writeCharts(d, *out, stderr)
	if err != nil {
		return err
	}
	md := summary(d, filepath.Base(*in), charts)
	if _, err := io.WriteString(stdout, md); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(*out, "summary.md"), []byte(md), 0o644)
}

// parseFile parses the benchmark output in the named file.
func parseFile(name string) (*dataset, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d, err := parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}
