package main

import (
	"fmt"
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
