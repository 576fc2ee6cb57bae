// Command pair compares limiters in interleaved time slices, for work on
// one of them: each round runs every limiter for -round in turn, the order
// rotating, so that a burst of load from another tenant of a shared
// machine falls on all of them alike. It prints, for each limiter, the
// median ns per call and the median over rounds of its figure divided by
// the last limiter's in the same round, with the quartiles of that ratio.
//
// Run from the bench module:
//
//	go run ./cmd/pair -impls floodgate-sl,floodgate-sl-mutex -keys 1000 -g 1
//
// Keys are "client-0" on, picked uniformly or by Zipf(s=1.1) as in make
// bench, under Plenty, from -g goroutines. Each limiter holds every key
// before the first round, and one round not counted warms them (see
// bench.Interleave, which make bench-full's BenchmarkPaired runs too).
// The figures are for choosing between designs: performance claims come
// from make bench and make bench-full, or from runs committed under
// results/.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/bench"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pair:", err)
		os.Exit(1)
	}
}

// run parses args, runs the rounds and writes the table to w.
func run(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("pair", flag.ContinueOnError)
	impls := fs.String("impls", "floodgate-sl,floodgate-sl-mutex", "comma-separated implementations; ratios are to the last")
	keys := fs.Int("keys", 1000, "number of keys")
	dist := fs.String("dist", "uniform", "uniform or zipf")
	rounds := fs.Int("rounds", 30, "rounds")
	round := fs.Duration("round", 40*time.Millisecond, "time each limiter runs in a round")
	g := fs.Int("g", 1, "goroutines")
	pause := fs.Int("pause", 0, "mean pause after each call, in steps of a busy loop (make bench's paused scenarios: 32)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *keys < 1 || *rounds < 1 || *g < 1:
		return errors.New("-keys, -rounds and -g must be at least 1")
	case *pause < 0:
		return errors.New("-pause must not be negative")
	case *round <= 0:
		return errors.New("-round must be positive")
	case *dist != "uniform" && *dist != "zipf":
		return fmt.Errorf("-dist %q: want uniform or zipf", *dist)
	}
	names := strings.Split(*impls, ",")
	ls := make([]bench.Limiter, len(names))
	ks := make([]string, *keys)
	for i := range ks {
		ks[i] = "client-" + strconv.Itoa(i)
	}
	for i, name := range names {
		impl, err := find(name)
		if err != nil {
			return err
		}
		l, release, err := impl.New(bench.Options{Rate: bench.Plenty})
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		defer release()
		for _, k := range ks {
			l.Allow(strings.Clone(k))
		}
		ls[i] = l
	}
	seq := bench.Picks(*keys, *dist)
	res := bench.Interleave(ls, ks, seq, *g, *pause, *rounds, *round)
	fmt.Fprintf(w, "%d keys, %s, %d goroutines, pause %d, %d rounds of %v\n", *keys, *dist, *g, *pause, *rounds, *round)
	for i, name := range names {
		fmt.Fprintf(w, "%-24s %7.1f ns/op  ÷ %s %.3f (quartiles %.3f–%.3f)",
			name, res.Ns[i], names[len(names)-1], res.Ratio[i], res.Q1[i], res.Q3[i])
		if res.Denied[i] > 0 {
			fmt.Fprintf(w, "  %.2g of its calls denied", res.Denied[i])
		}
		fmt.Fprintln(w)
	}
	return nil
}

// find returns the implementation named name, or an error.
func find(name string) (impl bench.Impl, err error) {
	defer func() {
		if recover() != nil {
			err = fmt.Errorf("no implementation named %q", name)
		}
	}()
	return bench.ByName(name)[0], nil
}
