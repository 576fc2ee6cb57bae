package shardlog

import (
	"os"
	"runtime"
	"sync"
	"testing"

	"github.com/floodgate-go/floodgate/internal/testmain"
	"golang.org/x/sys/cpu"
)

var cas128Forms = []struct {
	name string
	cas  func(e *entry, old0, old1, new0, new1 uint64) bool
}{
	{"CASPAL", cas128CASP},
	{"LDAXP-STLXP", cas128LLSC},
}

// TestCAS128Forms checks both arm64 forms of the 16-byte CAS: a match
// swaps both halves, a mismatch in either half swaps nothing, and
// goroutines racing to advance a pair whose halves must stay equal never
// lose an update or tear it.
func TestCAS128Forms(t *testing.T) {
	for _, f := range cas128Forms {
		t.Run(f.name, func(t *testing.T) {
			e := newRing(2).slot(0)
			e.ts.Store(1)
			e.meta.Store(2)
			for _, c := range []struct{ old0, old1 uint64 }{{0, 2}, {1, 3}, {2, 1}} {
				if f.cas(e, c.old0, c.old1, 7, 8) || e.ts.Load() != 1 || e.meta.Load() != 2 {
					t.Fatalf("CAS from (%d, %d) on (1, 2) swapped", c.old0, c.old1)
				}
			}
			if !f.cas(e, 1, 2, 7, 8) || e.ts.Load() != 7 || e.meta.Load() != 8 {
				t.Fatalf("CAS from (1, 2) on (1, 2) did not swap: (%d, %d)", e.ts.Load(), e.meta.Load())
			}

			e.ts.Store(0)
			e.meta.Store(0)
			const goroutines, each = 8, 2000
			var wg sync.WaitGroup
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < each; {
						ts, m := read(e)
						if ts != int64(m) {
							t.Errorf("torn pair (%d, %d)", ts, m)
							return
						}
						if f.cas(e, uint64(ts), m, uint64(ts)+1, m+1) {
							i++
						} else {
							runtime.Gosched()
						}
					}
				}()
			}
			wg.Wait()
			if e.ts.Load() != goroutines*each || e.meta.Load() != goroutines*each {
				t.Fatalf("after %d increments the pair is (%d, %d)", goroutines*each, e.ts.Load(), e.meta.Load())
			}
		})
	}
}

// TestCAS128Choice: the log uses CASPAL where the processor has LSE, and
// the exclusive-pair loop where it has not or where the test run asks for
// it (FLOODGATE_ARM64_LLSC=1), so that make test-arm64 runs the package
// on each.
func TestCAS128Choice(t *testing.T) {
	want := cpu.ARM64.HasATOMICS && os.Getenv(testmain.ExclusivePairEnv) != "1"
	if useCASP != want {
		t.Fatalf("useCASP = %v with HasATOMICS %v and %s=%q", useCASP, cpu.ARM64.HasATOMICS,
			testmain.ExclusivePairEnv, os.Getenv(testmain.ExclusivePairEnv))
	}
	t.Logf("HasATOMICS %v: the log runs on %s", cpu.ARM64.HasATOMICS, map[bool]string{true: "CASPAL", false: "LDAXP/STLXP"}[useCASP])
}
