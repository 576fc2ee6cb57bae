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

// section is a part of the summary: the tables that one function makes
// from the families it reads (after regroup), and, for a function that
// makes one table a scenario, the name the summary gives them when they
// have no row.
type section struct {
	families []string
	tables   func(*dataset) []table
	name     string
}

// one is a section's function that makes a single table.
func one(f func(*dataset) table) func(*dataset) []table {
	return func(d *dataset) []table { return []table{f(d)} }
}

// sections are the summary's parts, in order. A section without families
// (the figures with denials) is empty in a good run, and is not listed
// among those the run left out.
var sections = []section{
	{families: peerFamilies, tables: one(glanceTable)},
	{families: peerFamilies, tables: one(peerTable)},
	{families: []string{"Latency"}, tables: one(latencyTable)},
	{families: []string{"BytesPerKey"}, tables: bytesTables, name: "Bytes per key"},
	{families: []string{"Goroutines"}, tables: throughputTables, name: "Throughput (M ops/s) vs goroutines"},
	{families: []string{"Allow"}, tables: one(twinTable)},
	{families: []string{"Allow", "Goroutines", "Keys"}, tables: one(logTable)},
	{families: []string{"Paired"}, tables: one(pairedTable)},
	{families: peerFamilies, tables: one(registryTable)},
	{families: peerFamilies, tables: one(costTable)},
	{families: []string{"Allow"}, tables: one(churnTable)},
	{families: []string{"Middleware"}, tables: one(middlewareTable)},
	{families: []string{"Middleware"}, tables: one(countingTable)},
	{families: []string{"Redis"}, tables: one(redisTable)},
	{families: []string{"Middleware"}, tables: one(redisMiddlewareTable)},
	{families: []string{"RLS"}, tables: one(rlsTable)},
	{families: []string{"RLS"}, tables: one(rlsMemcacheTable)},
	{families: []string{"XDS", "TLS"}, tables: one(gatewayTable)},
	{families: []string{"Idle"}, tables: one(idleTable)},
	{families: []string{"Charge"}, tables: one(chargeTable)},
	{families: []string{"InFlight"}, tables: one(inflightTable)},
	{families: []string{"InFlightRedis"}, tables: one(inflightRedisTable)},
	{tables: one(deniedTable)},
}

// summary renders the markdown summary; in names the source file, charts
// the SVG files written beside summary.md. A section with no row in this
// run (a run cut to the headline tables, a family that needs a
// redis-server where there is none) is left out, and listed at the end
// with the reason: its families did not run, or ran without the figures
// it compares.
func summary(d *dataset, in string, charts []string) string {
	var b strings.Builder
	b.WriteString(sourceLine(d, in) + "\n")
	n := 0
	var left []string
	for _, s := range sections {
		tables := s.tables(d)
		rows := 0
		for _, t := range tables {
			if len(t.rows) == 0 {
				continue
			}
			rows += len(t.rows)
			n++
			b.WriteString("\n")
			t.write(&b, n)
		}
		if rows > 0 || len(s.families) == 0 {
			continue
		}
		name := s.name
		if name == "" && len(tables) > 0 {
			name = tables[0].title
		}
		left = append(left, name+": "+d.why(s.families))
	}
	if len(left) > 0 {
		b.WriteString("\n## Not in this run\n\nTables with no figures in this run (`make bench` runs the headline tables' benchmarks, `make bench-full` every one):\n\n")
		for _, l := range left {
			b.WriteString("- " + l + "\n")
		}
	}
	if len(charts) > 0 {
		b.WriteString("\n## Charts\n\n")
		for _, c := range charts {
			fmt.Fprintf(&b, "![%s](%s)\n", strings.TrimSuffix(c, ".svg"), c)
		}
	}
	return b.String()
}

// why says why a section that reads families has no row: none of them
// ran, or they ran without the figures it shows.
func (d *dataset) why(families []string) string {
	var ran, not []string
	for _, f := range families {
		if slices.ContainsFunc(d.order, func(k benchKey) bool { return k.family == f }) {
			ran = append(ran, "Benchmark"+f)
		} else {
			not = append(not, "Benchmark"+f)
		}
	}
	if len(ran) == 0 {
		return "no figures of " + list(not, "or") + " in this run."
	}
	return list(ran, "and") + " ran, but not the scenarios or implementations it compares."
}

// list joins names as "a", "a or b", "a, b or c" (with conj "or").
func list(names []string, conj string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " " + conj + " " + names[len(names)-1]
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
