package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The token budget of TestTokenBudgetRedisStalls: Envoy AI Gateway's
// shape, a check (a descriptor's hits_addend 0) before each stream and
// its tokens (hits_addend 600) when it ends, against a budget of 10,000
// tokens that two replicas share on one Redis.
const (
	budgetTokens = 10_000
	streamTokens = 600
	stallFor     = time.Second
)

// budgetBinEnv names a floodgate-rls binary to measure instead of this
// tree's (one built from an older commit, for its figures), and
// budgetTableEnv=1 runs every case of the table, not the asserted ones.
const (
	budgetBinEnv   = "FLOODGATE_BUDGET_BIN"
	budgetTableEnv = "FLOODGATE_BUDGET_TABLE"
)

// budgetCase is one run: FLOODGATE_FAILURE_MODE ("" unset), whether
// Envoy's failure_mode_deny is true (a failed check refuses the stream;
// false lets it through), FLOODGATE_LEASE_MAX, and the callers a replica
// has.
type budgetCase struct {
	mode    string
	deny    bool
	lease   int
	workers int
}

func (c budgetCase) String() string {
	mode := c.mode
	if mode == "" {
		mode = "unset"
	}
	deny := "false"
	if c.deny {
		deny = "true"
	}
	return fmt.Sprintf("mode=%s,failure_mode_deny=%s,lease=%d,workers=%d", mode, deny, c.lease, c.workers)
}

// budgetFigures are a run's admitted tokens: before Redis stopped (the
// budget, and the race at its end), while it was stopped, and in the
// second after its return.
type budgetFigures struct{ before, during, after int64 }

func (f budgetFigures) total() int64 { return f.before + f.during + f.after }

// TestTokenBudgetRedisStalls is issue 55's attack: two floodgate-rls
// processes on one redis-server, a budget of 10,000 tokens, and callers
// that each run streams of 600 tokens, a check then the cost, as fast as
// they are answered (with a deadline of 5 s: Envoy's filter timeout, if
// below FLOODGATE_REDIS_TIMEOUT, would end a stalled call itself, and
// failure_mode_deny decide whatever the mode). A stream runs when its
// check is OK, or fails while failure_mode_deny is false.
//
// The attack spends the budget; the callers stop once a check is
// refused, and each replica runs streams one at a time until one is
// refused, so that no cost is in flight and no leased token is held.
// (The tokens past the budget then are the check-then-cost race at its
// end, as with envoyproxy/ratelimit: a check that sees a token left,
// before the costs of the streams checked beside it are counted.) Then
// the attack resumes, Redis stops (SIGSTOP) for a second, and comes back
// for a second. With the mode unset (FailError) and failure_mode_deny
// true, and with closed, no token passes while Redis is away or after,
// leases or not, which the test asserts. By default it runs those four
// cases with eight callers a replica; with FLOODGATE_BUDGET_TABLE=1,
// every mode (and failure_mode_deny false), with and without
// FLOODGATE_LEASE_MAX=1000, with one and eight callers a replica, and
// logs the table of docs/envoy-gateway.md. FLOODGATE_BUDGET_BIN runs a
// binary built elsewhere (an older commit's) instead of this tree's.
func TestTokenBudgetRedisStalls(t *testing.T) {
	bin := os.Getenv(budgetBinEnv)
	if bin == "" {
		bin = binary(t)
	} else if testing.Short() {
		t.Skip("-short: the processes run in the full tests")
	}
	cases := []budgetCase{{"", true, 0, 8}, {"", true, 1000, 8}, {"closed", true, 0, 8}, {"closed", true, 1000, 8}}
	if os.Getenv(budgetTableEnv) == "1" {
		cases = nil
		for _, workers := range []int{1, 8} {
			for _, lease := range []int{0, 1000} {
				for _, m := range []struct {
					mode string
					deny bool
				}{{"", true}, {"", false}, {"open", true}, {"closed", true}, {"local", true}} {
					cases = append(cases, budgetCase{m.mode, m.deny, lease, workers})
				}
			}
		}
	}
	var table []string
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) {
			f := budgetRun(t, bin, c)
			row := fmt.Sprintf("| %s | %v | %d | %d | %s | %s (%.2f×) | %s | %s |", modeName(c.mode), c.deny, c.lease, c.workers,
				tokens(f.before), tokens(f.total()), float64(f.total())/budgetTokens, tokens(f.during), tokens(f.after))
			table = append(table, row)
			t.Log(row)
			if (c.mode == "" || c.mode == "closed") && c.deny && f.during+f.after != 0 {
				t.Errorf("%s tokens admitted while Redis was stopped and after, once the budget was spent", tokens(f.during+f.after))
			}
		})
	}
	t.Logf("admitted tokens, budget %d, streams of %d, Redis stopped for %v:\n"+
		"| FLOODGATE_FAILURE_MODE | failure_mode_deny | FLOODGATE_LEASE_MAX | callers a replica | before the stall | in all | while stopped | in the second after |\n"+
		"|---|---|---|---|---|---|---|---|\n%s", budgetTokens, streamTokens, stallFor, strings.Join(table, "\n"))
}

func modeName(m string) string {
	if m == "" {
		return "unset (error)"
	}
	return m
}

// tokens writes n with thousands separated by commas.
func tokens(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// budgetRun runs case c on a redis-server of its own, and returns the
// tokens admitted.
func budgetRun(t *testing.T, bin string, c budgetCase) budgetFigures {
	srv := redistest.Start(t)
	root := runtimeDir(t, map[string]string{"ai.yaml": fmt.Sprintf(
		"domain: ai\ndescriptors:\n  - key: tokens\n    rate_limit: {unit: year, requests_per_unit: %d, algorithm: token_bucket}\n", budgetTokens)})
	env := []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + srv.Addr, fmt.Sprint("FLOODGATE_LEASE_MAX=", c.lease)}
	if c.mode != "" {
		env = append(env, "FLOODGATE_FAILURE_MODE="+c.mode)
	}
	replicas := []*replica{startReplica(t, bin, root, env...), startReplica(t, bin, root, env...)}
	hit := func(n uint64) *pb.RateLimitRequest {
		return &pb.RateLimitRequest{Domain: "ai", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tokens", Value: "client-a"}}, HitsAddend: wrapperspb.UInt64(n)}}}
	}
	check, cost := hit(0), hit(streamTokens)

	var admitted, refused atomic.Int64
	// stream runs one stream on r: its check, and if the check lets it
	// through, its cost. It reports whether the stream ran.
	stream := func(r *replica) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := r.client.ShouldRateLimit(ctx, check)
		if err == nil && resp.OverallCode == pb.RateLimitResponse_OK || err != nil && !c.deny {
			admitted.Add(streamTokens)
			_, _ = r.client.ShouldRateLimit(ctx, cost) // the stream's tokens, whatever the answer
			return true
		}
		refused.Add(1)
		return false
	}
	// attack runs the callers until stop is closed, and returns what
	// waits for them.
	attack := func(stop chan struct{}) func() {
		var wg sync.WaitGroup
		for _, r := range replicas {
			for range c.workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						if !stream(r) {
							time.Sleep(time.Millisecond) // the client is told 429 (or 500), and comes back
						}
					}
				}()
			}
		}
		return func() { close(stop); wg.Wait() }
	}

	// The budget is spent under the attack. Then the callers stop, each
	// once its stream's cost is answered, and each replica runs streams
	// one at a time until one is refused: no cost is in flight, and no
	// replica holds a leased token, when Redis stops.
	end := attack(make(chan struct{}))
	waitFor(t, "the budget spent (a check refused)", func() bool { return refused.Load() > 0 })
	end()
	for _, r := range replicas {
		for stream(r) {
		}
	}
	var f budgetFigures
	f.before = admitted.Load()
	end = attack(make(chan struct{}))
	srv.Pause()
	time.Sleep(stallFor)
	srv.Resume()
	f.during = admitted.Load() - f.before
	time.Sleep(time.Second)
	end()
	f.after = admitted.Load() - f.before - f.during
	return f
}
