package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"
)

// Chart size, in SVG user units (pixels).
const (
	chartW = 720
	chartH = 420
)

// Colours. Floodgate's lines take blues and greens, peers' warm colours;
// in the bar chart floodgate is blue and the peers are grey.
var (
	ourPalette  = []string{"#1f4e9c", "#2a9d8f", "#4c78a8", "#3a923a", "#6a5acd", "#17becf", "#0b6e4f", "#7fa7d9"}
	peerPalette = []string{"#d62728", "#ff7f0e", "#8c564b", "#e377c2", "#bcbd22", "#7f7f7f", "#b8860b", "#9467bd"}
	ourBar      = "#2b6cb0"
	ourBarLight = "#7aa6d8"
	peerBar     = "#a0a0a0"
)

// series is one implementation's line: goroutines → M ops/s.
type series struct {
	name   string
	points map[int]float64
}

// bar is one implementation's bar.
type bar struct {
	name  string
	value float64
}

// throughput returns, for a Goroutines scenario, each implementation's
// throughput in M ops/s by number of goroutines.
func (d *dataset) throughput(scenario string) []series {
	keep := func(k benchKey) bool { return k.family == "Goroutines" && k.scenario == scenario && k.g > 0 }
	var out []series
	for _, impl := range d.impls(keep, unitNs) {
		s := series{name: impl, points: map[int]float64{}}
		for _, g := range d.goroutines("Goroutines", scenario) {
			ns, ok := d.value(benchKey{family: "Goroutines", scenario: scenario, impl: impl, g: g}, unitNs)
			if ok && ns > 0 {
				s.points[g] = 1000 / ns
			}
		}
		out = append(out, s)
	}
	return out
}

// bars returns a family's scenario's median of unit per implementation,
// smallest first.
func (d *dataset) bars(family, scenario, unit string) []bar {
	keep := func(k benchKey) bool { return k.family == family && k.scenario == scenario && k.g == 0 }
	var out []bar
	for _, impl := range d.impls(keep, unit) {
		v, _ := d.value(benchKey{family: family, scenario: scenario, impl: impl}, unit)
		out = append(out, bar{impl, v})
	}
	slices.SortStableFunc(out, func(a, b bar) int { return cmpFloat(a.value, b.value) })
	return out
}

// cmpFloat orders two floats, for sorting.
func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// writeCharts writes each chart that has data into dir and returns the
// names of the files written; a chart without data gets a note on
// stderr, and its file in dir, an earlier run's, is removed.
func writeCharts(d *dataset, dir string, stderr io.Writer) ([]string, error) {
	charts := []struct {
		file string
		svg  func(*dataset) (string, bool)
	}{
		{"throughput-hotkey.svg", func(d *dataset) (string, bool) {
			return throughputChart(d, "hotkey", "Allow on one hot key: throughput vs goroutines")
		}},
		{"throughput-1M.svg", func(d *dataset) (string, bool) {
			return throughputChart(d, "1M-uniform", "Allow over 1M keys (uniform): throughput vs goroutines")
		}},
		{"bytes-per-key.svg", bytesChart},
	}
	var written []string
	for _, c := range charts {
		svg, ok := c.svg(d)
		if !ok {
			fmt.Fprintf(stderr, "report: no data for %s, not written\n", c.file)
			if err := os.Remove(filepath.Join(dir, c.file)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return written, err
			}
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, c.file), []byte(svg), 0o644); err != nil {
			return written, err
		}
		written = append(written, c.file)
	}
	return written, nil
}

// subtitle is the machine line under a chart's title.
func subtitle(d *dataset) string {
	s := machine(d)
	if n := d.sampleCount(); n > 0 {
		if s != "" {
			s += " · "
		}
		s += "medians of " + samples(n)
	}
	return s
}

// colours gives every implementation in d a colour, the same in every
// chart: floodgate's from ourPalette, peers' from peerPalette.
func colours(d *dataset) map[string]string {
	m := map[string]string{}
	var ours, peers int
	for _, k := range d.order {
		if _, done := m[k.impl]; done {
			continue
		}
		if isOurs(k.impl) {
			m[k.impl] = ourPalette[ours%len(ourPalette)]
			ours++
		} else {
			m[k.impl] = peerPalette[peers%len(peerPalette)]
			peers++
		}
	}
	return m
}

// svgDoc accumulates an SVG document.
type svgDoc struct{ strings.Builder }

// newSVG starts a chart with a white background, a title and a subtitle.
func newSVG(title, sub string) *svgDoc {
	s := &svgDoc{}
	fmt.Fprintf(s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n",
		chartW, chartH, chartW, chartH)
	fmt.Fprintf(s, "<title>%s</title>\n", esc(title))
	s.WriteString(`<rect width="100%" height="100%" fill="#ffffff"/>` + "\n")
	s.text(chartW/2, 26, "middle", `font-size="16" font-weight="bold" fill="#222"`, title)
	if sub != "" {
		s.text(chartW/2, 46, "middle", `fill="#555"`, sub)
	}
	return s
}

// text writes a text element anchored at (x, y).
func (s *svgDoc) text(x, y float64, anchor, attrs, body string) {
	fmt.Fprintf(s, `<text x="%.1f" y="%.1f" text-anchor="%s" %s>%s</text>`+"\n", x, y, anchor, attrs, esc(body))
}

// line writes a line element.
func (s *svgDoc) line(x1, y1, x2, y2 float64, attrs string) {
	fmt.Fprintf(s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" %s/>`+"\n", x1, y1, x2, y2, attrs)
}

// close ends the document and returns it.
func (s *svgDoc) close() string {
	s.WriteString("</svg>\n")
	return s.String()
}

// esc escapes text for XML.
func esc(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;")
	return r.Replace(s)
}

// niceScale returns a step of 1, 2, 2.5 or 5 × 10^k giving about n ticks
// from 0 to a top at least hi.
func niceScale(hi float64, n int) (step, top float64) {
	if hi <= 0 || math.IsNaN(hi) || math.IsInf(hi, 0) {
		return 0.2, 1
	}
	raw := hi / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if step = m * mag; step >= raw {
			break
		}
	}
	return step, math.Ceil(hi/step-1e-9) * step
}

// tickLabel formats a tick value with as few decimals as step needs.
func tickLabel(v, step float64) string {
	dec := 0
	for dec < 6 && math.Abs(step*math.Pow(10, float64(dec))-math.Round(step*math.Pow(10, float64(dec)))) > 1e-6 {
		dec++
	}
	return fmt.Sprintf("%.*f", dec, v)
}

// plot is a chart's plotting area.
type plot struct{ left, top, width, height float64 }

// bottom and right are the plot's far edges.
func (p plot) bottom() float64 { return p.top + p.height }
func (p plot) right() float64  { return p.left + p.width }

// throughputChart draws a line chart of M ops/s against goroutines for a
// Goroutines scenario.
func throughputChart(d *dataset, scenario, title string) (string, bool) {
	ss := d.throughput(scenario)
	gs := d.goroutines("Goroutines", scenario)
	if len(ss) == 0 || len(gs) == 0 {
		return "", false
	}
	longest := 0
	for _, s := range ss {
		longest = max(longest, utf8.RuneCountInString(s.name))
	}
	right := math.Min(260, math.Max(150, 60+7*float64(longest)))
	p := plot{left: 70, top: 70, width: chartW - 70 - right, height: chartH - 70 - 60}
	ymax := 0.0
	for _, s := range ss {
		for _, v := range s.points {
			ymax = max(ymax, v)
		}
	}
	step, top := niceScale(ymax, 5)
	doc := newSVG(title, subtitle(d))
	yAxis(doc, p, step, top, tickLabel, "throughput (M ops/s)")
	xpos := log2Positions(gs, p)
	for _, g := range gs {
		doc.line(xpos[g], p.bottom(), xpos[g], p.bottom()+5, `stroke="#333"`)
		doc.text(xpos[g], p.bottom()+19, "middle", `fill="#333"`, fmt.Sprint(g))
	}
	doc.text(p.left+p.width/2, p.bottom()+42, "middle", `fill="#333"`, "goroutines")
	col := colours(d)
	y := func(v float64) float64 { return p.bottom() - v/top*p.height }
	for _, s := range ss {
		drawSeries(doc, s, gs, xpos, y, col[s.name])
	}
	legend(doc, ss, col, p.right()+20, p.top)
	return doc.close(), true
}

// yAxis draws horizontal grid lines with tick labels and a rotated label.
func yAxis(doc *svgDoc, p plot, step, top float64, label func(v, step float64) string, title string) {
	for i := 0; float64(i)*step <= top+step/1e6; i++ {
		v := float64(i) * step
		y := p.bottom() - v/top*p.height
		doc.line(p.left, y, p.right(), y, `stroke="#e3e3e3"`)
		doc.text(p.left-8, y+4, "end", `fill="#333"`, label(v, step))
	}
	doc.line(p.left, p.top, p.left, p.bottom(), `stroke="#333"`)
	doc.line(p.left, p.bottom(), p.right(), p.bottom(), `stroke="#333"`)
	cx, cy := p.left-50, p.top+p.height/2
	fmt.Fprintf(doc, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#333" transform="rotate(-90 %.1f %.1f)">%s</text>`+"\n",
		cx, cy, cx, cy, esc(title))
}

// log2Positions spaces the goroutine counts by their logarithm across the
// plot, leaving a margin at either end.
func log2Positions(gs []int, p plot) map[int]float64 {
	const pad = 24
	pos := map[int]float64{}
	lo, hi := math.Log2(float64(gs[0])), math.Log2(float64(gs[len(gs)-1]))
	for _, g := range gs {
		if hi == lo {
			pos[g] = p.left + p.width/2
			continue
		}
		pos[g] = p.left + pad + (math.Log2(float64(g))-lo)/(hi-lo)*(p.width-2*pad)
	}
	return pos
}

// drawSeries draws one line with its markers; peers' lines are dashed.
func drawSeries(doc *svgDoc, s series, gs []int, xpos map[int]float64, y func(float64) float64, colour string) {
	var pts []string
	for _, g := range gs {
		if v, ok := s.points[g]; ok {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xpos[g], y(v)))
		}
	}
	dash := ""
	if !isOurs(s.name) {
		dash = ` stroke-dasharray="6 4"`
	}
	fmt.Fprintf(doc, "<g>\n<title>%s</title>\n", esc(s.name))
	fmt.Fprintf(doc, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", colour, dash, strings.Join(pts, " "))
	for _, g := range gs {
		if v, ok := s.points[g]; ok {
			fmt.Fprintf(doc, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s, %d goroutines: %s M ops/s</title></circle>`+"\n",
				xpos[g], y(v), colour, esc(s.name), g, fmtOps(v))
		}
	}
	doc.WriteString("</g>\n")
}

// legend lists the series at (x, y), one per row.
func legend(doc *svgDoc, ss []series, col map[string]string, x, y float64) {
	row := math.Min(20, float64(chartH-int(y)-20)/float64(len(ss)))
	for i, s := range ss {
		cy := y + float64(i)*row + 6
		dash := ""
		if !isOurs(s.name) {
			dash = ` stroke-dasharray="6 4"`
		}
		doc.line(x, cy, x+24, cy, fmt.Sprintf(`stroke="%s" stroke-width="2"%s`, col[s.name], dash))
		fmt.Fprintf(doc, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", x+12, cy, col[s.name])
		doc.text(x+30, cy+4, "start", `fill="#222"`, s.name)
	}
}

// bytesChart draws a horizontal bar chart of B/key per implementation at
// 1M keys (or, failing that, the first BytesPerKey scenario).
func bytesChart(d *dataset) (string, bool) {
	scs := d.scenarios("BytesPerKey")
	if len(scs) == 0 {
		return "", false
	}
	sc := scs[0]
	if slices.Contains(scs, "1M") {
		sc = "1M"
	}
	bs := d.bars("BytesPerKey", sc, unitBKey)
	if len(bs) == 0 {
		return "", false
	}
	longest := 0
	for _, b := range bs {
		longest = max(longest, utf8.RuneCountInString(b.name))
	}
	left := math.Max(110, float64(longest)*7+20)
	p := plot{left: left, top: 80, width: chartW - left - 80, height: chartH - 80 - 56}
	doc := newSVG("Memory per key at "+sc+" keys (lower is better)", subtitle(d))
	barLegend(doc, 62)
	step, top := niceScale(bs[len(bs)-1].value, 5)
	x := func(v float64) float64 { return p.left + v/top*p.width }
	xAxis(doc, p, step, top, x, "bytes per key (B/key)")
	slot := p.height / float64(len(bs))
	h := math.Min(28, slot*0.7)
	for i, b := range bs {
		y := p.top + float64(i)*slot + (slot-h)/2
		fmt.Fprintf(doc, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %s B/key</title></rect>`+"\n",
			p.left, y, x(b.value)-p.left, h, barColour(b.name), esc(b.name), fmtNs(b.value))
		doc.text(p.left-8, y+h/2+4, "end", `fill="#222"`, b.name)
		doc.text(x(b.value)+5, y+h/2+4, "start", `fill="#333"`, fmtNs(b.value))
	}
	return doc.close(), true
}

// xAxis draws vertical grid lines with tick labels and the axis label.
func xAxis(doc *svgDoc, p plot, step, top float64, x func(float64) float64, title string) {
	for i := 0; float64(i)*step <= top+step/1e6; i++ {
		v := float64(i) * step
		doc.line(x(v), p.top, x(v), p.bottom(), `stroke="#e3e3e3"`)
		doc.line(x(v), p.bottom(), x(v), p.bottom()+5, `stroke="#333"`)
		doc.text(x(v), p.bottom()+19, "middle", `fill="#333"`, tickLabel(v, step))
	}
	doc.line(p.left, p.top, p.left, p.bottom(), `stroke="#333"`)
	doc.line(p.left, p.bottom(), p.right(), p.bottom(), `stroke="#333"`)
	doc.text(p.left+p.width/2, p.bottom()+40, "middle", `fill="#333"`, title)
}

// barColour is blue for floodgate (lighter for its mutex twins), grey for
// peers.
func barColour(impl string) string {
	switch {
	case !isOurs(impl):
		return peerBar
	case strings.Contains(impl, "-mutex"):
		return ourBarLight
	}
	return ourBar
}

// barLegend explains the bar colours on one row centred at y.
func barLegend(doc *svgDoc, y float64) {
	items := []struct{ colour, label string }{
		{ourBar, "floodgate"}, {ourBarLight, "floodgate (mutex)"}, {peerBar, "peers"},
	}
	x := float64(chartW)/2 - 170
	for _, it := range items {
		fmt.Fprintf(doc, `<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s"/>`+"\n", x, y-10, it.colour)
		doc.text(x+17, y, "start", `fill="#222"`, it.label)
		x += 30 + float64(len(it.label))*7
	}
}
