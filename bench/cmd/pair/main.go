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
// before the first round, and runs 200ms before it. The figures are for
// choosing between designs: performance claims come from make bench.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	warm := fs.Duration("warm", 200*time.Millisecond, "time each limiter runs before the first round")
	g := fs.Int("g", 1, "goroutines")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *keys < 1 || *rounds < 1 || *g < 1:
		return errors.New("-keys, -rounds and -g must be at least 1")
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
	for _, l := range ls {
		slice(l, ks, seq, *g, *warm)
	}
	ns := make([][]float64, len(ls))
	ratio := make([][]float64, len(ls))
	cur := make([]float64, len(ls))
	for k := range *rounds {
		runtime.GC()
		for j := range ls {
			i := (j + k) % len(ls)
			cur[i] = slice(ls[i], ks, seq, *g, *round)
		}
		for i := range ls {
			ns[i] = append(ns[i], cur[i])
			ratio[i] = append(ratio[i], cur[i]/cur[len(ls)-1])
		}
	}
	fmt.Fprintf(w, "%d keys, %s, %d goroutines, %d rounds of %v\n", *keys, *dist, *g, *rounds, *round)
	for i, name := range names {
		fmt.Fprintf(w, "%-24s %7.1f ns/op  ÷ %s %.3f (quartiles %.3f–%.3f)\n",
			name, quantile(ns[i], 0.5), names[len(names)-1],
			quantile(ratio[i], 0.5), quantile(ratio[i], 0.25), quantile(ratio[i], 0.75))
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

// slice runs l from g goroutines for d and returns the wall time per call.
func slice(l bench.Limiter, ks []string, seq []uint32, g int, d time.Duration) float64 {
	var (
		stop  atomic.Bool
		total atomic.Int64
		wg    sync.WaitGroup
	)
	start := time.Now()
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i, n, mask := rand.IntN(len(seq)), 0, len(seq)-1
			for !stop.Load() {
				for range 64 {
					l.Allow(ks[seq[i&mask]])
					i++
				}
				n += 64
			}
			total.Add(int64(n))
		}()
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	return float64(time.Since(start).Nanoseconds()) / float64(total.Load())
}

// quantile returns the q-quantile of xs (nearest rank below).
func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}
