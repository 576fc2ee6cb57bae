package main

import (
	"fmt"
	"strings"
)

// inflightTable holds floodgate's in-flight limit (BenchmarkInFlight,
// issue 44) against golang.org/x/sync/semaphore, acronis/go-appkit's
// per-key limiter, the floor of two atomic adds and the keyed floor: per
// scenario, each one's ns/op for a slot taken and given back, floodgate's
// ratio to each, the keyed floor's to the semaphore, and floodgate's
// allocs/op.
func inflightTable(d *dataset) table {
	const fam = "InFlight"
	impls := []string{"floodgate", "floodgate-mutex", "semaphore", "go-appkit", "floor", "floor-keyed"}
	t := table{
		title: "In-flight limits: a slot taken and given back",
		note: "ns/op of one request's round through an in-flight limit, a slot taken and given back, under a limit no run reaches: " +
			"floodgate's lock-free inflight.Limiter (TryAcquire, then Release) and its mutex twin; golang.org/x/sync/semaphore, one global semaphore " +
			"for every key (TryAcquire(1), then Release(1)); acronis/go-appkit's per-key limiter as its InFlightLimit middleware keeps it " +
			"(an LRU cache behind one mutex, and per key a channel of slots and one of backlog slots; its HTTP handling and per-request timer left out); " +
			"the floor, the two atomic adds on one word that any exact count makes, with no key to find (hot key only); " +
			"and the keyed floor, the same two adds on the key's entry of a 1M-entry table of 16-byte entries (an identity and a count), " +
			"found by the key's hash (hash/maphash), the least an exact count with a key to find can do (it checks and probes nothing). " +
			"hotkey is one key from one goroutine, hotkey-parallel from every core; 1M-uniform-parallel 1M keys, each held once before the timer starts, " +
			"picked uniformly from every core. The team's targets (issue 44): floodgate ÷ semaphore ≤ 0.5× on the hot key and on 1M keys, " +
			"floodgate ÷ go-appkit ≤ 0.5× on 1M keys, and no allocation.",
		header: []string{"scenario", "floodgate (ns/op)", "mutex twin (ns/op)", "semaphore (ns/op)", "go-appkit (ns/op)", "floor (ns/op)",
			"keyed floor (ns/op)", "÷ semaphore", "÷ go-appkit", "÷ floor", "keyed floor ÷ semaphore", "floodgate allocs/op"},
		right: rightFrom(1, 12),
	}
	for _, sc := range d.scenarios(fam) {
		vals := make([]float64, len(impls))
		oks := make([]bool, len(impls))
		row := []string{sc}
		for j, impl := range impls {
			vals[j], oks[j] = d.value(benchKey{family: fam, scenario: sc, impl: impl}, unitNs)
			row = append(row, cell(vals[j], oks[j], fmtNs))
		}
		allocs, aOK := d.value(benchKey{family: fam, scenario: sc, impl: "floodgate"}, "allocs/op")
		row = append(row, ratioCell(vals[0], oks[0], vals[2], oks[2]), ratioCell(vals[0], oks[0], vals[3], oks[3]),
			ratioCell(vals[0], oks[0], vals[4], oks[4]), ratioCell(vals[5], oks[5], vals[2], oks[2]), cell(allocs, aOK, fmtNs))
		t.rows = append(t.rows, row)
	}
	return t
}

// inflightRedisTable holds redislimit's in-flight slots against the
// Stripe-style sorted-set script (BenchmarkInFlightRedis, issue 44): per
// scenario, each one's rounds a second (a slot taken and given back), the
// ratio, round trips per round and p99; and the renewal traffic of the
// slots held.
func inflightRedisTable(d *dataset) table {
	const fam = "InFlightRedis"
	t := table{
		title: "In-flight limits on Redis: a slot taken and given back, and the renewals",
		note: "One redis-server on loopback, started by the benchmark, 64 goroutines on random clients of 1,000 (1K-keys) or one (hotkey), under a limit never reached. " +
			"floodgate is redislimit's Store.SlotPolicy: one script to take a slot, one to give it back, the calls in flight pipelined together; " +
			"floodgate-lease the same with Lease.Slots 4 (a replica holds up to 4 of a client's slots ahead, and takes one of those with no round trip); " +
			"stripe is a concurrent-requests limiter written from Stripe's published design (a sorted set per client, entries pruned after 60 s), " +
			"by go-redis: an EVALSHA, then a ZREM. rounds/s counts rounds over the wall time; rt/round is round trips per round (a pipeline is one); p99 a round's latency in µs. " +
			"The renewal rows hold 1,000 slots over 1,000 clients or 10, and give the renewal commands a second per thousand slots held and the renewal round trips a second, " +
			"at the default SlotTTL of 10 s (measured at 300 ms and scaled). The team's targets (issue 44): at most 2 round trips a round, and floodgate ÷ stripe ≥ 1×.",
		header: []string{"scenario", "floodgate (rounds/s)", "floodgate-lease (rounds/s)", "stripe (rounds/s)", "floodgate ÷ stripe", "floodgate-lease ÷ stripe",
			"floodgate rt/round", "floodgate-lease rt/round", "stripe rt/round", "floodgate p99 (µs)", "stripe p99 (µs)", "renewal cmds/s per 1,000 slots", "renewal rt/s"},
		right: rightFrom(1, 13),
	}
	us := func(v float64) string { return fmt.Sprintf("%.0f", v/1000) }
	whole := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	two := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	three := func(v float64) string { return fmt.Sprintf("%.3f", v) }
	for _, sc := range d.scenarios(fam) {
		g := 0
		if gs := d.goroutines(fam, sc); len(gs) > 0 {
			g = gs[0]
		}
		key := func(impl string) benchKey { return benchKey{family: fam, scenario: sc, impl: impl, g: g} }
		if strings.HasPrefix(sc, "renewal-") {
			cmds, cok := d.value(key("floodgate"), "renewal-cmds/s/1000slots")
			rts, rok := d.value(key("floodgate"), "renewal-rt/s")
			t.rows = append(t.rows, []string{sc, missing, missing, missing, missing, missing, missing, missing, missing, missing, missing, cell(cmds, cok, two), cell(rts, rok, three)})
			continue
		}
		fn, fok := d.value(key("floodgate"), unitNs)
		ln, lok := d.value(key("floodgate-lease"), unitNs)
		sn, sok := d.value(key("stripe"), unitNs)
		frt, frtok := d.value(key("floodgate"), "rt/op")
		lrt, lrtok := d.value(key("floodgate-lease"), "rt/op")
		srt, srtok := d.value(key("stripe"), "rt/op")
		fp, fpok := d.value(key("floodgate"), unitP99)
		sp, spok := d.value(key("stripe"), unitP99)
		t.rows = append(t.rows, []string{sc, cell(1e9/fn, fok, whole), cell(1e9/ln, lok, whole), cell(1e9/sn, sok, whole),
			ratioCell(sn, sok, fn, fok), ratioCell(sn, sok, ln, lok),
			cell(frt, frtok, three), cell(lrt, lrtok, three), cell(srt, srtok, three), cell(fp, fpok, us), cell(sp, spok, us), missing, missing})
	}
	return t
}
