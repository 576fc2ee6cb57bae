// Command modes shows, round by round, how this machine runs goroutines
// side by side, and what that does to the sliding log against its twin, on
// a hot key and on 1,000 keys. Each round measures, one after another in
// slices of -round:
//
//   - the token bucket, the sliding log and its mutex twin on one key
//     from one goroutine;
//   - all three on 1,000 keys picked uniformly from GOMAXPROCS goroutines,
//     which share no state worth the name: the token bucket's figure is
//     the most that every core kept busy can do here, the parallel floor;
//   - the sliding log, its mutex twin and the token bucket on one hot key
//     from GOMAXPROCS goroutines.
//
// "scaling" is the token bucket's calls per second from every core on
// 1,000 keys over its calls per second from one goroutine: about the
// number of cores on a machine whose cores run apart, and below 1 when
// the machine gives its busy cores less, together, than it gives one
// (a VM whose vCPUs share a host core, or are time-sliced). The summary
// splits the rounds at a scaling of 0.8 and gives each group's medians.
//
// Run from the bench module:
//
//	go run ./cmd/modes -rounds 200
//
// The figures are for finding the mechanism behind a result; the claims
// come from make bench-full (BenchmarkPaired).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/bench"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "modes:", err)
		os.Exit(1)
	}
}

// figures are what one round measured, in ns per call.
var figures = []string{"tb-1", "sl-1", "twin-1", "tb-1K-par", "sl-1K-par", "twin-1K-par", "tb-hot-par", "sl-hot-par", "twin-hot-par"}

// at is the index of figure f.
func at(f string) int { return slices.Index(figures, f) }

// ratios are the quotients the summary gives, as medians of each round's.
var ratios = [][2]string{{"sl-1", "twin-1"}, {"sl-1K-par", "twin-1K-par"}, {"sl-hot-par", "twin-hot-par"}, {"sl-hot-par", "sl-1K-par"}}

func run(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("modes", flag.ContinueOnError)
	rounds := fs.Int("rounds", 100, "rounds")
	round := fs.Duration("round", 20*time.Millisecond, "time each figure runs in a round")
	quiet := fs.Bool("q", false, "print the summary only")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rounds < 1 || *round <= 0 {
		return errors.New("-rounds must be at least 1 and -round positive")
	}
	hot, hotSeq := []string{"hot"}, bench.Picks(1, "uniform")
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	keySeq := bench.Picks(len(keys), "uniform")
	mk := func(name string, ks []string) (bench.Limiter, error) {
		impls := bench.ByName(name)
		l, release, err := impls[0].New(bench.Options{Rate: bench.Plenty})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		_ = release // the process ends with the run
		for _, k := range ks {
			l.Allow(strings.Clone(k))
		}
		return l, nil
	}
	type slice struct {
		l   bench.Limiter
		ks  []string
		seq []uint32
		g   int
	}
	procs := runtime.GOMAXPROCS(0)
	var plan []slice
	for _, f := range figures {
		name, rest, _ := strings.Cut(f, "-")
		impl := map[string]string{"tb": "floodgate-tb", "sl": "floodgate-sl", "twin": "floodgate-sl-mutex"}[name]
		ks, seq, g := hot, hotSeq, procs
		if strings.HasPrefix(rest, "1K") {
			ks, seq = keys, keySeq
		}
		if rest == "1" {
			g = 1
		}
		l, err := mk(impl, ks)
		if err != nil {
			return err
		}
		plan = append(plan, slice{l, ks, seq, g})
	}
	rows := make([][]float64, 0, *rounds)
	for range *rounds {
		row := make([]float64, len(plan))
		for i, s := range plan {
			row[i], _, _ = bench.Slice(s.l, s.ks, s.seq, s.g, 0, *round)
		}
		rows = append(rows, row)
		if !*quiet {
			for i, f := range figures {
				fmt.Fprintf(w, "%s %.1f  ", f, row[i])
			}
			fmt.Fprintf(w, "scaling %.2f\n", scaling(row))
		}
	}
	fmt.Fprintf(w, "%d rounds of %v a figure, GOMAXPROCS %d\n", *rounds, *round, procs)
	for _, apart := range []bool{true, false} {
		var group [][]float64
		for _, row := range rows {
			if scaling(row) >= 0.8 == apart {
				group = append(group, row)
			}
		}
		label := "cores run apart (scaling ≥ 0.8)"
		if !apart {
			label = "busy cores share (scaling < 0.8)"
		}
		fmt.Fprintf(w, "%s: %d rounds\n", label, len(group))
		if len(group) == 0 {
			continue
		}
		med := make([]float64, len(figures))
		for i, f := range figures {
			med[i] = median(group, func(r []float64) float64 { return r[i] })
			fmt.Fprintf(w, "  %-13s %7.1f ns/op\n", f, med[i])
		}
		fmt.Fprintf(w, "  scaling %.2f", median(group, scaling))
		for _, q := range ratios {
			a, b := at(q[0]), at(q[1])
			fmt.Fprintf(w, "; %s ÷ %s %.2f", q[0], q[1], median(group, func(r []float64) float64 { return r[a] / r[b] }))
		}
		fmt.Fprintln(w, " (medians of the rounds' ratios)")
	}
	return nil
}

// scaling is the token bucket's rate on 1K keys from every core over its
// rate from one goroutine.
func scaling(row []float64) float64 { return row[at("tb-1")] / row[at("tb-1K-par")] }

func median(rows [][]float64, f func([]float64) float64) float64 {
	xs := make([]float64, len(rows))
	for i, r := range rows {
		xs[i] = f(r)
	}
	slices.Sort(xs)
	return xs[len(xs)/2]
}
