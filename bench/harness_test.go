package bench

import (
	"flag"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// outrun stands for a limiter on a machine faster than any Plenty was made
// for: after its first grants it refuses every other call, as a rule
// spent faster than it refills would.
type outrun struct{ calls atomic.Int64 }

func (o *outrun) Allow(string) bool {
	n := o.calls.Add(1)
	return n <= 100 || n%2 == 0
}

// TestHarnessGoesOnAfterDenials drives every scenario of the harness that
// runs under Plenty with a limiter that outruns it, and checks that each
// completes and reports its denials beside its figure: make bench must
// finish on any machine (a figure with denials was once a fatal error,
// and stopped the whole run on a faster host).
func TestHarnessGoesOnAfterDenials(t *testing.T) {
	// A count, not a time: on a loaded machine under -race a first run of
	// one op could take the whole time, and one op is within the first
	// grants, which reports no denial.
	old := flag.Lookup("test.benchtime").Value.String()
	if err := flag.Set("test.benchtime", "20000x"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { flag.Set("test.benchtime", old) })
	ks := keySet(64)
	seq := picks(len(ks), "uniform")
	scenarios := []struct {
		name string
		run  func(b *testing.B, l Limiter)
	}{
		{"hotkey", benchHot},
		{"hotkey-parallel", benchHotParallel},
		{"churn", benchChurn},
		{"keys-1", func(b *testing.B, l Limiter) { benchPicks(b, l, ks, seq, false) }},
		{"keys-parallel", func(b *testing.B, l Limiter) { benchPicks(b, l, ks, seq, true) }},
		{"latency", func(b *testing.B, l Limiter) { benchLatency(b, l, ks, seq) }},
		{"goroutines", func(b *testing.B, l Limiter) { benchGoroutines(b, 4, l, ks, seq) }},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			r := testing.Benchmark(func(b *testing.B) { sc.run(b, &outrun{}) })
			if r.N == 0 {
				t.Fatal("the benchmark failed: a run with denials must go on and report them")
			}
			if d := r.Extra["denied/op"]; d < 0.25 || d > 0.75 {
				t.Fatalf("denied/op = %v, want about half: %+v", d, r)
			}
		})
	}
	for _, pause := range []int{0, pairedPause} {
		t.Run("paired/pause="+strconv.Itoa(pause), func(t *testing.T) {
			ls := []Limiter{&outrun{}, &outrun{}}
			r := Interleave(ls, ks, seq, runtime.GOMAXPROCS(0), pause, 2, 5*time.Millisecond)
			for i, d := range r.Denied {
				if d < 0.25 || d > 0.75 {
					t.Fatalf("limiter %d: Denied = %v, want about half", i, d)
				}
			}
		})
	}
	t.Run("spin", func(t *testing.T) {
		// The pause draws its length from its state and moves the state on.
		seen := map[uint64]bool{}
		for x, i := uint64(1), 0; i < 100; i++ {
			x = spin(x, pairedPause)
			seen[x] = true
		}
		if len(seen) < 90 {
			t.Fatalf("spin repeats its state: %d distinct of 100", len(seen))
		}
	})
}

// TestPlentyOutrunsAnyMachine checks the promise Plenty makes for every
// floodgate algorithm: at one request every 2 ns on one key, faster than
// any machine calls Allow, nothing is refused. The clock is a manual one
// that moves 2 ns per unit asked, in requests of 1,000 units (a thousand
// requests at once, which the rule must hold as it would hold them one by
// one), for 30 ms of clock: three and a half of the sliding counter's
// windows and thirty of the log's. The buckets and the fixed window must
// also hold a trillion units at once, what one key could take in 2,000 s.
func TestPlentyOutrunsAnyMachine(t *testing.T) {
	for _, a := range floodgateAlgorithms {
		for _, alg := range []string{a.lockFree, a.mutex} {
			t.Run(alg, func(t *testing.T) {
				r := plentyFor(alg)
				clock := floodgate.NewManualClock(1 << 40)
				l, err := floodgate.New(testhook.Twins(floodgate.Config{Algorithm: alg, Rule: floodgate.Rule{Limit: r.Limit, Period: r.Period}, Clock: clock}).(floodgate.Config))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				const units = 1000
				for elapsed := time.Duration(0); elapsed < 30*time.Millisecond; elapsed += 2 * units {
					clock.Advance(2 * units)
					if d := l.AllowN("hot", units); !d.Allowed {
						t.Fatalf("%v into the run at one request every 2 ns: refused, %+v", elapsed, d)
					}
				}
				if r == Plenty {
					if d := l.AllowN("cold", 1_000_000_000_000); !d.Allowed {
						t.Fatalf("a trillion at once: refused, %+v", d)
					}
				}
			})
		}
	}
}

// TestParseEvalsha: an interval in which Redis ran no script (lease mode
// serving every check from batches taken before it) has no
// cmdstat_evalsha line at all, and reads as 0 calls rather than as a
// broken run; a line that is there is read, and one that cannot be is an
// error.
func TestParseEvalsha(t *testing.T) {
	const other = "# Commandstats\r\ncmdstat_config:calls=1,usec=10,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n"
	cases := []struct {
		info      string
		calls, us float64
		wantErr   bool
	}{
		{other, 0, 0, false},
		{"", 0, 0, false},
		{other + "cmdstat_evalsha:calls=1200,usec=3600,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n", 1200, 3, false},
		{other + "cmdstat_evalsha:calls=x,usec=3600,usec_per_call=3.00\r\n", 0, 0, true},
		{other + "cmdstat_evalsha:usec=3600\r\n", 0, 0, true},
	}
	for _, c := range cases {
		calls, us, err := parseEvalsha(c.info)
		if (err != nil) != c.wantErr || calls != c.calls || us != c.us {
			t.Errorf("parseEvalsha(%q) = %v, %v, %v; want %v, %v, error %v", c.info, calls, us, err, c.calls, c.us, c.wantErr)
		}
	}
}

// TestCommandCalls: every command's calls count, those a script made
// included, but the benchmark's own CONFIG and INFO, whose Redis 7 lines
// name a subcommand too; the scripts are EVALSHA's and EVAL's; a line
// that cannot be read is an error.
func TestCommandCalls(t *testing.T) {
	const info = "# Commandstats\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=334,usec_per_call=334.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=3,usec=731,usec_per_call=243.67,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=100,usec=900,usec_per_call=9.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_eval:calls=2,usec=90,usec_per_call=45.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_time:calls=102,usec=100,usec_per_call=0.98,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_get:calls=50,usec=50,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n"
	cmds, scripts, err := commandCalls(info)
	if err != nil || cmds != 254 || scripts != 102 {
		t.Errorf("commandCalls = %v, %v, %v; want 254, 102, nil", cmds, scripts, err)
	}
	if cmds, scripts, err := commandCalls(""); err != nil || cmds != 0 || scripts != 0 {
		t.Errorf("commandCalls of nothing = %v, %v, %v; want 0, 0, nil", cmds, scripts, err)
	}
	for _, bad := range []string{"cmdstat_get:usec=50\r\n", "cmdstat_get:calls=x,usec=50\r\n"} {
		if _, _, err := commandCalls(bad); err == nil {
			t.Errorf("commandCalls(%q) read it", bad)
		}
	}
}

// TestStamps: the samples' clock counts time on every platform (on
// arm64, where hrtime reads no counter, converting a count used to divide
// by zero), and an interval converts to a positive duration.
func TestStamps(t *testing.T) {
	calibrateStamps()
	start := stampNow()
	deadline := time.Now().Add(time.Second)
	for start.since() <= 0 && time.Now().Before(deadline) {
	}
	d := start.since().duration()
	if d <= 0 || d > time.Minute {
		t.Fatalf("an interval of the samples' clock converted to %v (TSC: %v)", d, tscStamps)
	}
	t.Logf("TSC stamps: %v", tscStamps)
}
