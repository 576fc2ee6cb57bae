package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestStripProcs(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Allow/scenario=hotkey/impl=floodgate-tb-2", "Allow/scenario=hotkey/impl=floodgate-tb"},
		{"Allow/scenario=hotkey/impl=floodgate-tb-16", "Allow/scenario=hotkey/impl=floodgate-tb"},
		{"Allow/scenario=hotkey/impl=floodgate-tb", "Allow/scenario=hotkey/impl=floodgate-tb"},
		{"Keys/impl=ulule/scenario=1K-uniform-1-2", "Keys/impl=ulule/scenario=1K-uniform-1"},
		{"Keys/impl=ulule/scenario=1K-uniform-1", "Keys/impl=ulule/scenario=1K-uniform-1"}, // GOMAXPROCS=1
		{"Goroutines/impl=uber/scenario=hotkey/g=64-8", "Goroutines/impl=uber/scenario=hotkey/g=64"},
		{"X-+2", "X-+2"},
		{"X-", "X-"},
	}
	for _, tt := range tests {
		if got := stripProcs(tt.in); got != tt.want {
			t.Errorf("stripProcs(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseName(t *testing.T) {
	tests := []struct {
		in   string
		want benchKey
		ok   bool
	}{
		{"Allow/scenario=hotkey/impl=floodgate-tb", benchKey{"Allow", "hotkey", "floodgate-tb", 0, ""}, true},
		{"Keys/impl=ulule/scenario=1M-zipf-parallel", benchKey{"Keys", "1M-zipf-parallel", "ulule", 0, ""}, true},
		{"Goroutines/g=16/impl=xtime/scenario=hotkey", benchKey{"Goroutines", "hotkey", "xtime", 16, ""}, true},
		{"BytesPerKey/impl=golimiter/scenario=1M", benchKey{"BytesPerKey", "1M", "golimiter", 0, ""}, true},
		{"Latency/impl=a=b/scenario=s", benchKey{"Latency", "s", "a=b", 0, ""}, true}, // value keeps later '='
		{"Charge/scenario=hotkey/impl=floodgate-tb/op=settle", benchKey{"Charge", "hotkey", "floodgate-tb", 0, "settle"}, true},
		{"Allow/scenario=hotkey", benchKey{}, false},                                // no impl
		{"Allow/alg=token_bucket/scenario=hotkey/impl=lockfree", benchKey{}, false}, // unknown component
		{"MapLoad/keys=1000/impl=xsync-v3", benchKey{}, false},
		{"Goroutines/impl=x/scenario=hotkey/g=many", benchKey{}, false},
		{"Goroutines/impl=x/scenario=hotkey/g=0", benchKey{}, false},
		{"Allow/hotkey/impl=x", benchKey{}, false},
		{"Allow", benchKey{}, false},
		{"/impl=x", benchKey{}, false},
	}
	for _, tt := range tests {
		got, ok := parseName(tt.in)
		if ok != tt.ok || ok && got != tt.want {
			t.Errorf("parseName(%q) = %+v, %v; want %+v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseResult(t *testing.T) {
	tests := []struct {
		line    string
		name    string
		metrics map[string]float64
		ok      bool
	}{
		{
			"BenchmarkAllow/scenario=hotkey/impl=floodgate-tb-2   \t19402113\t        61.85 ns/op\t       0 B/op\t       0 allocs/op",
			"BenchmarkAllow/scenario=hotkey/impl=floodgate-tb-2",
			map[string]float64{"ns/op": 61.85, "B/op": 0, "allocs/op": 0}, true,
		},
		{
			"BenchmarkLatency/impl=xtime-syncmap/scenario=1M-uniform-parallel-2  1000000  120.5 ns/op  80.00 p50-ns  410.0 p99-ns  2100 p99.9-ns  0 B/op  0 allocs/op",
			"BenchmarkLatency/impl=xtime-syncmap/scenario=1M-uniform-parallel-2",
			map[string]float64{"ns/op": 120.5, "p50-ns": 80, "p99-ns": 410, "p99.9-ns": 2100, "B/op": 0, "allocs/op": 0}, true,
		},
		{"BenchmarkX-2 \t 1 \t 5e+06 ns/op \t 56.2 B/key", "BenchmarkX-2", map[string]float64{"ns/op": 5e6, "B/key": 56.2}, true},
		{"BenchmarkX-2", "", nil, false},                        // name printed before log output
		{"BenchmarkX-2 \t 100", "", nil, false},                 // no metrics
		{"BenchmarkX-2 \t many \t 1 ns/op", "", nil, false},     // bad count
		{"BenchmarkX-2 \t 100 \t fast ns/op", "", nil, false},   // bad value
		{"BenchmarkX-2 \t 100 \t 1 ns/op \t 3", "", nil, false}, // dangling value
		{"BenchmarkX-2 \t -1 \t 1 ns/op", "", nil, false},       // negative count
	}
	for _, tt := range tests {
		name, metrics, ok := parseResult(tt.line)
		if ok != tt.ok || name != tt.name || !sameMetrics(metrics, tt.metrics) {
			t.Errorf("parseResult(%q) = %q, %v, %v; want %q, %v, %v", tt.line, name, metrics, ok, tt.name, tt.metrics, tt.ok)
		}
	}
}

func sameMetrics(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || math.Abs(v-w) > 1e-9 {
			return false
		}
	}
	return true
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{[]float64{5}, 5},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{10, 10, 1000, 10, 9, 11}, 10},
	}
	for _, tt := range tests {
		in := append([]float64(nil), tt.in...)
		if got := median(in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
		for i := range in {
			if in[i] != tt.in[i] {
				t.Errorf("median(%v) reordered its argument", tt.in)
				break
			}
		}
	}
}

// raw is a small synthetic `make bench` output: two passes, interleaved,
// with headers, junk lines and a root-package benchmark to ignore.
const raw = `# command: make bench (2 passes)
# date: 2026-12-01T09:00:00Z
# machine: Test CPU, 2 cores, 8 GiB
# go: go version go1.26.8 linux/amd64
goos: linux
goarch: amd64
pkg: github.com/floodgate-go/floodgate
cpu: Test Processor   
BenchmarkAllow/alg=token_bucket/scenario=hotkey/impl=lockfree-2   	 5487487	        62.29 ns/op	       0 B/op	       0 allocs/op
PASS
ok  	github.com/floodgate-go/floodgate	12.3s
pkg: github.com/floodgate-go/floodgate/bench
cpu: Other Processor
BenchmarkAllow/scenario=hotkey/impl=floodgate-tb-2   	19402113	        60.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkAllow/scenario=hotkey/impl=floodgate-tb-mutex-2   	19402113	        80.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkAllow/scenario=hotkey/impl=throttled-2   	 1000000	       200.0 ns/op	      16 B/op	       1 allocs/op
BenchmarkAllow/scenario=hotkey/impl=golimiter-2   	 1000000	       150.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys/impl=floodgate-tb/scenario=1K-uniform-1-2   	 1000000	        70.00 ns/op
BenchmarkKeys/impl=ulule/scenario=1K-uniform-1-2   	 1000000	       700.0 ns/op
BenchmarkLatency/impl=floodgate-tb/scenario=1M-uniform-parallel-2  1000000  120.5 ns/op  80.00 p50-ns  410.0 p99-ns  2100 p99.9-ns  0 B/op  0 allocs/op
BenchmarkGoroutines/impl=floodgate-tb/scenario=hotkey/g=1-2  1000000  50.00 ns/op
BenchmarkGoroutines/impl=floodgate-tb/scenario=hotkey/g=4-2  1000000  25.00 ns/op
BenchmarkGoroutines/impl=<xtime&co>/scenario=hotkey/g=1-2  1000000  100.0 ns/op
BenchmarkGoroutines/impl=<xtime&co>/scenario=hotkey/g=4-2  1000000  200.0 ns/op
BenchmarkBytesPerKey/impl=floodgate-tb/scenario=1M-2  1  4000000 ns/op  56.00 B/key
BenchmarkBytesPerKey/impl=golimiter/scenario=1M-2  1  4000000 ns/op  150.0 B/key
BenchmarkMapLoad/keys=1000/impl=xsync-v3-2  	100000000	        12.00 ns/op
BenchmarkHalf-2   
some log output: from the benchmark
--- FAIL: BenchmarkBroken-2
    broken_test.go:12: oops
PASS
ok  	github.com/floodgate-go/floodgate/bench	40.1s
BenchmarkAllow/scenario=hotkey/impl=floodgate-tb-2   	19402113	        70.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkAllow/scenario=hotkey/impl=floodgate-tb-mutex-2   	19402113	        90.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkAllow/scenario=hotkey/impl=throttled-2   	 1000000	       100.0 ns/op	      16 B/op	       1 allocs/op
BenchmarkAllow/scenario=hotkey/impl=golimiter-2   	 1000000	       140.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkAllow/scenario=hotkey/impl=floodgate-tb-2   	19402113	        65.00 ns/op	       0 B/op	       0 allocs/op
`

func parseString(t *testing.T, s string) *dataset {
	t.Helper()
	d, err := parse(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestParse(t *testing.T) {
	d := parseString(t, raw)
	for k, want := range map[string]string{
		"date": "2026-12-01T09:00:00Z", "machine": "Test CPU, 2 cores, 8 GiB",
		"go": "go version go1.26.8 linux/amd64", "cpu": "Test Processor",
	} {
		if got := d.meta[k]; got != want {
			t.Errorf("meta[%q] = %q, want %q", k, got, want)
		}
	}
	if _, ok := d.meta["some log output"]; ok {
		t.Error("a log line was read as a header")
	}
	values := []struct {
		k    benchKey
		unit string
		want float64
	}{
		{benchKey{"Allow", "hotkey", "floodgate-tb", 0, ""}, unitNs, 65}, // median of 60, 70, 65
		{benchKey{"Allow", "hotkey", "floodgate-tb-mutex", 0, ""}, unitNs, 85},
		{benchKey{"Allow", "hotkey", "throttled", 0, ""}, unitNs, 150},
		{benchKey{"Keys", "1K-uniform-1", "ulule", 0, ""}, unitNs, 700},
		{benchKey{"Latency", "1M-uniform-parallel", "floodgate-tb", 0, ""}, unitP999, 2100},
		{benchKey{"Latency", "1M-uniform-parallel", "floodgate-tb", 0, ""}, unitP50, 80},
		{benchKey{"Goroutines", "hotkey", "floodgate-tb", 4, ""}, unitNs, 25},
		{benchKey{"BytesPerKey", "1M", "golimiter", 0, ""}, unitBKey, 150},
	}
	for _, v := range values {
		if got, ok := d.value(v.k, v.unit); !ok || got != v.want {
			t.Errorf("value(%+v, %s) = %v, %v; want %v", v.k, v.unit, got, ok, v.want)
		}
	}
	for _, k := range d.order {
		if k.impl == "lockfree" || k.impl == "xsync-v3" || k.family == "Half" || k.family == "Broken" {
			t.Errorf("read a benchmark that should be ignored: %+v", k)
		}
	}
	if got := len(d.order); got != 13 {
		t.Errorf("read %d benchmarks, want 13", got)
	}
	if got := d.sampleCount(); got != 1 {
		t.Errorf("sampleCount() = %d, want 1", got)
	}
	if got := d.goroutines("Goroutines", "hotkey"); len(got) != 2 || got[0] != 1 || got[1] != 4 {
		t.Errorf("goroutines = %v, want [1 4]", got)
	}
}

func TestSampleCount(t *testing.T) {
	d := newDataset()
	d.lines = map[benchKey]int{{impl: "a"}: 6, {impl: "b"}: 6, {impl: "c"}: 5, {impl: "d"}: 2, {impl: "e"}: 2}
	if got := d.sampleCount(); got != 6 {
		t.Errorf("sampleCount() = %d, want 6 (the larger of a tie)", got)
	}
}

func TestSummary(t *testing.T) {
	md := summary(parseString(t, raw), "bench-raw.txt", nil)
	for _, want := range []string{
		"Source: bench-raw.txt · 2026-12-01T09:00:00Z · Test CPU, 2 cores, 8 GiB · cpu: Test Processor · go1.26.8 linux/amd64 · medians of 1 sample.",
		"| hotkey ",
		"0.45× (golimiter)", // 65 ÷ min(145 golimiter, 150 throttled)
		"0.10× (ulule)",     // 70 ÷ 700
		"| 1M-uniform-parallel | floodgate-tb |",
		"0.37× (golimiter)", // 56 ÷ 150 B/key
		"|  g=1 |  g=4 |",
		"| tb ",
		"## 1. At a glance",
		"| hotkey       |         65.0 |                   – |   145 (golimiter) |   0.45× |", // the glance table
	} {
		if !strings.Contains(md, want) {
			t.Errorf("summary lacks %q:\n%s", want, md)
		}
	}
	tables, _, _ := strings.Cut(md, "## Not in this run")
	if strings.Contains(tables, "lockfree") || strings.Contains(tables, "xsync") {
		t.Errorf("summary shows an ignored benchmark:\n%s", md)
	}
}

// TestSummaryLeftOut: a run cut to a few families (make bench's headline
// run) writes the tables it has figures for, numbered from 1, and lists
// every other one at the end, saying whether its families did not run
// or ran without its figures; the table of figures with denials, empty
// in a good run, is not listed.
func TestSummaryLeftOut(t *testing.T) {
	const cut = `BenchmarkAllow/scenario=hotkey/impl=floodgate-tb-2 	100 	60.00 ns/op
BenchmarkAllow/scenario=hotkey/impl=golimiter-2 	100 	150.0 ns/op
BenchmarkMiddleware/scenario=clients-1/impl=bare-2 	100 	50.00 ns/op
BenchmarkMiddleware/scenario=clients-1/impl=floodgate-2 	100 	400.0 ns/op
`
	md := summary(parseString(t, cut), "bench-raw.txt", nil)
	tables, left, ok := strings.Cut(md, "\n## Not in this run\n")
	if !ok {
		t.Fatalf("summary lists no table left out:\n%s", md)
	}
	for _, want := range []string{"## 1. At a glance", "## 3. HTTP middleware overhead"} {
		if !strings.Contains(tables, want) {
			t.Errorf("summary lacks %q:\n%s", want, md)
		}
	}
	for _, want := range []string{
		"- floodgate twins: lock-free vs mutex: BenchmarkAllow ran, but not the scenarios or implementations it compares.\n",
		"- What the middleware's counting costs: BenchmarkMiddleware ran, but not the scenarios or implementations it compares.\n",
		"- Bytes per key: no figures of BenchmarkBytesPerKey in this run.\n",
		"- Envoy Gateway's deployment: pushes and TLS: no figures of BenchmarkXDS or BenchmarkTLS in this run.\n",
		"- The sliding log: lock-free vs its mutex twin and the token bucket: BenchmarkAllow ran, but not the scenarios or implementations it compares.\n",
	} {
		if !strings.Contains(left, want) {
			t.Errorf("the tables left out lack %q:\n%s", want, left)
		}
	}
	for _, not := range []string{"At a glance", "HTTP middleware overhead:", "Figures with denials"} {
		if strings.Contains(left, not) {
			t.Errorf("%q is listed as left out:\n%s", not, left)
		}
	}
}

func TestSVGWellFormed(t *testing.T) {
	d := parseString(t, raw)
	charts := map[string]func() (string, bool){
		"hotkey": func() (string, bool) { return throughputChart(d, "hotkey", "Hot key") },
		"bytes":  func() (string, bool) { return bytesChart(d) },
	}
	wantNames := map[string][]string{
		"hotkey": {"floodgate-tb", "<xtime&co>"},
		"bytes":  {"floodgate-tb", "golimiter"},
	}
	for name, chart := range charts {
		svg, ok := chart()
		if !ok {
			t.Fatalf("%s: no chart", name)
		}
		text := checkXML(t, name, svg)
		for _, impl := range wantNames[name] {
			if !strings.Contains(text, impl) {
				t.Errorf("%s: chart text lacks %q", name, impl)
			}
		}
	}
	if _, ok := throughputChart(d, "1M-uniform", "absent"); ok {
		t.Error("drew a chart without data")
	}
}

// checkXML decodes svg as XML, failing t if it is not well formed, and
// returns its character data.
func checkXML(t *testing.T, name, svg string) string {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(svg))
	var text strings.Builder
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: not well-formed XML: %v\n%s", name, err, svg)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Space + " " + tok.Name.Local
			}
		case xml.CharData:
			text.Write(tok)
		}
	}
	if root != "http://www.w3.org/2000/svg svg" {
		t.Errorf("%s: root element is %q, want svg in the SVG namespace", name, root)
	}
	return text.String()
}

func TestNiceScale(t *testing.T) {
	tests := []struct{ hi, step, top float64 }{
		{31.9, 10, 40},
		{407, 100, 500},
		{1, 0.2, 1},
		{12, 2.5, 12.5},
		{0, 0.2, 1},
	}
	for _, tt := range tests {
		step, top := niceScale(tt.hi, 5)
		if math.Abs(step-tt.step) > 1e-9 || math.Abs(top-tt.top) > 1e-9 {
			t.Errorf("niceScale(%v) = %v, %v; want %v, %v", tt.hi, step, top, tt.step, tt.top)
		}
	}
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "bench-raw.txt")
	if err := os.WriteFile(in, []byte(raw), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	// An earlier run's chart that this run has no data for goes: it
	// would sit beside a summary that does not show it.
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "throughput-1M.svg"), []byte("<svg/>"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := run([]string{"-in", in, "-out", out}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "summary.md"))
	if err != nil || string(md) != stdout.String() {
		t.Errorf("summary.md differs from stdout (err %v)", err)
	}
	for _, f := range []string{"throughput-hotkey.svg", "bytes-per-key.svg"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "throughput-1M.svg")); err == nil {
		t.Error("left throughput-1M.svg, or wrote it, without data")
	}
	if !strings.Contains(stderr.String(), "throughput-1M.svg") {
		t.Errorf("stderr lacks a note on the missing chart: %q", stderr.String())
	}
}

func TestRunNoResults(t *testing.T) {
	in := filepath.Join(t.TempDir(), "empty.txt")
	if err := os.WriteFile(in, []byte("goos: linux\nPASS\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"-in", in, "-out", t.TempDir()}, io.Discard, io.Discard); err == nil {
		t.Error("run succeeded on a file without results")
	}
}

func TestLogTable(t *testing.T) {
	d := parseString(t, `BenchmarkAllow/scenario=hotkey/impl=floodgate-sl-2  1000000  80.00 ns/op
BenchmarkAllow/scenario=hotkey/impl=floodgate-sl-mutex-2  1000000  100.0 ns/op
BenchmarkAllow/scenario=hotkey/impl=floodgate-tb-2  1000000  64.00 ns/op
BenchmarkAllow/scenario=denial/impl=floodgate-sl-2  1000000  50.00 ns/op
BenchmarkGoroutines/impl=floodgate-sl/scenario=hotkey/g=64-2  1000000  90.00 ns/op
BenchmarkGoroutines/impl=floodgate-sl-mutex/scenario=hotkey/g=64-2  1000000  300.0 ns/op
BenchmarkKeys/impl=floodgate-sl/scenario=1K-uniform-1-2  1000000  150.0 ns/op
BenchmarkKeys/impl=floodgate-sl-mutex/scenario=1K-uniform-1-2  1000000  200.0 ns/op
BenchmarkKeys/impl=floodgate-tb/scenario=1K-uniform-1-2  1000000  100.0 ns/op
`)
	tb := logTable(d)
	want := [][]string{
		{"hotkey", "80.0", "100", "64.0", "0.80×", "1.25×"},
		{"hotkey, g=64", "90.0", "300", "–", "0.30×", "–"},
		{"1K-uniform-1", "150", "200", "100", "0.75×", "1.50×"},
	}
	if len(tb.rows) != len(want) {
		t.Fatalf("rows = %q, want %q (denial has no twin)", tb.rows, want)
	}
	for i := range want {
		if strings.Join(tb.rows[i], "|") != strings.Join(want[i], "|") {
			t.Errorf("row %d = %q, want %q", i, tb.rows[i], want[i])
		}
	}
}

// TestPairedTable checks the interleaved table: the ratio is the
// benchmark's own median of per-round ratios, not the ratio of the two
// medians, and a pair without its ratio is left out.
func TestPairedTable(t *testing.T) {
	d := parseString(t, `BenchmarkPaired/scenario=hotkey-1/impl=floodgate-sl-2  1000  80.00 ns/op  0.7000 ratio
BenchmarkPaired/scenario=hotkey-1/impl=floodgate-sl-2  1000  90.00 ns/op  0.7500 ratio
BenchmarkPaired/scenario=hotkey-1/impl=floodgate-sl-2  1000  100.0 ns/op  0.9000 ratio
BenchmarkPaired/scenario=hotkey-1/impl=floodgate-sl-mutex-2  1000  120.0 ns/op
BenchmarkPaired/scenario=hotkey-1-tb/impl=floodgate-sl-2  1000  90.00 ns/op  1.2500 ratio
BenchmarkPaired/scenario=hotkey-1-tb/impl=floodgate-tb-2  1000  72.00 ns/op
BenchmarkPaired/scenario=no-ratio/impl=floodgate-sl-2  1000  90.00 ns/op
BenchmarkPaired/scenario=no-ratio/impl=floodgate-tb-2  1000  72.00 ns/op
`)
	tb := pairedTable(d)
	want := [][]string{
		{"hotkey-1", "90.0", "floodgate-sl-mutex", "120", "0.75×"},
		{"hotkey-1-tb", "90.0", "floodgate-tb", "72.0", "1.25×"},
	}
	if len(tb.rows) != len(want) {
		t.Fatalf("rows = %q, want %q", tb.rows, want)
	}
	for i := range want {
		if strings.Join(tb.rows[i], "|") != strings.Join(want[i], "|") {
			t.Errorf("row %d = %q, want %q", i, tb.rows[i], want[i])
		}
	}
}

// TestDeniedTable: a benchmark that reported denied/op in some passes is
// listed with its figure, how many passes refused calls, and the median
// and largest share refused; one that refused nothing is not listed.
func TestDeniedTable(t *testing.T) {
	d := parseString(t, `BenchmarkAllow/scenario=hotkey/impl=floodgate-sc-coarse-2  1000  20.00 ns/op  0.1000 denied/op
BenchmarkAllow/scenario=hotkey/impl=floodgate-tb-2  1000  30.00 ns/op
BenchmarkAllow/scenario=hotkey/impl=floodgate-sc-coarse-2  1000  22.00 ns/op
BenchmarkAllow/scenario=hotkey/impl=floodgate-tb-2  1000  31.00 ns/op
BenchmarkAllow/scenario=hotkey/impl=floodgate-sc-coarse-2  1000  24.00 ns/op  0.3000 denied/op
BenchmarkAllow/scenario=hotkey/impl=floodgate-tb-2  1000  32.00 ns/op
`)
	tb := deniedTable(d)
	want := [][]string{{"Allow/scenario=hotkey/impl=floodgate-sc-coarse", "22.0", "2 of 3", "0.2", "0.3"}}
	if len(tb.rows) != len(want) {
		t.Fatalf("rows = %q, want %q", tb.rows, want)
	}
	if strings.Join(tb.rows[0], "|") != strings.Join(want[0], "|") {
		t.Errorf("row = %q, want %q", tb.rows[0], want[0])
	}
}

// TestRedisMiddlewareTable: the Redis-backed middlewares have a table of
// their own, with each one's req/s ÷ the faster of ulule-redis and
// throttled-redis and its p99 ÷ floodgate's in process; the overhead
// table leaves their scenarios out.
func TestRedisMiddlewareTable(t *testing.T) {
	d := parseString(t, `BenchmarkMiddleware/scenario=clients-1/impl=bare-2  1000  100.0 ns/op
BenchmarkMiddleware/scenario=clients-1/impl=floodgate-2  1000  300.0 ns/op
BenchmarkMiddleware/scenario=redis-clients-1/impl=bare/g=64-2  1  10.00 ns/op  20.00 p50-ns  40.00 p99-ns  100.0 p99.9-ns  0 rt/req
BenchmarkMiddleware/scenario=redis-clients-1/impl=floodgate/g=64-2  1  500.0 ns/op  300.0 p50-ns  1000 p99-ns  5000 p99.9-ns  0 rt/req
BenchmarkMiddleware/scenario=redis-clients-1/impl=floodgate-redis/g=64-2  1  40000 ns/op  2000000 p50-ns  9000000 p99-ns  20000000 p99.9-ns  1.000 rt/req  1.000 scripts/req  4.000 cmds/req
BenchmarkMiddleware/scenario=redis-clients-1/impl=floodgate-redis-lease/g=64-2  1  1000 ns/op  400.0 p50-ns  1500 p99-ns  90000 p99.9-ns  0.0001234 rt/req  0.0003 scripts/req  0.001 cmds/req
BenchmarkMiddleware/scenario=redis-clients-1/impl=ulule-redis/g=64-2  1  50000 ns/op  2000000 p50-ns  9000000 p99-ns  20000000 p99.9-ns  1.000 rt/req  1.000 scripts/req  3.000 cmds/req
BenchmarkMiddleware/scenario=redis-clients-1/impl=throttled-redis/g=64-2  1  80000 ns/op  2000000 p50-ns  9000000 p99-ns  20000000 p99.9-ns  2.500 rt/req  1.200 scripts/req  6.000 cmds/req
`)
	tb := redisMiddlewareTable(d)
	want := [][]string{
		{"redis-clients-1", "64", "floodgate-redis", "25000", "1", "1", "4", "2000.00", "9000.00", "20000.00", "1.25× (ulule-redis)", "9000.00×"},
		{"redis-clients-1", "64", "floodgate-redis-lease", "1000000", "0.0001234", "0.0003", "0.001", "0.40", "1.50", "90.00", "50.00× (ulule-redis)", "1.50×"},
		{"redis-clients-1", "64", "bare", "100000000", "0", "–", "–", "0.02", "0.04", "0.10", "–", "–"},
		{"redis-clients-1", "64", "floodgate", "2000000", "0", "–", "–", "0.30", "1.00", "5.00", "100.00× (ulule-redis)", "–"},
		{"redis-clients-1", "64", "ulule-redis", "20000", "1", "1", "3", "2000.00", "9000.00", "20000.00", "1.00× (ulule-redis)", "9000.00×"},
		{"redis-clients-1", "64", "throttled-redis", "12500", "2.5", "1.2", "6", "2000.00", "9000.00", "20000.00", "0.62× (ulule-redis)", "9000.00×"},
	}
	if len(tb.rows) != len(want) {
		t.Fatalf("rows = %q, want %q", tb.rows, want)
	}
	for i := range want {
		if strings.Join(tb.rows[i], "|") != strings.Join(want[i], "|") {
			t.Errorf("row %d = %q, want %q", i, tb.rows[i], want[i])
		}
	}
	for _, r := range middlewareTable(d).rows {
		if strings.HasPrefix(r[0], "redis-") {
			t.Errorf("the overhead table shows a Redis scenario: %q", r)
		}
	}
}

// TestIdleTable: BenchmarkIdle's table has a row per scenario with the
// medians over its passes (a pass that could not read the process's CPU
// counts only in the others), each beside issue 41's target and the
// figure before that engine; a scenario without such a figure
// shows none, and the table is numbered and explained like the others.
func TestIdleTable(t *testing.T) {
	d := parseString(t, `BenchmarkIdle/scenario=rules-1000/impl=floodgate-rls-lease-2  1  10000000000 ns/op  0.3000 idle-cpu-%  0 goroutines-added  1248 heap-B/rule  27.90 rss-MB  1000 B/op  10 allocs/op
BenchmarkIdle/scenario=rules-10000/impl=floodgate-rls-lease-2  1  10000000000 ns/op  0.5600 idle-cpu-%  0 goroutines-added  1134 heap-B/rule  55.40 rss-MB
BenchmarkIdle/scenario=rules-1000/impl=floodgate-rls-lease-2  1  10000000000 ns/op  0.5000 idle-cpu-%  2 goroutines-added  1300 heap-B/rule  28.10 rss-MB
BenchmarkIdle/scenario=rules-10000/impl=floodgate-rls-lease-2  1  10000000000 ns/op  1 goroutines-added  1100 heap-B/rule  55.00 rss-MB
BenchmarkIdle/scenario=rules-1000/impl=floodgate-rls-lease-2  1  10000000000 ns/op  0.4000 idle-cpu-%  1 goroutines-added  1200 heap-B/rule  28.00 rss-MB
BenchmarkIdle/scenario=rules-10000/impl=floodgate-rls-lease-2  1  10000000000 ns/op  0.6000 idle-cpu-%  0 goroutines-added  1120 heap-B/rule  56.00 rss-MB
BenchmarkIdle/scenario=rules-5/impl=floodgate-rls-lease-2  1  10000000000 ns/op  0.1000 idle-cpu-%  0 goroutines-added  900.4 heap-B/rule  20.00 rss-MB
`)
	tb := idleTable(d)
	want := [][]string{
		{"rules-1000", "0.40", "≤ 1.00", "35.40, 23.60", "+1", "≤ +16", "+1000", "1248", "≤ 2048", "237581", "28.0", "44.5"},
		{"rules-10000", "0.58", "≤ 1.00", "195.00", "+0", "≤ +16", "+10000", "1120", "≤ 2048", "236988", "55.4", "204.6"},
		{"rules-5", "0.10", "≤ 1.00", "–", "+0", "≤ +16", "–", "900", "≤ 2048", "–", "20.0", "–"},
	}
	if len(tb.rows) != len(want) {
		t.Fatalf("rows = %q, want %q", tb.rows, want)
	}
	for i := range want {
		if strings.Join(tb.rows[i], "|") != strings.Join(want[i], "|") {
			t.Errorf("row %d = %q, want %q", i, tb.rows[i], want[i])
		}
	}
	md := summary(d, "bench-raw.txt", nil)
	for _, want := range []string{
		"## 1. Idle rules: what floodgate-rls holds and spends while nobody asks\n\nfloodgate-rls as a process",
		"at commit 554c3c8",
		"The team's targets (issue 41)",
		"| scenario    | idle CPU (% of a core) | target |       before | goroutines added |",
		"| rules-1000  |                   0.40 | ≤ 1.00 | 35.40, 23.60 |               +1 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("summary lacks %q:\n%s", want, md)
		}
	}
	if tb := idleTable(parseString(t, raw)); len(tb.rows) != 0 {
		t.Errorf("an idle table without BenchmarkIdle: %q", tb.rows)
	}
}

// TestChargeTable: BenchmarkCharge's table has a row per scenario and
// algorithm with the medians of AllowN, Charge, Reserve+Settle and Settle
// alone, their ratios to AllowN (the round's also to two AllowNs) and each op's
// allocs/op; an op without figures shows none, op= reaches the table of
// denials, and the table is numbered and explained like the others.
func TestChargeTable(t *testing.T) {
	d := parseString(t, `BenchmarkCharge/scenario=hotkey/impl=floodgate-tb/op=allown-2  1000  40.00 ns/op  0 B/op  0 allocs/op
BenchmarkCharge/scenario=hotkey/impl=floodgate-tb/op=charge-2  1000  30.00 ns/op  0 B/op  0 allocs/op
BenchmarkCharge/scenario=hotkey/impl=floodgate-tb/op=settle-2  1000  90.00 ns/op  0 B/op  0 allocs/op
BenchmarkCharge/scenario=hotkey/impl=floodgate-sl/op=allown-2  1000  100.0 ns/op  5 B/op  0 allocs/op
BenchmarkCharge/scenario=hotkey/impl=floodgate-sl/op=charge-2  1000  150.0 ns/op  5 B/op  0 allocs/op
BenchmarkCharge/scenario=hotkey/impl=floodgate-tb/op=allown-2  1000  50.00 ns/op  0 B/op  0 allocs/op
BenchmarkCharge/scenario=hotkey/impl=floodgate-tb/op=charge-2  1000  34.00 ns/op  0 B/op  0 allocs/op
BenchmarkCharge/scenario=hotkey/impl=floodgate-tb/op=settle-2  1000  110.0 ns/op  0 B/op  0 allocs/op
BenchmarkCharge/scenario=hotkey/impl=floodgate-tb/op=settlealone-2  1000  36.00 ns/op  0 B/op  0 allocs/op
BenchmarkCharge/scenario=1M-uniform-parallel/impl=floodgate-tb/op=allown-2  1  400.0 ns/op  0 B/op  0.0010 allocs/op
BenchmarkCharge/scenario=1M-uniform-parallel/impl=floodgate-tb/op=charge-2  1  300.0 ns/op  0 B/op  0 allocs/op
BenchmarkCharge/scenario=1M-uniform-parallel/impl=floodgate-tb/op=settle-2  1  1000 ns/op  0 B/op  0 allocs/op  0.0200 denied/op
`)
	tb := chargeTable(d)
	want := [][]string{
		{"hotkey", "floodgate-tb", "45.0", "32.0", "100", "36.0", "0.71×", "2.22×", "1.11×", "0.80×", "0.0, 0.0, 0.0"},
		{"hotkey", "floodgate-sl", "100", "150", "–", "–", "1.50×", "–", "–", "–", "0.0, 0.0, –"},
		{"1M-uniform-parallel", "floodgate-tb", "400", "300", "1000", "–", "0.75×", "2.50×", "1.25×", "–", "0.0, 0.0, 0.0"},
	}
	if len(tb.rows) != len(want) {
		t.Fatalf("rows = %q, want %q", tb.rows, want)
	}
	for i := range want {
		if strings.Join(tb.rows[i], "|") != strings.Join(want[i], "|") {
			t.Errorf("row %d = %q, want %q", i, tb.rows[i], want[i])
		}
	}
	md := summary(d, "bench-raw.txt", nil)
	for _, want := range []string{
		"## 1. Costs known after the work: Charge and Reserve+Settle beside AllowN\n\nfloodgate's lock-free algorithms",
		"two calls held against one AllowN",
		"The team's targets (issue 42): charge ÷ AllowN ≤ 1×, and Settle no dearer than an AllowN (Settle alone ÷ AllowN ≤ 1×, settle ÷ 2×AllowN ≤ 1×)",
		"| scenario            | algorithm    | AllowN (ns/op) | Charge (ns/op) | Reserve+Settle (ns/op) | Settle alone (ns/op) |",
		"| hotkey              | floodgate-tb |           45.0 |           32.0 |                    100 |                 36.0 |           0.71× |",
		"## 2. Figures with denials",
		"| Charge/scenario=1M-uniform-parallel/impl=floodgate-tb/op=settle |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("summary lacks %q:\n%s", want, md)
		}
	}
	if tb := chargeTable(parseString(t, raw)); len(tb.rows) != 0 {
		t.Errorf("a charge table without BenchmarkCharge: %q", tb.rows)
	}
}

// TestGatewayTable: BenchmarkXDS's and BenchmarkTLS's figures make one
// row per service, with the medians over the passes beside issue 43's
// targets; a service with no figure of a benchmark shows none there.
func TestGatewayTable(t *testing.T) {
	d := parseString(t, `BenchmarkXDS/scenario=push-10000/impl=envoy-ratelimit-2  1  190000000 ns/op
BenchmarkXDS/scenario=push-10000/impl=floodgate-rls-2  1  150000000 ns/op
BenchmarkXDS/scenario=load-pushes-1s/impl=envoy-ratelimit-2  1  5000000000 ns/op  30000000 p99-pushes-ns  8000000 p99-quiet-ns  3.750 p99-ratio  8000 requests/op
BenchmarkXDS/scenario=load-pushes-1s/impl=floodgate-rls-2  1  5000000000 ns/op  9000000 p99-pushes-ns  5000000 p99-quiet-ns  1.800 p99-ratio  8000 requests/op
BenchmarkXDS/scenario=push-10000/impl=floodgate-rls-2  1  170000000 ns/op
BenchmarkXDS/scenario=load-pushes-1s/impl=floodgate-rls-2  1  5000000000 ns/op  8000000 p99-pushes-ns  5000000 p99-quiet-ns  1.600 p99-ratio  8000 requests/op
BenchmarkXDS/scenario=push-10000/impl=floodgate-rls-2  1  160000000 ns/op
BenchmarkXDS/scenario=load-pushes-1s/impl=floodgate-rls-2  1  5000000000 ns/op  10000000 p99-pushes-ns  4000000 p99-quiet-ns  2.500 p99-ratio  8000 requests/op
BenchmarkTLS/scenario=clients-1000-desc-1/impl=envoy-ratelimit-2  1  90000 ns/op  0 failed/req  87000 plain-ns/req  90000 tls-ns/req  3.333 tls-rps-loss-%
BenchmarkTLS/scenario=clients-1000-desc-1/impl=floodgate-rls-redis-2  1  50000 ns/op  0 failed/req  45000 plain-ns/req  50000 tls-ns/req  10.00 tls-rps-loss-%
`)
	tb := gatewayTable(d)
	want := [][]string{
		{"floodgate-rls", "160", "≤ 1000", "5000", "9000", "1.80×", "≤ 2×", "–", "–", "–", "–"},
		{"floodgate-rls-redis", "–", "–", "–", "–", "–", "–", "22222", "20000", "10.0%", "≤ 15%"},
		{"envoy-ratelimit", "190", "≤ 1000", "8000", "30000", "3.75×", "≤ 2×", "11494", "11111", "3.3%", "≤ 15%"},
	}
	if len(tb.rows) != len(want) {
		t.Fatalf("rows = %q, want %q", tb.rows, want)
	}
	for i := range want {
		if strings.Join(tb.rows[i], "|") != strings.Join(want[i], "|") {
			t.Errorf("row %d = %q, want %q", i, tb.rows[i], want[i])
		}
	}
	md := summary(d, "bench-raw.txt", nil)
	for _, want := range []string{"## 1. Envoy Gateway's deployment: pushes and TLS", "The team's targets (issue 43)"} {
		if !strings.Contains(md, want) {
			t.Errorf("summary lacks %q:\n%s", want, md)
		}
	}
	if tb := gatewayTable(parseString(t, raw)); len(tb.rows) != 0 {
		t.Errorf("a gateway table without its benchmarks: %q", tb.rows)
	}
}

// TestInFlightTable: BenchmarkInFlight's table has a row per scenario
// with each implementation's median, floodgate's ratios to the semaphore,
// to go-appkit and to the floor, the keyed floor's to the semaphore, and
// floodgate's allocs/op; a figure missing shows none.
func TestInFlightTable(t *testing.T) {
	d := parseString(t, `BenchmarkInFlight/scenario=hotkey/impl=floodgate-2  1000  36.00 ns/op  0 B/op  0 allocs/op
BenchmarkInFlight/scenario=hotkey/impl=floodgate-2  1000  40.00 ns/op  0 B/op  0 allocs/op
BenchmarkInFlight/scenario=hotkey/impl=floodgate-mutex-2  1000  80.00 ns/op  0 B/op  0 allocs/op
BenchmarkInFlight/scenario=hotkey/impl=semaphore-2  1000  25.00 ns/op  0 B/op  0 allocs/op
BenchmarkInFlight/scenario=hotkey/impl=go-appkit-2  1000  100.0 ns/op  0 B/op  0 allocs/op
BenchmarkInFlight/scenario=hotkey/impl=floor-2  1000  12.00 ns/op  0 B/op  0 allocs/op
BenchmarkInFlight/scenario=hotkey/impl=floor-keyed-2  1000  15.00 ns/op  0 B/op  0 allocs/op
BenchmarkInFlight/scenario=1M-uniform-parallel/impl=floodgate-2  1  360.0 ns/op  0 B/op  0 allocs/op
BenchmarkInFlight/scenario=1M-uniform-parallel/impl=semaphore-2  1  80.00 ns/op  0 B/op  0 allocs/op
BenchmarkInFlight/scenario=1M-uniform-parallel/impl=go-appkit-2  1  2400 ns/op  0 B/op  0 allocs/op
`)
	tb := inflightTable(d)
	want := [][]string{
		{"hotkey", "38.0", "80.0", "25.0", "100", "12.0", "15.0", "1.52×", "0.38×", "3.17×", "0.60×", "0.0"},
		{"1M-uniform-parallel", "360", "–", "80.0", "2400", "–", "–", "4.50×", "0.15×", "–", "–", "0.0"},
	}
	if len(tb.rows) != len(want) {
		t.Fatalf("rows = %q, want %q", tb.rows, want)
	}
	for i := range want {
		if strings.Join(tb.rows[i], "|") != strings.Join(want[i], "|") {
			t.Errorf("row %d = %q, want %q", i, tb.rows[i], want[i])
		}
	}
	md := summary(d, "bench-raw.txt", nil)
	if !strings.Contains(md, "In-flight limits: a slot taken and given back") || !strings.Contains(md, "floodgate ÷ go-appkit ≤ 0.5× on 1M keys") {
		t.Errorf("summary lacks the in-flight table:\n%s", md)
	}
	if tb := inflightTable(parseString(t, raw)); len(tb.rows) != 0 {
		t.Errorf("an in-flight table without BenchmarkInFlight: %q", tb.rows)
	}
}

// TestInFlightRedisTable: BenchmarkInFlightRedis's table has a row per
// scenario, rounds a second from ns/op, floodgate's ratio to the stripe
// script, round trips and p99; the renewal scenarios give their traffic.
func TestInFlightRedisTable(t *testing.T) {
	d := parseString(t, `BenchmarkInFlightRedis/scenario=1K-keys/impl=floodgate/g=64-2  1  25000 ns/op  40000 checks/s  1000000 p50-ns  4000000 p99-ns  8000000 p99.9-ns  0.1000 rt/op
BenchmarkInFlightRedis/scenario=1K-keys/impl=stripe/g=64-2  1  50000 ns/op  20000 checks/s  2000000 p50-ns  8000000 p99-ns  9000000 p99.9-ns  2.000 rt/op
BenchmarkInFlightRedis/scenario=renewal-1000-slots-10-clients/impl=floodgate-2  1  2000000000 ns/op  3.000 renewal-cmds/s/1000slots  0.3000 renewal-rt/s
`)
	tb := inflightRedisTable(d)
	want := [][]string{
		{"1K-keys", "40000", "–", "20000", "2.00×", "–", "0.100", "–", "2.000", "4000", "8000", "–", "–"},
		{"renewal-1000-slots-10-clients", "–", "–", "–", "–", "–", "–", "–", "–", "–", "–", "3.00", "0.300"},
	}
	if len(tb.rows) != len(want) {
		t.Fatalf("rows = %q, want %q", tb.rows, want)
	}
	for i := range want {
		if strings.Join(tb.rows[i], "|") != strings.Join(want[i], "|") {
			t.Errorf("row %d = %q, want %q", i, tb.rows[i], want[i])
		}
	}
	if tb := inflightRedisTable(parseString(t, raw)); len(tb.rows) != 0 {
		t.Errorf("a table without BenchmarkInFlightRedis: %q", tb.rows)
	}
}

// TestRLSTable: each service's requests a second and p99 against
// envoyproxy/ratelimit's, and the own-CPU ratio where the services were
// profiled; a run that profiled neither (make bench's headline run)
// leaves those columns empty and says why.
func TestRLSTable(t *testing.T) {
	const plain = `BenchmarkRLS/scenario=clients-1000-desc-1/impl=envoy-ratelimit/g=64-2  1  200000 ns/op  1000000 p99-ns  100000 server-cpu-ns/req
BenchmarkRLS/scenario=clients-1000-desc-1/impl=floodgate-rls-redis/g=64-2  1  100000 ns/op  400000 p99-ns  20000 server-cpu-ns/req
`
	const profiled = `BenchmarkRLS/scenario=clients-1000-desc-1/impl=envoy-ratelimit/g=64-2  1  200000 ns/op  1000000 p99-ns  100000 server-cpu-ns/req  40000 grpc-cpu-ns/req  30000 own-cpu-ns/req
BenchmarkRLS/scenario=clients-1000-desc-1/impl=floodgate-rls-redis/g=64-2  1  100000 ns/op  400000 p99-ns  20000 server-cpu-ns/req  10000 grpc-cpu-ns/req  3000 own-cpu-ns/req
`
	const note = "This run profiled neither service"
	for _, c := range []struct {
		raw  string
		want string
		note bool
	}{
		{plain, "|                20.0 |    – |            – |             2.00× |                 0.40× |                     – |", true},
		{profiled, "|          3.0 |             2.00× |                 0.40× |                 0.10× |", false},
	} {
		tb := rlsTable(parseString(t, c.raw))
		var md strings.Builder
		tb.write(&md, 1)
		if !strings.Contains(md.String(), c.want) {
			t.Errorf("the table lacks %q:\n%s", c.want, md.String())
		}
		if got := strings.Contains(tb.note, note); got != c.note {
			t.Errorf("note says %q: %v, want %v:\n%s", note, got, c.note, tb.note)
		}
	}
}

// TestRLSMemcacheTable: the services on memcached have a table of their
// own, floodgate-rls's requests a second and p99 against
// envoyproxy/ratelimit's on memcached, with memcached's commands and CPU
// per request; the table on Redis leaves them out; the Redis table
// shows memcachelimit beside redislimit.
func TestRLSMemcacheTable(t *testing.T) {
	d := parseString(t, `BenchmarkRLS/scenario=clients-1000-desc-1/impl=envoy-ratelimit/g=64-2  1  200000 ns/op  1000000 p99-ns  100000 server-cpu-ns/req  2 cmds/req
BenchmarkRLS/scenario=clients-1000-desc-1/impl=envoy-ratelimit-memcache/g=64-2  1  180000 ns/op  2000000 p99-ns  130000 server-cpu-ns/req  2.18 mc-cmds/req  60000 memcached-cpu-ns/req
BenchmarkRLS/scenario=clients-1000-desc-1/impl=floodgate-rls-memcache/g=64-2  1  90000 ns/op  1000000 p99-ns  90000 server-cpu-ns/req  2 mc-cmds/req  30000 memcached-cpu-ns/req
BenchmarkRedis/impl=floodgate/scenario=1K-keys/g=64-2  1  10000 ns/op  1 rt/check
BenchmarkRedis/impl=floodgate-memcached/scenario=1K-keys/g=64-2  1  30000 ns/op  2 rt/check
BenchmarkRedis/impl=redis_rate/scenario=1K-keys/g=64-2  1  30000 ns/op  1 rt/check
`)
	var md strings.Builder
	mt := rlsMemcacheTable(d)
	mt.write(&md, 1)
	for _, want := range []string{`(?m)^\| clients-1000-desc-1 \| +64 \| +floodgate-rls-memcache \| 11111 \| +2 \|.*\| +90\.0 \| +30\.0 \| +2\.00× \| +0\.50× \|$`,
		`(?m)^\| clients-1000-desc-1 \| +64 \| envoy-ratelimit-memcache \| +5556 \| +2\.18 \|.*\| +130\.0 \| +60\.0 \| +– \| +– \|$`} {
		if !regexp.MustCompile(want).MatchString(md.String()) {
			t.Errorf("the memcached table has no row like %q:\n%s", want, md.String())
		}
	}
	if len(mt.rows) != 2 {
		t.Errorf("the memcached table has %d rows, want 2:\n%s", len(mt.rows), md.String())
	}
	md.Reset()
	rt := rlsTable(d)
	rt.write(&md, 1)
	if len(rt.rows) != 1 || strings.Contains(md.String(), "| floodgate-rls-memcache") || strings.Contains(md.String(), "| envoy-ratelimit-memcache") {
		t.Errorf("the Redis table of the services shows the memcached ones:\n%s", md.String())
	}
	md.Reset()
	redisTable(d).write(&md, 1)
	if !regexp.MustCompile(`(?m)^\| 1K-keys +\| +64 \| floodgate-memcached +\| +33333 \| 2\.000000 \|.*\| +1\.00× \|`).MatchString(md.String()) {
		t.Errorf("the Redis table lacks memcachelimit's row:\n%s", md.String())
	}
}
