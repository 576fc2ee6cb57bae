package bench

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/internal/memcachetest"
	"github.com/floodgate-go/floodgate/internal/redistest"
)

// TestBenchPipeline runs the whole of `make bench` and of `make
// bench-full` (bench/run.sh: the build, the passes, benchstat and
// cmd/report) in their quick form, one pass of one iteration of every
// benchmark each into a temporary folder, and checks that each exits 0
// with the families of its set in its raw output and no other, no failed
// benchmark, and every file a user reads written: a harness that fails
// its own run is caught before it lands. It takes minutes, so it runs
// only when FLOODGATE_BENCH_PIPELINE=1 (make bench-smoke, which make
// check runs).
func TestBenchPipeline(t *testing.T) {
	if os.Getenv("FLOODGATE_BENCH_PIPELINE") != "1" {
		t.Skip("the whole bench pipeline takes minutes: make bench-smoke runs it (FLOODGATE_BENCH_PIPELINE=1)")
	}
	_, err := redistest.Find()
	withRedis := err == nil || os.Getenv(redistest.Require) == "1"
	// The memcached scenarios run within the Redis benchmarks.
	_, err = memcachetest.Find()
	withMemcached := withRedis && (err == nil || os.Getenv(memcachetest.Require) == "1")
	t.Run("headline", func(t *testing.T) { checkHeadline(t, withRedis, withMemcached) })
	t.Run("full", func(t *testing.T) { checkFull(t, withRedis) })
}

// runPipeline runs bench/run.sh in its quick form with set, into a
// temporary folder, and returns that folder and the raw output; a run
// that fails fails t.
func runPipeline(t *testing.T, set string) (out string, raw []byte) {
	out = t.TempDir()
	cmd := exec.Command("bash", "run.sh")
	// The set's own benchmarks and goroutines, whatever the environment says.
	cmd.Env = append(os.Environ(), "SET="+set, "COUNT=1", "BENCHTIME=1x", "BENCHES=", "GOROUTINES=", "RESULTS="+out, "MAKECMD=make bench-smoke")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		// The failing benchmark's own lines are in the raw output, which
		// the log's tail (the summary) does not show.
		raw, _ := os.ReadFile(filepath.Join(out, "bench-raw.txt"))
		t.Fatalf("the %s pipeline failed: %v\n%s\nthe failures in its raw output:\n%s", set, err, tail(log.String(), 60), failures(string(raw)))
	}
	raw, err := os.ReadFile(filepath.Join(out, "bench-raw.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("--- FAIL")) {
		t.Errorf("a benchmark failed:\n%s", tail(string(raw), 40))
	}
	return out, raw
}

// hasFamily reports whether raw holds a figure of BenchmarkF.
func hasFamily(raw []byte, f string) bool {
	return regexp.MustCompile(`(?m)^Benchmark` + f + `/\S+\s+\d+`).Match(raw)
}

// checkFiles checks that every file of names was written under out.
func checkFiles(t *testing.T, out string, names ...string) {
	t.Helper()
	for _, name := range names {
		if fi, err := os.Stat(filepath.Join(out, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s was not written: %v", name, err)
		}
	}
}

// redisFamilies are the families that need a redis-server, and report
// nothing without one.
var redisFamilies = []string{"Redis", "RLS", "XDS", "TLS", "Idle", "InFlightRedis"}

// checkHeadline runs make bench's pipeline (SET=headline): the families
// of the headline tables and no other, every headline table in its
// summary, and the tables it leaves out listed.
func checkHeadline(t *testing.T, withRedis, withMemcached bool) {
	out, raw := runPipeline(t, "headline")
	if !bytes.Contains(raw, []byte(" -headline)")) {
		t.Errorf("the raw output's command line does not say -headline:\n%s", tail(string(raw), 5))
	}
	in := []string{"Allow", "Keys", "Middleware"}
	if withRedis {
		in = append(in, "Redis", "RLS")
	}
	for _, f := range in {
		if !hasFamily(raw, f) {
			t.Errorf("no figure of Benchmark%s in the raw output", f)
		}
	}
	for _, f := range []string{"Latency", "Goroutines", "Paired", "BytesPerKey", "DependentLoad", "ClockRead", "XDS", "TLS", "Idle", "Charge", "InFlight", "InFlightRedis"} {
		if hasFamily(raw, f) {
			t.Errorf("the headline run ran Benchmark%s", f)
		}
	}
	checkFiles(t, out, "bench-benchstat.txt", "summary.md", "bytes-per-key.svg")
	md, err := os.ReadFile(filepath.Join(out, "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The rows the README quotes: the at-a-glance table's.
	for _, sc := range []string{"hotkey", "hotkey-parallel", "denial-parallel", "churn-parallel", "1K-uniform-parallel", "100K-uniform-parallel", "1M-uniform-parallel"} {
		if !regexp.MustCompile(`(?m)^\| ` + regexp.QuoteMeta(sc) + ` +\| +\d`).Match(md) {
			t.Errorf("summary.md has no row of %s:\n%s", sc, md)
		}
	}
	want := []string{`Bytes per key at 1M keys`, `\| clients-1000 +\| +floodgate +\| +\d`, `(?m)^## Not in this run$`,
		`(?m)^- Idle rules.*: no figures of BenchmarkIdle in this run\.$`}
	if withRedis {
		want = append(want, `(?m)^\| redis-clients-1000 +\| +64 \| +floodgate-redis \| +\d`,
			`(?m)^\| 1K-keys-paired +\| +1 \| +floodgate \| +\d`,
			`(?m)^\| clients-1000-desc-1 +\| +64 \| +floodgate-rls-redis \| +\d`)
	}
	if withMemcached {
		want = append(want, `(?m)^\| 1K-keys +\| +64 \| +floodgate-memcached +\| +\d`,
			`(?m)^\| clients-1000-desc-1 +\| +64 \| +floodgate-rls-memcache +\| +\d`,
			`(?m)^\| hot-desc-1 +\| +64 \| +envoy-ratelimit-memcache +\| +\d`)
	}
	for _, w := range want {
		if !regexp.MustCompile(w).Match(md) {
			t.Errorf("summary.md has nothing like %q:\n%s", w, md)
		}
	}
}

// checkFull runs make bench-full's pipeline (SET=full): every family,
// and the tables that only it makes.
func checkFull(t *testing.T, withRedis bool) {
	out, raw := runPipeline(t, "full")
	families := []string{"Allow", "Keys", "Latency", "Goroutines", "Paired", "BytesPerKey", "DependentLoad", "ClockRead", "Middleware", "Charge", "InFlight"}
	if withRedis {
		families = append(families, redisFamilies...)
	}
	for _, f := range families {
		if !hasFamily(raw, f) {
			t.Errorf("no figure of Benchmark%s in the raw output", f)
		}
	}
	// BenchmarkMiddleware's Redis-backed scenarios run within it, only
	// where redis-server does.
	for _, m := range redisMiddlewares {
		for _, clients := range []string{"1", "1000"} {
			name := "BenchmarkMiddleware/scenario=redis-clients-" + clients + "/impl=" + m.name + "/g="
			if withRedis && !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(name)+`\d+\S*\s+\d+`).Match(raw) {
				t.Errorf("no figure of %s… in the raw output", name)
			}
		}
	}
	checkFiles(t, out, "bench-benchstat.txt", "summary.md", "throughput-hotkey.svg", "throughput-1M.svg", "bytes-per-key.svg")
	// BenchmarkIdle's, BenchmarkCharge's and BenchmarkInFlight's figures
	// reach the summary only through their own tables.
	md, err := os.ReadFile(filepath.Join(out, "summary.md"))
	if withRedis && err == nil && !bytes.Contains(md, []byte("| rules-10000 |")) {
		t.Errorf("summary.md has no row of BenchmarkIdle's table:\n%s", tail(string(md), 40))
	}
	if err == nil && !regexp.MustCompile(`(?m)^\| 1M-uniform-parallel +\| floodgate-sl +\|`).Match(md) {
		t.Errorf("summary.md has no row of BenchmarkCharge's table:\n%s", tail(string(md), 40))
	}
	if err == nil && !regexp.MustCompile(`(?m)^\| hotkey-parallel +\| +\d`).Match(md) {
		t.Errorf("summary.md has no row of BenchmarkInFlight's table:\n%s", tail(string(md), 40))
	}
}

// failures is every "--- FAIL" block of raw benchmark output: the line
// and the indented lines that follow it.
func failures(raw string) string {
	var out []string
	in := false
	for _, line := range strings.Split(raw, "\n") {
		switch {
		case strings.Contains(line, "--- FAIL"):
			in = true
		case in && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t"):
			in = false
		}
		if in {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
