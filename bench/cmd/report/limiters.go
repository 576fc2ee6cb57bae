package main

import (
	"fmt"
	"slices"
	"strings"
)

// peerFamilies are the families of tables 1 and 2, whose rows are scenarios.
var peerFamilies = []string{"Allow", "Keys"}

// peerTable compares floodgate-tb (and its coarse-clock form) with every
// peer, on every Allow and Keys scenario.
func peerTable(d *dataset) table {
	const tb, coarse = "floodgate-tb", "floodgate-tb-coarse"
	peers := d.impls(func(k benchKey) bool {
		return slices.Contains(peerFamilies, k.family) && k.g == 0 && !isOurs(k.impl) && !strings.HasPrefix(k.impl, floorImpl)
	}, unitNs)
	t := table{
		title: "floodgate vs peers, ns/op (lower is better)",
		note: "The first two columns are ns/op. Each \"vs\" column is floodgate-tb ÷ that peer " +
			"(below 1× means floodgate-tb is faster); the best per-key peer is the fastest of " +
			strings.Join(perKeyPeers, ", ") + " in that row, and \"coarse vs best\" is " +
			coarse + " ÷ that peer. \"floor\" is the harness alone (pick a key, read it, no limiter), " +
			"the part of every figure in its row that no limiter can remove; \"floor-cas\" adds a hash " +
			"and a CAS on one word of a 36 MB table, the least a limiter with a word per key can do; " +
			"\"floor-cas-clock\" adds a read of Go's monotonic clock on every call, the least a limiter " +
			"on the SystemClock can do, and \"its floor vs best\" is that floor ÷ the best per-key peer.",
		header: []string{"scenario", tb + " (ns)", coarse + " (ns)", floorImpl + " (ns)", floorImpl + "-cas (ns)", floorImpl + "-cas-clock (ns)"},
	}
	for _, p := range peers {
		t.header = append(t.header, "vs "+p)
	}
	t.header = append(t.header, "vs best per-key peer", "coarse vs best", "its floor vs best")
	t.right = rightFrom(1, len(t.header))
	for _, fam := range peerFamilies {
		for _, sc := range d.scenarios(fam) {
			t.rows = append(t.rows, peerRow(d, fam, sc, peers))
		}
	}
	return t
}

// glanceTable is table 2 cut to what a chooser reads (the README copies
// it): floodgate-tb on both clocks, the best per-key peer, their ratio,
// and the floor no limiter on the SystemClock can go below.
func glanceTable(d *dataset) table {
	const tb, coarse, floor = "floodgate-tb", "floodgate-tb-coarse", floorImpl + "-cas-clock"
	t := table{
		title: "At a glance: floodgate against the fastest peer, ns/op",
		note: "The best per-key peer is the fastest of " + strings.Join(perKeyPeers, ", ") + " in that row; " +
			"\"vs best\" is floodgate-tb ÷ it (below 1× means floodgate is faster). " + floor + " is a hash, one CAS " +
			"and one read of the monotonic clock per call: the least a limiter on the SystemClock can do. Table 2 has every peer.",
		header: []string{"scenario", tb, coarse, "best per-key peer", "vs best", floor},
		right:  []bool{false, true, true, true, true, true},
	}
	for _, fam := range peerFamilies {
		for _, sc := range d.scenarios(fam) {
			v, ok := d.ns(fam, sc, tb)
			co, coOK := d.ns(fam, sc, coarse)
			fk, fkOK := d.ns(fam, sc, floor)
			name, best, bestOK := d.bestPerKeyPeer(benchKey{family: fam, scenario: sc}, unitNs)
			if !ok || !bestOK {
				continue
			}
			t.rows = append(t.rows, []string{sc, fmtNs(v), cell(co, coOK, fmtNs), fmtNs(best) + " (" + name + ")",
				ratioCell(v, ok, best, bestOK), cell(fk, fkOK, fmtNs)})
		}
	}
	return t
}

// peerRow is table 2's row for one scenario of a family.
func peerRow(d *dataset, fam, sc string, peers []string) []string {
	tb, tbOK := d.ns(fam, sc, "floodgate-tb")
	co, coOK := d.ns(fam, sc, "floodgate-tb-coarse")
	fl, flOK := d.ns(fam, sc, floorImpl)
	fc, fcOK := d.ns(fam, sc, floorImpl+"-cas")
	fk, fkOK := d.ns(fam, sc, floorImpl+"-cas-clock")
	row := []string{sc, cell(tb, tbOK, fmtNs), cell(co, coOK, fmtNs), cell(fl, flOK, fmtNs), cell(fc, fcOK, fmtNs), cell(fk, fkOK, fmtNs)}
	for _, p := range peers {
		pv, ok := d.ns(fam, sc, p)
		row = append(row, ratioCell(tb, tbOK, pv, ok))
	}
	name, best, ok := d.bestPerKeyPeer(benchKey{family: fam, scenario: sc}, unitNs)
	vsBest := ratioCell(tb, tbOK, best, ok)
	if vsBest != missing {
		vsBest += " (" + name + ")"
	}
	return append(row, vsBest, ratioCell(co, coOK, best, ok), ratioCell(fk, fkOK, best, ok))
}

// latencyTable lists the latency percentiles of every Latency benchmark.
func latencyTable(d *dataset) table {
	t := table{
		title:  "Latency under parallel load",
		note:   "Per-call latency percentiles, ns.",
		header: []string{"scenario", "impl", "p50", "p99", "p99.9"},
		right:  rightFrom(2, 5),
	}
	for _, sc := range d.scenarios("Latency") {
		for _, impl := range d.impls(func(k benchKey) bool { return k.family == "Latency" && k.scenario == sc }, unitP99) {
			k := benchKey{family: "Latency", scenario: sc, impl: impl}
			row := []string{sc, impl}
			for _, u := range []string{unitP50, unitP99, unitP999} {
				v, ok := d.value(k, u)
				row = append(row, cell(v, ok, fmtNs))
			}
			t.rows = append(t.rows, row)
		}
	}
	return t
}

// bytesTables gives one table per BytesPerKey scenario, smallest first.
func bytesTables(d *dataset) []table {
	var out []table
	for _, sc := range d.scenarios("BytesPerKey") {
		t := table{
			title:  "Bytes per key at " + sc + " keys",
			note:   "Memory held per key (B/key, lower is better); the ratio is to the smallest per-key peer.",
			header: []string{"impl", "B/key", "vs best per-key peer"},
			right:  rightFrom(1, 3),
		}
		base := benchKey{family: "BytesPerKey", scenario: sc}
		name, best, bestOK := d.bestPerKeyPeer(base, unitBKey)
		for _, b := range d.bars("BytesPerKey", sc, unitBKey) {
			r := ratioCell(b.value, true, best, bestOK)
			if r != missing {
				r += " (" + name + ")"
			}
			t.rows = append(t.rows, []string{b.name, fmtNs(b.value), r})
		}
		out = append(out, t)
	}
	return out
}

// throughputTables gives one table per Goroutines scenario: M ops/s by
// implementation and number of goroutines.
func throughputTables(d *dataset) []table {
	var out []table
	for _, sc := range d.scenarios("Goroutines") {
		gs := d.goroutines("Goroutines", sc)
		t := table{
			title:  "Throughput (M ops/s) vs goroutines: " + sc,
			note:   "Millions of Allow calls a second (1000 ÷ ns/op), higher is better; columns are goroutines.",
			header: []string{"impl"},
			right:  rightFrom(1, len(gs)+1),
		}
		for _, g := range gs {
			t.header = append(t.header, fmt.Sprintf("g=%d", g))
		}
		for _, s := range d.throughput(sc) {
			row := []string{s.name}
			for _, g := range gs {
				v, ok := s.points[g]
				row = append(row, cell(v, ok, fmtOps))
			}
			t.rows = append(t.rows, row)
		}
		out = append(out, t)
	}
	return out
}

// twinTable compares each floodgate algorithm's lock-free form with its
// mutex twin, on the SystemClock (no -coarse), in every Allow scenario.
func twinTable(d *dataset) table {
	t := table{
		title:  "floodgate twins: lock-free vs mutex",
		note:   "Allow, SystemClock variants, ns/op; ratio = lock-free ÷ mutex (below 1× means lock-free is faster).",
		header: []string{"scenario", "algorithm", "lock-free", "mutex", "ratio"},
		right:  rightFrom(2, 5),
	}
	for _, sc := range d.scenarios("Allow") {
		impls := d.impls(func(k benchKey) bool { return k.family == "Allow" && k.scenario == sc }, unitNs)
		for _, impl := range impls {
			if !isOurs(impl) || strings.Contains(impl, "-mutex") || strings.HasSuffix(impl, "-coarse") {
				continue
			}
			lf, lfOK := d.ns("Allow", sc, impl)
			mu, muOK := d.ns("Allow", sc, impl+"-mutex")
			if !lfOK || !muOK {
				continue
			}
			t.rows = append(t.rows, []string{sc, strings.TrimPrefix(impl, floodgate),
				fmtNs(lf), fmtNs(mu), fmtRatio(lf / mu)})
		}
	}
	return t
}

// logTable holds the sliding log against its mutex twin and against the
// token bucket, in every scenario that runs both twins: the hot key on
// one goroutine and on every core, denials, the goroutine sweep on the hot
// key, and 1,000 keys.
func logTable(d *dataset) table {
	const sl, mu, tb = floodgate + "sl", floodgate + "sl-mutex", floodgate + "tb"
	t := table{
		title:  "The sliding log: lock-free vs its mutex twin and the token bucket",
		note:   "Allow, SystemClock, ns/op; \"÷ twin\" is floodgate-sl ÷ floodgate-sl-mutex and \"÷ tb\" floodgate-sl ÷ floodgate-tb in the same scenario (below 1× means the sliding log is faster).",
		header: []string{"scenario", "floodgate-sl", "floodgate-sl-mutex", "floodgate-tb", "÷ twin", "÷ tb"},
		right:  rightFrom(1, 6),
	}
	row := func(name string, k benchKey) {
		k.impl = sl
		lf, lfOK := d.value(k, unitNs)
		k.impl = mu
		m, mOK := d.value(k, unitNs)
		if !lfOK || !mOK {
			return
		}
		k.impl = tb
		b, bOK := d.value(k, unitNs)
		t.rows = append(t.rows, []string{name, fmtNs(lf), fmtNs(m), cell(b, bOK, fmtNs),
			fmtRatio(lf / m), ratioCell(lf, true, b, bOK)})
	}
	for _, sc := range d.scenarios("Allow") {
		row(sc, benchKey{family: "Allow", scenario: sc})
	}
	for _, sc := range d.scenarios("Goroutines") {
		for _, g := range d.goroutines("Goroutines", sc) {
			row(fmt.Sprintf("%s, g=%d", sc, g), benchKey{family: "Goroutines", scenario: sc, g: g})
		}
	}
	for _, sc := range d.scenarios("Keys") {
		row(sc, benchKey{family: "Keys", scenario: sc})
	}
	return t
}

// pairedTable holds BenchmarkPaired: the sliding log and the limiter it
// is held against, measured in interleaved slices. The ratio is the
// benchmark's own, the median over rounds of the per-round ratio, not the
// ratio of the two medians shown beside it.
func pairedTable(d *dataset) table {
	const sl = floodgate + "sl"
	t := table{
		title: "The sliding log, interleaved with its twin and the token bucket",
		note: "BenchmarkPaired, Allow, SystemClock, ns/op: the two run in turn, slice by slice, in the same passes. " +
			"\"ratio\" is the median over rounds of floodgate-sl ÷ the other in the same round (below 1× means the sliding log is faster).",
		header: []string{"scenario", "floodgate-sl", "against", "its ns/op", "ratio"},
		right:  []bool{false, true, false, true, true},
	}
	for _, sc := range d.scenarios("Paired") {
		k := benchKey{family: "Paired", scenario: sc, impl: sl}
		lf, lfOK := d.value(k, unitNs)
		r, rOK := d.value(k, unitRatio)
		others := d.impls(func(k benchKey) bool { return k.family == "Paired" && k.scenario == sc && k.impl != sl }, unitNs)
		if !lfOK || !rOK || len(others) != 1 {
			continue
		}
		o, _ := d.value(benchKey{family: "Paired", scenario: sc, impl: others[0]}, unitNs)
		t.rows = append(t.rows, []string{sc, fmtNs(lf), others[0], fmtNs(o), fmtRatio(r)})
	}
	return t
}

// deniedTable lists every figure whose calls were not all granted: the
// harness reports denied/op beside a figure when Plenty refused some of
// its calls (see bench/allow_test.go), so that figure measured some
// denials among the grants. A pass that refused nothing reports no
// denied/op, so the passes that did are counted.
func deniedTable(d *dataset) table {
	t := table{
		title: "Figures with denials",
		note: "Benchmarks meant to measure grants, in which some calls were refused: the figure beside them " +
			"measured a mix. \"passes\" is how many of the benchmark's passes refused any; \"denied/op\" " +
			"the median and the largest share of calls refused in those passes.",
		header: []string{"benchmark", "ns/op", "passes", "denied/op (median)", "denied/op (max)"},
		right:  []bool{false, true, true, true, true},
	}
	for _, k := range d.order {
		ds := d.samples[k][unitDenied]
		if len(ds) == 0 {
			continue
		}
		name := k.family + "/scenario=" + k.scenario + "/impl=" + k.impl
		if k.g > 0 {
			name += fmt.Sprintf("/g=%d", k.g)
		}
		if k.op != "" {
			name += "/op=" + k.op
		}
		ns, ok := d.value(k, unitNs)
		t.rows = append(t.rows, []string{name, cell(ns, ok, fmtNs), fmt.Sprintf("%d of %d", len(ds), d.lines[k]),
			fmtShare(median(ds)), fmtShare(slices.Max(ds))})
	}
	return t
}

// fmtShare formats a share of calls, such as 2.1e-06 or 0.13.
func fmtShare(v float64) string { return fmt.Sprintf("%.2g", v) }

// registryTable compares floodgate-tb on the flat table with the same on
// the reference registry (xsync maps), on both clocks, in every scenario
// both ran.
func registryTable(d *dataset) table {
	t := table{
		title: "floodgate registries: flat table vs xsync maps",
		note: "floodgate-tb, ns/op; ratio = flat ÷ xsync (below 1× means the flat table is faster). " +
			"The 1M-bytes row is B/key.",
		header: []string{"scenario", "flat", "xsync", "ratio", "flat coarse", "xsync coarse", "ratio coarse"},
		right:  rightFrom(1, 7),
	}
	for _, fam := range peerFamilies {
		for _, sc := range d.scenarios(fam) {
			unit := unitNs
			if strings.HasSuffix(sc, "-bytes") {
				unit = unitBKey
			}
			row := []string{sc}
			found := false
			for _, suffix := range []string{"", "-coarse"} {
				f, fOK := d.value(benchKey{family: fam, scenario: sc, impl: "floodgate-tb" + suffix}, unit)
				x, xOK := d.value(benchKey{family: fam, scenario: sc, impl: "floodgate-tb-xsync" + suffix}, unit)
				found = found || xOK
				row = append(row, cell(f, fOK, fmtNs), cell(x, xOK, fmtNs), ratioCell(f, fOK, x, xOK))
			}
			if found {
				t.rows = append(t.rows, row)
			}
		}
	}
	return t
}

// costTable shows what counting decisions (Config.Stats) and the clock
// cost on a hot key: each variant of floodgate-tb against floodgate-tb.
func costTable(d *dataset) table {
	t := table{
		title: "What Stats and the clock cost",
		note: "floodgate-tb, ns/op. \"+stats\" is the share Config.Stats adds; tsc is floodgate-tb on the " +
			"opt-in TSCClock, coarse on the 1ms CoarseClock.",
		header: []string{"scenario", "tb", "tb-stats", "+stats", "tb-coarse", "tb-stats-coarse", "+stats coarse", "tb-tsc"},
		right:  rightFrom(1, 8),
	}
	for _, fam := range peerFamilies {
		for _, sc := range d.scenarios(fam) {
			row := []string{sc}
			found := false
			for _, suffix := range []string{"", "-coarse"} {
				b, bOK := d.ns(fam, sc, "floodgate-tb"+suffix)
				s, sOK := d.ns(fam, sc, "floodgate-tb-stats"+suffix)
				found = found || sOK
				share := missing
				if bOK && sOK {
					share = fmt.Sprintf("%+.1f%%", 100*(s/b-1))
				}
				row = append(row, cell(b, bOK, fmtNs), cell(s, sOK, fmtNs), share)
			}
			ts, tsOK := d.ns(fam, sc, "floodgate-tb-tsc")
			row = append(row, cell(ts, tsOK, fmtNs))
			if found || tsOK {
				t.rows = append(t.rows, row)
			}
		}
	}
	return t
}

// churnTable shows what creating a key costs: time, bytes and allocations
// per call in the churn scenarios, where every call brings a new key. The
// floor row is the harness's own share (the key's string).
func churnTable(d *dataset) table {
	t := table{
		title:  "Creating a key: churn scenarios",
		note:   "Per call, each with a key never seen before: ns/op, B/op and allocs/op. \"floor\" makes the key's string and nothing else.",
		header: []string{"scenario", "impl", "ns/op", "B/op", "allocs/op"},
		right:  rightFrom(2, 5),
	}
	for _, sc := range d.scenarios("Allow") {
		if !strings.HasPrefix(sc, "churn") {
			continue
		}
		for _, impl := range d.impls(func(k benchKey) bool { return k.family == "Allow" && k.scenario == sc }, unitNs) {
			k := benchKey{family: "Allow", scenario: sc, impl: impl}
			row := []string{sc, impl}
			for _, u := range []string{unitNs, "B/op", "allocs/op"} {
				v, ok := d.value(k, u)
				row = append(row, cell(v, ok, fmtNs))
			}
			t.rows = append(t.rows, row)
		}
	}
	return t
}

// chargeTable holds a cost known after the work (issue 42) against
// AllowN (BenchmarkCharge): per scenario and algorithm, the ns/op of
// AllowN(key, 1), of Charge(key, 1) and of Reserve(key, 2) then
// Settle(1) on the same keys, each of the last two ÷ AllowN's, the round
// ÷ two AllowNs (it makes two calls), and the three ops' allocs/op.
func chargeTable(d *dataset) table {
	const fam = "Charge"
	t := table{
		title: "Costs known after the work: Charge and Reserve+Settle beside AllowN",
		note: "floodgate's lock-free algorithms on the system clock, ns/op on the same keys of one limiter under a rule that refuses nothing " +
			"(no key ever owes): AllowN(key, 1); Charge(key, 1); and \"Reserve+Settle\", Reserve(key, 2) then Settle(1), " +
			"the whole round of a request whose cost is known only when it ends, two calls held against one AllowN. " +
			"hotkey is one key from one goroutine; 1M-uniform-parallel 1M keys picked uniformly from every core. " +
			"\"settle ÷ 2×AllowN\" holds the round against two AllowNs, one for each of its calls: Reserve is an AllowN, " +
			"so the round is at most 2× when Settle costs at most one AllowN. " +
			"\"Settle alone\" times Settle(1) by itself on the hot key, its reservations made in batches of 1,024 with the timer stopped " +
			"(not the sliding log's, whose give-back lands only while its reservation's entry is the newest). " +
			"The team's targets (issue 42): charge ÷ AllowN ≤ 1×, and Settle no dearer than an AllowN (Settle alone ÷ AllowN ≤ 1×, settle ÷ 2×AllowN ≤ 1×).",
		header: []string{"scenario", "algorithm", "AllowN (ns/op)", "Charge (ns/op)", "Reserve+Settle (ns/op)", "Settle alone (ns/op)",
			"charge ÷ AllowN", "settle ÷ AllowN", "settle ÷ 2×AllowN", "Settle alone ÷ AllowN", "allocs/op (AllowN, Charge, settle)"},
		right: rightFrom(2, 11),
	}
	for _, sc := range d.scenarios(fam) {
		for _, impl := range d.impls(func(k benchKey) bool { return k.family == fam && k.scenario == sc }, unitNs) {
			key := func(op string) benchKey { return benchKey{family: fam, scenario: sc, impl: impl, op: op} }
			a, aOK := d.value(key("allown"), unitNs)
			c, cOK := d.value(key("charge"), unitNs)
			s, sOK := d.value(key("settle"), unitNs)
			alone, aloneOK := d.value(key("settlealone"), unitNs)
			var allocs []string
			for _, op := range []string{"allown", "charge", "settle"} {
				v, ok := d.value(key(op), "allocs/op")
				allocs = append(allocs, cell(v, ok, fmtNs))
			}
			t.rows = append(t.rows, []string{sc, impl, cell(a, aOK, fmtNs), cell(c, cOK, fmtNs), cell(s, sOK, fmtNs), cell(alone, aloneOK, fmtNs),
				ratioCell(c, cOK, a, aOK), ratioCell(s, sOK, a, aOK), ratioCell(s, sOK, 2*a, aOK), ratioCell(alone, aloneOK, a, aOK),
				strings.Join(allocs, ", ")})
		}
	}
	return t
}
