package bench

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// workflow is the part of a GitHub Actions workflow that the test reads.
type workflow struct {
	Name string         `yaml:"name"`
	On   map[string]any `yaml:"on"`
	Jobs map[string]struct {
		RunsOn   string `yaml:"runs-on"`
		If       string `yaml:"if"`
		Strategy struct {
			Matrix map[string][]string `yaml:"matrix"`
		} `yaml:"strategy"`
		Steps []struct {
			Uses string `yaml:"uses"`
			Run  string `yaml:"run"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

// TestWorkflow parses .github/workflows/ci.yml with a YAML parser and
// checks what a contributor relies on: the jobs the README promises, the
// oldest Go that go.mod claims in the test matrix, and every make target
// that it, or .ci/run, calls defined in the Makefile, so that the workflow
// and .ci/run cannot drift from the Makefile or from each other.
func TestWorkflow(t *testing.T) {
	raw, err := os.ReadFile("../.github/workflows/ci.yml")
	if err != nil {
		t.Fatal(err)
	}
	var w workflow
	if err := yaml.Unmarshal(raw, &w); err != nil {
		t.Fatalf("ci.yml is not valid YAML: %v", err)
	}
	for _, ev := range []string{"push", "pull_request", "schedule", "workflow_dispatch"} {
		if _, ok := w.On[ev]; !ok {
			t.Errorf("ci.yml does not run on %s", ev)
		}
	}
	targets := makeTargets(t)
	want := map[string]string{"test": "make check-host", "arm64": "make check-host", "emulated": "make test-cross",
		"bench-smoke": "make bench-smoke", "stress": "make stress", "bench": "make bench"}
	for job, cmd := range want {
		j, ok := w.Jobs[job]
		if !ok {
			t.Errorf("ci.yml has no job %q", job)
			continue
		}
		found := false
		for _, s := range j.Steps {
			for _, target := range madeTargets(s.Run) {
				if !targets[target] {
					t.Errorf("job %s calls make %s, which the Makefile does not define", job, target)
				}
			}
			found = found || strings.TrimSpace(s.Run) == cmd
		}
		if !found {
			t.Errorf("job %s does not run %q", job, cmd)
		}
	}
	if !strings.Contains(w.Jobs["arm64"].RunsOn, "arm") {
		t.Errorf("the arm64 job runs on %q", w.Jobs["arm64"].RunsOn)
	}
	if goLine := goModLine(t); !slices.Contains(w.Jobs["test"].Strategy.Matrix["go"], goLine) {
		t.Errorf("the test matrix %v lacks go.mod's go %s", w.Jobs["test"].Strategy.Matrix["go"], goLine)
	}
	ci, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	calls := madeTargets(string(ci))
	for _, target := range calls {
		if !targets[target] {
			t.Errorf(".ci/run calls make %s, which the Makefile does not define", target)
		}
	}
	if !slices.Contains(calls, "check") {
		t.Errorf(".ci/run calls make %v, not make check, the README's full check", calls)
	}
}

var makeCall = regexp.MustCompile(`(?m)\bmake((?: +[a-z0-9][a-z0-9-]*)+)`)

// madeTargets returns the targets named by make commands in a script,
// leaving out its comments.
func madeTargets(script string) []string {
	var out []string
	script = regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(script, "")
	for _, m := range makeCall.FindAllStringSubmatch(script, -1) {
		out = append(out, strings.Fields(m[1])...)
	}
	return out
}

// makeTargets returns the targets the Makefile defines.
func makeTargets(t *testing.T) map[string]bool {
	raw, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z0-9][a-z0-9-]*):`).FindAllStringSubmatch(string(raw), -1) {
		out[m[1]] = true
	}
	return out
}

// goModLine returns the go line of the library's go.mod.
func goModLine(t *testing.T) string {
	raw, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)`).FindStringSubmatch(string(raw))
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	return m[1]
}

// TestBenchSets checks bench/run.sh's two sets against the harness:
// FULL_BENCHES (make bench-full) runs every benchmark the package
// declares but BenchmarkMapLoad, so that a family added to the harness
// cannot be left out of the full run; HEADLINE_BENCHES (make bench)
// runs the families that -headline cuts to the headline tables, each of
// them in the full set too; and the Makefile passes no BENCHES of its
// own by default, so that each target runs its set.
func TestBenchSets(t *testing.T) {
	sh, err := os.ReadFile("run.sh")
	if err != nil {
		t.Fatal(err)
	}
	set := func(name string) *regexp.Regexp {
		m := regexp.MustCompile(`(?m)^` + name + `='(\S+)'$`).FindSubmatch(sh)
		if m == nil {
			t.Fatalf("run.sh sets no %s", name)
		}
		re, err := regexp.Compile(string(m[1]))
		if err != nil {
			t.Fatalf("run.sh's %s %q: %v", name, m[1], err)
		}
		return re
	}
	full, headline := set("FULL_BENCHES"), set("HEADLINE_BENCHES")
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^func (Benchmark\w+)\(b \*testing\.B\)`).FindAllSubmatch(src, -1) {
			declared = append(declared, string(m[1]))
		}
	}
	if len(declared) < 10 {
		t.Fatalf("found only %v declared", declared)
	}
	cut := []string{"BenchmarkAllow", "BenchmarkKeys", "BenchmarkMiddleware", "BenchmarkRedis", "BenchmarkRLS"}
	// Run by hand only: the evidence behind the registry's xsync v4,
	// under names cmd/report does not read.
	byHand := []string{"BenchmarkMapLoad"}
	for _, name := range declared {
		if slices.Contains(byHand, name) {
			if full.MatchString(name) {
				t.Errorf("FULL_BENCHES %q runs %s, which is run by hand", full, name)
			}
			continue
		}
		if !full.MatchString(name) {
			t.Errorf("FULL_BENCHES %q does not run %s", full, name)
		}
		if got, want := headline.MatchString(name), slices.Contains(cut, name); got != want {
			t.Errorf("HEADLINE_BENCHES %q runs %s: %v, want %v", headline, name, got, want)
		}
	}
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^BENCHES\s*\?=(.*)$`).FindSubmatch(mk); m == nil || strings.TrimSpace(string(m[1])) != "" {
		t.Errorf("the Makefile's BENCHES default is %q, want it empty (run.sh's sets)", m)
	}
}
