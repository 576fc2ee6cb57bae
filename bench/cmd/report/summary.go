package main

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// missing fills a cell that has no figure.
const missing = "–"

// table is one markdown table with a heading and an optional note.
type table struct {
	title  string
	note   string
	header []string
	right  []bool // right-align column i
	rows   [][]string
}

// summary renders the markdown summary; in names the source file, charts
// the SVG files written beside summary.md.
func summary(d *dataset, in string, charts []string) string {
	var b strings.Builder
	b.WriteString(sourceLine(d, in) + "\n")
	tables := []table{glanceTable(d), peerTable(d), latencyTable(d)}
	tables = append(tables, bytesTables(d)...)
	tables = append(tables, throughputTables(d)...)
	tables = append(tables, twinTable(d), logTable(d), pairedTable(d), registryTable(d), costTable(d), churnTable(d), middlewareTable(d), countingTable(d), redisTable(d), redisMiddlewareTable(d), rlsTable(d), gatewayTable(d), idleTable(d), chargeTable(d), inflightTable(d), inflightRedisTable(d), deniedTable(d))
	n := 0
	for _, t := range tables {
		if len(t.rows) == 0 {
			continue
		}
		n++
		b.WriteString("\n")
		t.write(&b, n)
	}
	if len(charts) > 0 {
		b.WriteString("\n## Charts\n\n")
		for _, c := range charts {
			fmt.Fprintf(&b, "![%s](%s)\n", strings.TrimSuffix(c, ".svg"), c)
		}
	}
	return b.String()
}

// sourceLine says where the figures come from.
func sourceLine(d *dataset, in string) string {
	parts := []string{"Source: " + in}
	if v := d.meta["date"]; v != "" {
		parts = append(parts, v)
	}
	if v := machine(d); v != "" {
		parts = append(parts, v)
	}
	if v := strings.TrimPrefix(d.meta["go"], "go version "); v != "" {
		parts = append(parts, v)
	}
	parts = append(parts, "medians of "+samples(d.sampleCount())+".")
	return strings.Join(parts, " · ")
}

// samples formats a sample count: "1 sample", "6 samples".
func samples(n int) string {
	if n == 1 {
		return "1 sample"
	}
	return fmt.Sprintf("%d samples", n)
}

// machine describes the machine from the "# machine:" comment and the
// "cpu:" header, either of which may be absent.
func machine(d *dataset) string {
	var parts []string
	if v := d.meta["machine"]; v != "" {
		parts = append(parts, v)
	}
	if v := d.meta["cpu"]; v != "" {
		parts = append(parts, "cpu: "+v)
	}
	return strings.Join(parts, " · ")
}

// write renders t as section number n.
func (t table) write(b *strings.Builder, n int) {
	fmt.Fprintf(b, "## %d. %s\n\n", n, t.title)
	if t.note != "" {
		b.WriteString(t.note + "\n\n")
	}
	w := t.widths()
	writeRow(b, t.header, w, t.right)
	sep := make([]string, len(w))
	for i := range w {
		sep[i] = strings.Repeat("-", w[i])
		if t.right[i] {
			sep[i] = sep[i][1:] + ":"
		}
	}
	writeRow(b, sep, w, nil)
	for _, r := range t.rows {
		writeRow(b, r, w, t.right)
	}
}

// widths returns each column's width in runes, at least 3.
func (t table) widths() []int {
	w := make([]int, len(t.header))
	for _, r := range append([][]string{t.header}, t.rows...) {
		for i, c := range r {
			w[i] = max(w[i], utf8.RuneCountInString(c), 3)
		}
	}
	return w
}

// writeRow writes one table row, padding each cell to its column's width.
func writeRow(b *strings.Builder, cells []string, w []int, right []bool) {
	b.WriteString("|")
	for i, c := range cells {
		pad := strings.Repeat(" ", w[i]-utf8.RuneCountInString(c))
		if right != nil && right[i] {
			c = pad + c
		} else {
			c += pad
		}
		b.WriteString(" " + c + " |")
	}
	b.WriteString("\n")
}

// rightFrom returns alignments for n columns, the first k left-aligned.
func rightFrom(k, n int) []bool {
	r := make([]bool, n)
	for i := k; i < n; i++ {
		r[i] = true
	}
	return r
}

// fmtNs formats nanoseconds (or bytes): one decimal under 100, else none.
func fmtNs(v float64) string {
	if v < 100 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// fmtRatio formats a ratio such as 0.42×.
func fmtRatio(r float64) string { return fmt.Sprintf("%.2f×", r) }

// fmtOps formats a throughput in M ops/s to about three figures.
func fmtOps(v float64) string {
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// cell formats v with f, or returns missing.
func cell(v float64, ok bool, f func(float64) string) string {
	if !ok {
		return missing
	}
	return f(v)
}

// ratioCell formats a/b, or returns missing unless both are present.
func ratioCell(a float64, aok bool, b float64, bok bool) string {
	if !aok || !bok || b == 0 {
		return missing
	}
	return fmtRatio(a / b)
}

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

// middlewareTable shows what each HTTP middleware adds to a request: its
// ns/op less the bare handler's, with its allocations, and floodgate's
// overhead ÷ each one's.
func middlewareTable(d *dataset) table {
	const fam, bare, ours = "Middleware", "bare", "floodgate"
	t := table{
		title: "HTTP middleware overhead",
		note: "One request through each middleware to a handler that writes \"ok\", keyed by the client's address, on one goroutine. " +
			"Overhead is ns/op less bare's (no middleware); the ratio is floodgate's overhead ÷ that middleware's (below 1× means floodgate adds less).",
		header: []string{"scenario", "impl", "ns/op", "overhead (ns)", "B/op", "allocs/op", "floodgate ÷ it"},
		right:  rightFrom(2, 7),
	}
	for _, sc := range d.scenarios(fam) {
		if strings.HasPrefix(sc, redisScenario) {
			continue // redisMiddlewareTable's
		}
		b, bok := d.ns(fam, sc, bare)
		f, fok := d.ns(fam, sc, ours)
		for _, impl := range d.impls(func(k benchKey) bool { return k.family == fam && k.scenario == sc }, unitNs) {
			k := benchKey{family: fam, scenario: sc, impl: impl}
			v, ok := d.value(k, unitNs)
			row := []string{sc, impl, cell(v, ok, fmtNs), cell(v-b, ok && bok, fmtNs)}
			for _, u := range []string{"B/op", "allocs/op"} {
				x, xok := d.value(k, u)
				row = append(row, cell(x, xok, fmtNs))
			}
			ratio := missing
			if impl != bare {
				ratio = ratioCell(f-b, fok && bok, v-b, ok && bok)
			}
			t.rows = append(t.rows, append(row, ratio))
		}
	}
	return t
}

// countingTable shows what httplimit's per-route counts cost a request:
// floodgate's ns/op less floodgate-uncounted's, as a share of the
// middleware's own overhead (floodgate-uncounted less bare).
func countingTable(d *dataset) table {
	const fam = "Middleware"
	t := table{
		title: "What the middleware's counting costs",
		note: "httplimit with its per-route counts (always on) and without them (an internal switch), ns/op; " +
			"the share is the difference over the uncounted middleware's own overhead (its ns/op less bare's).",
		header: []string{"scenario", "bare", "uncounted", "counted", "counting (ns)", "share of overhead"},
		right:  rightFrom(1, 6),
	}
	for _, sc := range d.scenarios(fam) {
		b, bok := d.ns(fam, sc, "bare")
		u, uok := d.ns(fam, sc, "floodgate-uncounted")
		c, cok := d.ns(fam, sc, "floodgate")
		if !uok || !cok {
			continue
		}
		share := missing
		if bok && u > b {
			share = fmt.Sprintf("%+.1f%%", 100*(c-u)/(u-b))
		}
		t.rows = append(t.rows, []string{sc, cell(b, bok, fmtNs), fmtNs(u), fmtNs(c), fmtNs(c - u), share})
	}
	return t
}

// redisTable compares the Redis-backed limiters on one server: checks a
// second, round trips per check, latency and the server's own time per
// call, at each goroutine count; each limiter's checks a second ÷
// redis_rate's; and lease mode's p99 of the checks it served from a lease
// ÷ the in-process limiter's p99.
func redisTable(d *dataset) table {
	const fam, peer, inproc, lease = "Redis", "redis_rate", "in-process", "floodgate-lease"
	t := table{
		title: "Redis backend: redislimit, per request and in lease mode, vs redis_rate",
		note: "One redis-server on loopback, started by the benchmark; checks of random keys of 1,000, or of one hot key, every one admitted. " +
			"checks/s counts checks over the wall time; rt/check is round trips per check (a pipeline is one), scripts/check the scripts Redis ran per check; p50, p99 and p99.9 are one check's latency in µs, " +
			"and p99 local that of lease mode's checks during which it made no round trip; server µs/call is EVALSHA's usec_per_call from INFO commandstats. " +
			"× redis_rate is checks/s ÷ redis_rate's; p99 ÷ in-process is lease mode's p99 local ÷ the in-process limiter's p99 (same rule, no Redis). " +
			"The -paired scenarios run floodgate and redis_rate in turn at one goroutine, 25 ms each, 20 rounds a pass: checks/s is the median slice's, so that the machine's drift falls on both alike.",
		header: []string{"scenario", "g", "impl", "checks/s", "rt/check", "scripts/check", "p50 (µs)", "p99 (µs)", "p99.9 (µs)", "p99 local (µs)", "server µs/call", "× redis_rate", "p99 ÷ in-process"},
		right:  rightFrom(1, 13),
	}
	us := func(v float64) string { return fmt.Sprintf("%.2f", v/1000) }
	for _, sc := range d.scenarios(fam) {
		for _, g := range d.goroutines(fam, sc) {
			key := func(impl string) benchKey { return benchKey{family: fam, scenario: sc, impl: impl, g: g} }
			pn, pok := d.value(key(peer), unitNs)
			ip99, ipok := d.value(key(inproc), unitP99)
			for _, impl := range d.impls(func(k benchKey) bool { return k.family == fam && k.scenario == sc && k.g == g }, unitNs) {
				k := key(impl)
				ns, ok := d.value(k, unitNs)
				rt, rtok := d.value(k, unitRT)
				scr, scrok := d.value(k, unitScript)
				p50, p50ok := d.value(k, unitP50)
				p99, p99ok := d.value(k, unitP99)
				p999, p999ok := d.value(k, unitP999)
				loc, locok := d.value(k, unitLocal)
				srv, srvok := d.value(k, unitServer)
				row := []string{sc, fmt.Sprint(g), impl, cell(1e9/ns, ok, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
					cell(rt, rtok, func(v float64) string { return fmt.Sprintf("%.6f", v) }),
					cell(scr, scrok, func(v float64) string { return fmt.Sprintf("%.6f", v) }),
					cell(p50, p50ok, us), cell(p99, p99ok, us), cell(p999, p999ok, us), cell(loc, locok, us),
					cell(srv, srvok, func(v float64) string { return fmt.Sprintf("%.2f", v) })}
				if impl != peer {
					row = append(row, ratioCell(pn, pok, ns, ok))
				} else {
					row = append(row, missing)
				}
				if impl == lease {
					row = append(row, ratioCell(loc, locok, ip99, ipok))
				} else {
					row = append(row, missing)
				}
				t.rows = append(t.rows, row)
			}
		}
	}
	return t
}

// redisMiddlewareTable compares the HTTP middlewares on one redis-server
// (BenchmarkMiddleware's scenarios redis-clients-N): requests a second,
// round trips, scripts and commands per request, latency; each one's
// requests a second ÷ the fastest Redis-backed peer's; and each
// Redis-backed one's p99 ÷ the in-process middleware's.
func redisMiddlewareTable(d *dataset) table {
	const fam, bare, inproc = "Middleware", "bare", "floodgate"
	t := table{
		title: "HTTP middleware on Redis: httplimit on redislimit's Store vs ulule and throttled",
		note: "One redis-server on loopback, started by the benchmark; 64 requests at once (g) from random clients of 1 or 1,000, every one admitted, each through the middleware to a handler that writes \"ok\". " +
			"floodgate is httplimit in process, bare no middleware; floodgate-redis is httplimit on redislimit.NewStore, a round trip per request, -lease in lease mode, -2policies a route of two policies decided together, -2tiers two policies in flight at once (each client's request decided by its tier's policy; half the clients in each tier), whose calls share the Store's one pipeline. " +
			"rt/req is the round trips the middleware's go-redis client made per request (a pipeline is one; lease renewals count); scripts/req and cmds/req are the scripts, and every command, that Redis ran per request (INFO commandstats: a script's own commands count); p50, p99 and p99.9 are one request's latency in µs. " +
			"× best peer is req/s ÷ the faster of ulule-redis and throttled-redis; p99 ÷ in-process is the p99 ÷ floodgate's in process. " +
			"The team's targets: floodgate-redis ≥ 1× the best peer; floodgate-redis-lease ≥ 20× and p99 ≤ 2× in process.",
		header: []string{"scenario", "g", "impl", "req/s", "rt/req", "scripts/req", "cmds/req", "p50 (µs)", "p99 (µs)", "p99.9 (µs)", "× best peer", "p99 ÷ in-process"},
		right:  rightFrom(1, 12),
	}
	us := func(v float64) string { return fmt.Sprintf("%.2f", v/1000) }
	per := func(v float64) string { return fmt.Sprintf("%.4g", v) }
	for _, sc := range d.scenarios(fam) {
		if !strings.HasPrefix(sc, redisScenario) {
			continue
		}
		for _, g := range d.goroutines(fam, sc) {
			key := func(impl string) benchKey { return benchKey{family: fam, scenario: sc, impl: impl, g: g} }
			var best string
			var bestNs float64
			for _, p := range redisMiddlewarePeers {
				if v, ok := d.value(key(p), unitNs); ok && (best == "" || v < bestNs) {
					best, bestNs = p, v
				}
			}
			ip99, ipok := d.value(key(inproc), unitP99)
			for _, impl := range d.impls(func(k benchKey) bool { return k.family == fam && k.scenario == sc && k.g == g }, unitNs) {
				k := key(impl)
				ns, ok := d.value(k, unitNs)
				row := []string{sc, fmt.Sprint(g), impl, cell(1e9/ns, ok, func(v float64) string { return fmt.Sprintf("%.0f", v) })}
				for _, u := range []string{unitRTReq, unitScrReq, unitCmds} {
					v, vok := d.value(k, u)
					row = append(row, cell(v, vok, per))
				}
				for _, u := range []string{unitP50, unitP99, unitP999} {
					v, vok := d.value(k, u)
					row = append(row, cell(v, vok, us))
				}
				ratio := missing
				if impl != bare && best != "" {
					ratio = ratioCell(bestNs, true, ns, ok) + " (" + best + ")"
				}
				p99ratio := missing
				if impl != bare && impl != inproc {
					p99, p99ok := d.value(k, unitP99)
					p99ratio = ratioCell(p99, p99ok, ip99, ipok)
				}
				t.rows = append(t.rows, append(row, ratio, p99ratio))
			}
		}
	}
	return t
}

// rlsTable compares Envoy's rate-limit services on one redis-server
// (BenchmarkRLS): requests a second, Redis's commands per request, the
// commands sent per request, latency; each one's requests a second ÷
// envoyproxy/ratelimit's; and each one's p99 ÷ envoyproxy/ratelimit's.
func rlsTable(d *dataset) table {
	const fam, peer = "RLS", "envoy-ratelimit"
	t := table{
		title: "Envoy's rate-limit service: floodgate-rls vs envoyproxy/ratelimit",
		note: "Both services as processes on loopback, on one redis-server that the benchmark starts, with one configuration: a rule per client (1,000), one hot descriptor and a rule per route, each per second, and a token budget per client per hour (as Envoy AI Gateway's are), limits no request reaches. " +
			"64 requests at once (g) over one gRPC connection, each of one client's descriptor (clients-1000-desc-1), of the hot one (hot-desc-1), of a client's, the hot one and a route's (clients-1000-desc-3), or Envoy AI Gateway's token budget: a client's tokens descriptor, half the requests with hits_addend 0 (a check, at a stream's start) and half with its cost of 1 to 1,000 (at its end), which both services charge whatever the key holds, as their default STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT says (tokens-1000-desc-1). " +
			"envoy-ratelimit is envoyproxy/ratelimit, built from its Go module at the version rls/testdata/ratelimit-peer pins, with its default settings; floodgate-rls-redis decides each request by one script, -lease in lease mode (FLOODGATE_LEASE_MAX=100000: a request whose every descriptor holds a lease is served from the leases), -local in process. " +
			"cmds/req is every command Redis ran per request, a script's own included (INFO commandstats); sent/req the commands sent to Redis per request: every one for envoyproxy/ratelimit, which runs no script, and the scripts for floodgate-rls, which sends nothing else. p50, p99 and p99.9 are one request's latency in µs, on a machine that runs the callers, the service and Redis together. " +
			"server CPU is the service process's CPU time per request; gRPC its share in gRPC (grpc-go, HTTP/2, protobuf and the Envoy types), own the service's own µs per request, gRPC, the store (its Redis layer and client) and the runtime alone taken out, each from a CPU profile of the service under the same load (the leaf-most frame outside Go's standard library decides). " +
			"The team's targets: floodgate-rls-redis ≥ 1.2× with fewer commands sent (≥ 1.3× on tokens-1000-desc-1); -lease and -local ≥ 3× and p99 ≤ 0.5×; own ≤ 0.5× envoy-ratelimit's.",
		header: []string{"scenario", "g", "impl", "req/s", "cmds/req", "sent/req", "p50 (µs)", "p99 (µs)", "p99.9 (µs)", "server CPU (µs/req)", "gRPC", "own (µs/req)", "× envoy-ratelimit", "p99 ÷ envoy-ratelimit", "own ÷ envoy-ratelimit"},
		right:  rightFrom(1, 15),
	}
	us := func(v float64) string { return fmt.Sprintf("%.0f", v/1000) }
	per := func(v float64) string { return fmt.Sprintf("%.4g", v) }
	for _, sc := range d.scenarios(fam) {
		for _, g := range d.goroutines(fam, sc) {
			key := func(impl string) benchKey { return benchKey{family: fam, scenario: sc, impl: impl, g: g} }
			pns, pok := d.value(key(peer), unitNs)
			p99, p99ok := d.value(key(peer), unitP99)
			pown, pownOK := d.value(key(peer), unitOwnCPU)
			for _, impl := range d.impls(func(k benchKey) bool { return k.family == fam && k.scenario == sc && k.g == g }, unitNs) {
				k := key(impl)
				ns, ok := d.value(k, unitNs)
				row := []string{sc, fmt.Sprint(g), impl, cell(1e9/ns, ok, func(v float64) string { return fmt.Sprintf("%.0f", v) })}
				cmds, cok := d.value(k, unitCmds)
				scripts, sok := d.value(k, unitScrReq)
				sent, sentOK := scripts, sok // floodgate-rls sends nothing but scripts
				if impl == peer {
					sent, sentOK = cmds, cok // envoyproxy/ratelimit runs no script
				}
				row = append(row, cell(cmds, cok, per), cell(sent, sentOK, per))
				for _, u := range []string{unitP50, unitP99, unitP999} {
					v, vok := d.value(k, u)
					row = append(row, cell(v, vok, us))
				}
				srv, srvOK := d.value(k, unitSrvCPU)
				rpc, rpcOK := d.value(k, unitRPCCPU)
				own, ownOK := d.value(k, unitOwnCPU)
				row = append(row, cell(srv, srvOK, func(v float64) string { return fmt.Sprintf("%.1f", v/1000) }),
					cell(rpc/srv, rpcOK && srvOK && srv > 0, func(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) }),
					cell(own, ownOK, func(v float64) string { return fmt.Sprintf("%.1f", v/1000) }))
				ratio, p99ratio, ownRatio := missing, missing, missing
				if impl != peer {
					ratio = ratioCell(pns, pok, ns, ok)
					v, vok := d.value(k, unitP99)
					p99ratio = ratioCell(v, vok, p99, p99ok)
					ownRatio = ratioCell(own, ownOK, pown, pownOK)
				}
				t.rows = append(t.rows, append(row, ratio, p99ratio, ownRatio))
			}
		}
	}
	return t
}

// The targets of issue 43 for floodgate-rls as Envoy Gateway deploys it,
// which gatewayTable prints beside BenchmarkXDS's and BenchmarkTLS's
// figures.
const (
	pushTarget     = 1e9 // ns from a push of 10,000 rules to its use
	p99RatioTarget = 2   // p99 with a push every second ÷ p99 with none
	tlsLossTarget  = 15  // % of plaintext's requests a second that TLS loses
)

// gatewayTable shows both services as Envoy Gateway deploys them
// (BenchmarkXDS, BenchmarkTLS): per service, the time a push of 10,000
// rules takes to be used, the p99 of ShouldRateLimit with no push and
// with one every second, and their ratio; and per service and store, the
// requests a second over plaintext and over TLS, and the share TLS
// loses; each beside issue 43's target.
func gatewayTable(d *dataset) table {
	t := table{
		title: "Envoy Gateway's deployment: pushes and TLS",
		note: "Each service as a process, as Envoy Gateway deploys envoyproxy/ratelimit: on one redis-server that the benchmark starts, configured over xDS by go-control-plane's ADS server and snapshot cache (a process of its own) over TLS 1.3 with client certificates, and serving gRPC over TLS 1.3 to clients that show one. " +
			"push is the time from the ADS server's new snapshot of 10,000 rules (Envoy Gateway's shape: a route's descriptor and its rule below it), every rule changed, to the service answering by it. " +
			"p99 quiet and p99 with pushes are ShouldRateLimit's 99th percentile latency in µs under an open loop of 2,000 requests a second, each for a random route of the 10,000, in seconds with no push and in seconds that start with such a push, eight of each interleaved (half a second after each push counts in neither); the ratio is the second ÷ the first, the median of the passes' ratios. " +
			"req/s is BenchmarkRLS's clients-1000-desc-1 load (64 callers over one connection) on a process serving plaintext and on one serving TLS, alternately in four rounds; TLS loss is the share of the plaintext requests a second that TLS loses, 100 × (1 − plaintext ÷ TLS time per request). " +
			"envoy-ratelimit is envoyproxy/ratelimit at the version rls/testdata/ratelimit-peer pins; floodgate-rls-redis decides on Redis, -local in process. " +
			"The team's targets (issue 43): a push of 10,000 rules used within 1 s; p99 with pushes ≤ 2× p99 quiet; TLS loses ≤ 15% of the requests a second, for both services.",
		header: []string{"impl", "push (ms)", "target", "p99 quiet (µs)", "p99 with pushes (µs)", "ratio", "target", "plaintext (req/s)", "TLS (req/s)", "TLS loss", "target"},
		right:  rightFrom(1, 11),
	}
	ms := func(v float64) string { return fmt.Sprintf("%.0f", v/1e6) }
	us := func(v float64) string { return fmt.Sprintf("%.0f", v/1e3) }
	rps := func(v float64) string { return fmt.Sprintf("%.0f", 1e9/v) }
	var impls []string
	for _, fam := range []string{"XDS", "TLS"} {
		for _, impl := range d.impls(func(k benchKey) bool { return k.family == fam }, unitNs) {
			if !slices.Contains(impls, impl) {
				impls = append(impls, impl)
			}
		}
	}
	for _, impl := range oursFirst(impls) {
		push, pushOK := d.value(benchKey{family: "XDS", scenario: "push-10000", impl: impl}, unitNs)
		load := benchKey{family: "XDS", scenario: "load-pushes-1s", impl: impl}
		quiet, qOK := d.value(load, unitP99Quiet)
		pushed, pOK := d.value(load, unitP99Pushes)
		ratio, rOK := d.value(load, unitP99Ratio)
		tls := benchKey{family: "TLS", scenario: "clients-1000-desc-1", impl: impl}
		plain, plainOK := d.value(tls, unitPlainNs)
		secure, secureOK := d.value(tls, unitTLSNs)
		loss, lossOK := d.value(tls, unitTLSLoss)
		row := []string{impl, cell(push, pushOK, ms), missing, cell(quiet, qOK, us), cell(pushed, pOK, us),
			cell(ratio, rOK, func(v float64) string { return fmt.Sprintf("%.2f×", v) }), missing,
			cell(plain, plainOK, rps), cell(secure, secureOK, rps), cell(loss, lossOK, func(v float64) string { return fmt.Sprintf("%.1f%%", v) }), missing}
		if pushOK {
			row[2] = fmt.Sprintf("≤ %.0f", pushTarget/1e6)
		}
		if rOK {
			row[6] = fmt.Sprintf("≤ %d×", p99RatioTarget)
		}
		if lossOK {
			row[10] = fmt.Sprintf("≤ %d%%", tlsLossTarget)
		}
		t.rows = append(t.rows, row)
	}
	return t
}

// The targets of issue 41 for floodgate-rls's idle rules, which
// idleTable prints beside BenchmarkIdle's figures: CPU while idle as a
// share of one core, goroutines beyond those at start, live heap a rule.
const (
	idleCPUTarget        = 1    // % of one core over the 10 s idle
	idleGoroutinesTarget = 16   // goroutines added
	idleHeapTarget       = 2048 // bytes a rule (2 KiB)
)

// idleFigures are one scenario's figures of BenchmarkIdle.
type idleFigures struct {
	cpu        []float64 // % of one core, one a run
	goroutines float64   // goroutines added
	heap       float64   // bytes a rule
	rss        float64   // MiB
}

// idleBefore are BenchmarkIdle's figures before issue 41's engine (one
// engine per Store, where each rule's policy had run a goroutine of its
// own), by scenario: `go test -bench '^BenchmarkIdle$' -benchtime 1x` in
// bench/ at commit 554c3c8 with BenchmarkIdle added (b833e24, which adds
// nothing else), one run; the 1,000 rules' CPU also from a second run.
// They are fixed here because make bench measures only the code it is
// run on.
var idleBefore = map[string]idleFigures{
	"rules-1000":  {cpu: []float64{35.4, 23.6}, goroutines: 1000, heap: 237581, rss: 44.5},
	"rules-10000": {cpu: []float64{195.0}, goroutines: 10000, heap: 236988, rss: 204.6},
}

// idleTable shows what idle rules cost floodgate-rls (BenchmarkIdle): per
// scenario, its CPU while idle, the goroutines it added, its heap a rule
// and its resident memory, each beside issue 41's target and the figure
// before that engine.
func idleTable(d *dataset) table {
	const fam, impl = "Idle", "floodgate-rls-lease"
	t := table{
		title: "Idle rules: what floodgate-rls holds and spends while nobody asks",
		note: "floodgate-rls as a process on one redis-server that the benchmark starts, in lease mode (FLOODGATE_LEASE_MAX=1000), " +
			"with a configuration of 1,000 or 10,000 rules (rules-N), each asked once over gRPC and then left idle for 10 s. " +
			"idle CPU is the CPU the process used over those 10 s as a share of one core (above 100%, more than one core); " +
			"goroutines added the goroutines it ran after them beyond those it ran before any request; heap its live heap after them " +
			"beyond the heap before any request, per rule (their keys' leases have gone back by then); RSS its resident memory, in MiB. " +
			"\"before\" is the same benchmark before issue 41's engine, when each rule's policy ran a goroutine of its own: " +
			"`go test -bench '^BenchmarkIdle$' -benchtime 1x` in bench/ at commit 554c3c8 with BenchmarkIdle added (b833e24, which adds nothing else), one run " +
			"(two for the 1,000 rules' CPU, both shown); those figures are kept in cmd/report, not measured by this run. " +
			"The team's targets (issue 41), in the \"target\" columns: idle CPU ≤ 1% of one core over 10 s, at most 16 goroutines " +
			"beyond those at start, heap ≤ 2 KiB a rule.",
		header: []string{"scenario", "idle CPU (% of a core)", "target", "before",
			"goroutines added", "target", "before", "heap (B/rule)", "target", "before", "RSS (MiB)", "before"},
		right: rightFrom(1, 12),
	}
	pct := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	added := func(v float64) string {
		if v == float64(int64(v)) {
			return fmt.Sprintf("%+.0f", v)
		}
		return fmt.Sprintf("%+.1f", v)
	}
	whole := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	mib := func(v float64) string { return fmt.Sprintf("%.1f", v) }
	for _, sc := range d.scenarios(fam) {
		k := benchKey{family: fam, scenario: sc, impl: impl}
		cpu, cpuOK := d.value(k, unitIdle)
		g, gOK := d.value(k, unitAdded)
		h, hOK := d.value(k, unitBRule)
		rss, rssOK := d.value(k, unitRSS)
		if !cpuOK && !gOK && !hOK && !rssOK {
			continue
		}
		b, bOK := idleBefore[sc]
		var cpus []string
		for _, v := range b.cpu {
			cpus = append(cpus, pct(v))
		}
		beforeCPU := missing
		if len(cpus) > 0 {
			beforeCPU = strings.Join(cpus, ", ")
		}
		t.rows = append(t.rows, []string{sc,
			cell(cpu, cpuOK, pct), "≤ " + pct(idleCPUTarget), beforeCPU,
			cell(g, gOK, added), "≤ " + added(idleGoroutinesTarget), cell(b.goroutines, bOK, added),
			cell(h, hOK, whole), "≤ " + whole(idleHeapTarget), cell(b.heap, bOK, whole),
			cell(rss, rssOK, mib), cell(b.rss, bOK, mib)})
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
