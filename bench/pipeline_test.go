package bench

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/internal/redistest"
)

// TestBenchPipeline runs the whole of `make bench` (bench/run.sh: the
// build, the passes, benchstat and cmd/report) in its quick form, one pass
// of one iteration of every benchmark into a temporary folder, and checks
// that it exits 0 with every benchmark family in its raw output, no
// failed benchmark, and every file a user reads written: a harness that
// fails its own run is caught before it lands. It takes minutes, so it
// runs only when FLOODGATE_BENCH_PIPELINE=1 (make bench-smoke, which make
// check runs).
func TestBenchPipeline(t *testing.T) {
	if os.Getenv("FLOODGATE_BENCH_PIPELINE") != "1" {
		t.Skip("the whole bench pipeline takes minutes: make bench-smoke runs it (FLOODGATE_BENCH_PIPELINE=1)")
	}
	out := t.TempDir()
	cmd := exec.Command("bash", "run.sh")
	// make bench's own benchmarks and goroutines, whatever the environment says.
	cmd.Env = append(os.Environ(), "COUNT=1", "BENCHTIME=1x", "BENCHES=", "GOROUTINES=", "RESULTS="+out, "MAKECMD=make bench-smoke")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		// The failing benchmark's own lines are in the raw output, which
		// the log's tail (the summary) does not show.
		raw, _ := os.ReadFile(filepath.Join(out, "bench-raw.txt"))
		t.Fatalf("make bench's pipeline failed: %v\n%s\nthe failures in its raw output:\n%s", err, tail(log.String(), 60), failures(string(raw)))
	}
	raw, err := os.ReadFile(filepath.Join(out, "bench-raw.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("--- FAIL")) {
		t.Errorf("a benchmark failed:\n%s", tail(string(raw), 40))
	}
	families := []string{"Allow", "Keys", "Latency", "Goroutines", "Paired", "BytesPerKey", "DependentLoad", "ClockRead", "Middleware", "Charge", "InFlight"}
	withRedis := false
	if _, err := redistest.Find(); err == nil || os.Getenv("FLOODGATE_REQUIRE_REDIS") == "1" {
		families = append(families, "Redis", "RLS", "XDS", "TLS", "Idle", "InFlightRedis")
		withRedis = true
	}
	for _, f := range families {
		if !regexp.MustCompile(`(?m)^Benchmark` + f + `/\S+\s+\d+`).Match(raw) {
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
	for _, name := range []string{"bench-benchstat.txt", "summary.md", "throughput-hotkey.svg", "throughput-1M.svg", "bytes-per-key.svg"} {
		if fi, err := os.Stat(filepath.Join(out, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s was not written: %v", name, err)
		}
	}
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
