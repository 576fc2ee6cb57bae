package bench

import (
	"os"
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

// TestBenchesAgree checks that bench/run.sh's default BENCHES is the
// Makefile's, which it repeats for a run without make (and for make
// bench-smoke, which passes none): a family added to one and not the
// other would run in one pipeline and not in the other.
func TestBenchesAgree(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	sh, err := os.ReadFile("run.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^BENCHES\s*\?=\s*(\S+)$`).FindSubmatch(mk)
	s := regexp.MustCompile(`(?m)^: "\$\{BENCHES:=(\S+)\}"$`).FindSubmatch(sh)
	if m == nil || s == nil {
		t.Fatalf("no BENCHES default found: Makefile %q, run.sh %q", m, s)
	}
	inMake := strings.ReplaceAll(string(m[1]), "$$", "$")  // make's escape
	inShell := strings.ReplaceAll(string(s[1]), `\$`, "$") // the shell's
	if inMake != inShell {
		t.Errorf("BENCHES differ: the Makefile's %q, run.sh's %q", inMake, inShell)
	}
	re, err := regexp.Compile(inMake)
	if err != nil {
		t.Fatalf("BENCHES %q: %v", inMake, err)
	}
	for _, f := range []string{"BenchmarkIdle", "BenchmarkCharge", "BenchmarkInFlight"} {
		if !re.MatchString(f) {
			t.Errorf("BENCHES %q does not run %s", inMake, f)
		}
	}
}
