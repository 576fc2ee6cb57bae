package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate/internal/memcachetest"
	"github.com/floodgate-go/floodgate/rls/internal/peertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// startRefMemcache runs envoyproxy/ratelimit (bin) with
// BACKEND_TYPE=memcache on the memcached at addr, its keys under
// prefix, on root's runtime directory, with env added, and returns its
// client once it answers.
func startRefMemcache(t *testing.T, bin, root, addr, prefix string, env ...string) pb.RateLimitServiceClient {
	t.Helper()
	grpcAddr := freeAddr(t)
	env = append([]string{"USE_STATSD=false", "BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT=" + addr, "CACHE_KEY_PREFIX=" + prefix,
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=current", "RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT=" + strings.Split(freeAddr(t), ":")[1], "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strings.Split(grpcAddr, ":")[1],
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strings.Split(freeAddr(t), ":")[1], "LOG_LEVEL=warn", "EXPIRATION_JITTER_MAX_SECONDS=0"}, env...)
	proc := peertest.Start(t, bin, env...)
	return proc.Dial(t, grpcAddr, peertest.Request("probe", 1, "none"), grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// memcacheSBSConfig is the configuration both services load in the
// sequential side-by-side run: envoyproxy/ratelimit's default fixed
// windows, of every unit the run can stay within.
const memcacheSBSConfig = `domain: api
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: s
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: tier
    value: gold
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 2}
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: b
    rate_limit: {unit: day, requests_per_unit: 4}
`

// refSettled waits until envoyproxy/ratelimit's memcached at addr has
// taken every increment the reference sent in the background: it reads
// the counts with one GetMulti, answers, and only then increments each
// key (an incr that hits, or one that misses and an add), so the next
// request would otherwise read a count still in flight. keys is how
// many keys it has incremented in all, one for each status that names
// a limit.
func refSettled(t *testing.T, addr string, keys int64) {
	t.Helper()
	waitFor(t, "envoyproxy/ratelimit's increments", func() bool {
		st := memcacheStats(t, addr)
		return st["incr_hits"]+st["cmd_set"] >= keys
	})
}

// TestSideBySideMemcache runs floodgate-rls and envoyproxy/ratelimit
// (built from its module at the pinned version) with
// BACKEND_TYPE=memcache, each on a memcached of its own, on the same
// configuration of default fixed windows, and sends both the same
// requests one at a time: codes, counts and resets must be the same.
// Both charge every hit, over the limit too (the reference's memcached
// backend increments every key whatever
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT says; floodgate-rls does so
// with it unset). Each request to the reference waits for its
// background increments to land in memcached before the next, so that
// the comparison is of what each decides, not of that race (see
// TestSideBySideMemcacheReplicas for the race).
func TestSideBySideMemcache(t *testing.T) {
	bin := binary(t)
	refBin := peertest.Build(t, peerModule)
	root := runtimeDir(t, map[string]string{"api.yaml": memcacheSBSConfig})
	ourMC, theirMC := memcachetest.Start(t), memcachetest.Start(t)
	ours := startReplica(t, bin, root, "BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT="+ourMC.Addr())
	theirs := startRefMemcache(t, refBin, root, theirMC.Addr(), "")

	seqs := [][]*pb.RateLimitRequest{
		peertest.Times(7, peertest.Request("api", 0, "k=x")),
		peertest.Times(3, peertest.Request("api", 2, "k=y")),
		peertest.Times(5, peertest.Request("api", 0, "s=1")),
		peertest.Times(3, peertest.Request("api", 0, "tier=gold,user=u1")),
		{peertest.Request("api", 0, "tier=silver,user=u1"), peertest.Request("api", 0, "nothing=here"), peertest.Request("nope", 0, "k=x")},
		peertest.Times(6, peertest.Request("api", 0, "a=1", "b=1")),
		peertest.Times(2, peertest.Request("api", 0, "a=2")),
		{peertest.Request("api", 3, "k=z", "a=3", "b=2")},
		peertest.Times(2, peertest.Request("api", 0, "k=x", "s=1")),
	}
	// A run must fall within one second of the Unix clock, for the
	// resets, and the per-second rule's counts, to read alike; one that
	// crossed a second runs again, from empty counts.
	for attempt := 1; ; attempt++ {
		ourMC.Flush()
		theirMC.Flush()
		base := memcacheStats(t, theirMC.Addr())
		keys := base["incr_hits"] + base["cmd_set"]
		sec := time.Now().Unix()
		var diffs []string
		n := 0
		for s, seq := range seqs {
			for i, req := range seq {
				n++
				r1, err1 := theirs.ShouldRateLimit(context.Background(), req)
				r2, err2 := ours.client.ShouldRateLimit(context.Background(), req)
				if err1 != nil || err2 != nil {
					diffs = append(diffs, fmt.Sprintf("sequence %d, request %d: envoyproxy/ratelimit %v, floodgate-rls %v", s, i, err1, err2))
					continue
				}
				if x, y := peertest.Answer(r1), peertest.Answer(r2); x != y {
					diffs = append(diffs, fmt.Sprintf("sequence %d, request %d:\n  envoyproxy/ratelimit %s\n  floodgate-rls        %s", s, i, x, y))
				}
				for _, st := range r1.Statuses {
					if st.CurrentLimit != nil {
						keys++
					}
				}
				refSettled(t, theirMC.Addr(), keys)
			}
		}
		if time.Now().Unix() != sec {
			if attempt < 10 {
				continue
			}
			t.Fatal("every attempt crossed a second")
		}
		if len(diffs) > 0 {
			t.Fatalf("the services differ on memcached:\n%s", strings.Join(diffs, "\n"))
		}
		t.Logf("the same answers to %d requests on memcached, on attempt %d", n, attempt)
		return
	}
}

// hourly is a configuration of one rule, key hot, of n an hour.
func hourly(n int) string {
	return fmt.Sprintf("domain: d\ndescriptors:\n  - key: hot\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", n)
}

// raceHot sends 64 callers' requests for descriptor hot=value, per
// caller each, round robin over clients, and returns how many were
// admitted and how many failed.
func raceHot(cs []pb.RateLimitServiceClient, value string, per int) (admitted, failed int64) {
	var ok, bad atomic.Int64
	var wg sync.WaitGroup
	req := peertest.Request("d", 0, "hot="+value)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				resp, err := cs[(g+i)%len(cs)].ShouldRateLimit(context.Background(), req)
				switch {
				case err != nil:
					bad.Add(1)
				case resp.OverallCode == pb.RateLimitResponse_OK:
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return ok.Load(), bad.Load()
}

// TestSideBySideMemcacheReplicas: two floodgate-rls and two
// envoyproxy/ratelimit on one memcached (each service its own key
// prefix), both with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true, are
// raced by 64 callers, 2,560 requests each, on a limit of 500 an hour:
// floodgate-rls passes exactly 500 (compare-and-swap loses no update).
// The reference's count is reported: it reads the counts with one
// GetMulti and increments them afterwards, in the background, so
// callers racing it read the same count, and it may pass more; how
// many is the race's, and not asserted. A run whose hour ends mid-way
// runs again on a new descriptor.
func TestSideBySideMemcacheReplicas(t *testing.T) {
	bin := binary(t)
	refBin := peertest.Build(t, peerModule)
	root := runtimeDir(t, map[string]string{"d.yaml": hourly(500)})
	mc := memcachetest.Start(t)
	env := []string{"BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT=" + mc.Addr(), "CACHE_KEY_PREFIX=fg", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true",
		"FLOODGATE_FAILURE_MODE=error", "FLOODGATE_MEMCACHE_TIMEOUT=5s"}
	var ours, theirs []pb.RateLimitServiceClient
	for range 2 {
		ours = append(ours, startReplica(t, bin, root, env...).client)
		theirs = append(theirs, startRefMemcache(t, refBin, root, mc.Addr(), "ref_", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true"))
	}
	const per = 40 // 64 callers × 40 = 2,560 requests
	for attempt := 1; ; attempt++ {
		hour := time.Now().Unix() / 3600
		value := fmt.Sprint("client-", attempt)
		fg, fgFailed := raceHot(ours, value, per)
		ref, refFailed := raceHot(theirs, value, per)
		if time.Now().Unix()/3600 != hour {
			if attempt < 3 {
				continue
			}
			t.Fatal("every attempt crossed an hour")
		}
		t.Logf("of 2,560 requests on a limit of 500 an hour, two replicas each on one memcached: floodgate-rls passed %d (%d failed), envoyproxy/ratelimit %d (%d failed)",
			fg, fgFailed, ref, refFailed)
		if fgFailed != 0 || fg != 500 {
			t.Fatalf("floodgate-rls passed %d, with %d calls failed: want exactly 500", fg, fgFailed)
		}
		return
	}
}

// TestMemcacheOddValues: descriptor values that memcached cannot hold in
// a key, 4 KB long or with a space, a newline, a tab or a NUL byte, are
// limited by floodgate-rls on memcached, each exactly and apart from the
// others (one that differs from another in its last byte alone is a
// client of its own). envoyproxy/ratelimit, on the same values and a
// memcached of its own, is reported: its keys are the values, which
// memcached refuses, so it limits none of them.
func TestMemcacheOddValues(t *testing.T) {
	bin := binary(t)
	refBin := peertest.Build(t, peerModule)
	root := runtimeDir(t, map[string]string{"api.yaml": apiConfig(5)})
	ourMC, theirMC := memcachetest.Start(t), memcachetest.Start(t)
	ours := startReplica(t, bin, root, "BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT="+ourMC.Addr(), "FLOODGATE_FAILURE_MODE=closed")
	theirs := startRefMemcache(t, refBin, root, theirMC.Addr(), "")
	long := strings.Repeat("v", 4096)
	values := []string{long, long[:4095] + "w", "with spaces and\nnewlines", "\r\n", "a\tb", "nul\x00byte", " ", "ünïcödé " + long[:300]}
	for _, v := range values {
		req := peertest.Request("api", 0, "k="+v)
		fg, ref := 0, 0
		for range 7 {
			r, err := ours.client.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatalf("floodgate-rls, a value of %d bytes: %v", len(v), err)
			}
			if r.OverallCode == pb.RateLimitResponse_OK {
				fg++
			}
			if r, err := theirs.ShouldRateLimit(context.Background(), req); err == nil && r.OverallCode == pb.RateLimitResponse_OK {
				ref++
			}
		}
		t.Logf("a value of %d bytes (%.12q…): floodgate-rls passed %d of 7 on a limit of 5, envoyproxy/ratelimit %d", len(v), v, fg, ref)
		if fg != 5 {
			t.Errorf("floodgate-rls passed %d of 7 of the value %.40q…, want exactly the limit, 5", fg, v)
		}
	}
}

// TestMemcacheRestart: memcached killed mid-run, then started again
// empty on its port, under each FLOODGATE_FAILURE_MODE, with every hit
// charged (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT unset: the Store's
// Charge) and with hits over the limit not counted (true: its Decide):
// floodgate-rls never crashes; while memcached is away each call is
// answered as the mode says (error: the call fails, Unknown, for
// Envoy's failure_mode_deny; open: OK; closed: OVER_LIMIT; local:
// decided by this replica alone, on the rule, so the sixth of a limit
// of 5 is refused); a stalled memcached (SIGSTOP) fails the call with
// DeadlineExceeded within FLOODGATE_MEMCACHE_TIMEOUT. Once memcached is
// back, the limits resume on it, exactly, from the empty counts it
// restarted with.
func TestMemcacheRestart(t *testing.T) {
	for _, tc := range []struct {
		mode string
		down func(i int) string // the i-th call's answer while memcached is away
	}{
		{"error", func(int) string { return "Unknown" }},
		{"open", func(int) string { return "OK" }},
		{"closed", func(int) string { return "OVER_LIMIT" }},
		{"local", func(i int) string {
			if i < 5 {
				return "OK"
			}
			return "OVER_LIMIT"
		}},
	} {
		for _, stop := range []string{"false", "true"} {
			t.Run(tc.mode+"/stop="+stop, func(t *testing.T) {
				mc := memcachetest.Start(t)
				root := runtimeDir(t, map[string]string{"api.yaml": apiConfig(5)})
				a, logs := start(t, map[string]string{"RUNTIME_ROOT": root + "/current", "BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": mc.Addr(),
					"FLOODGATE_FAILURE_MODE": tc.mode, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": stop})
				c := grpcClient(t, a.grpc)
				for i, want := range []uint32{4, 3} {
					if code, left := xdsCall(t, c, "before"); code != pb.RateLimitResponse_OK || left != want {
						t.Fatalf("call %d before: %v, %d left", i, code, left)
					}
				}
				mc.Kill()
				for i := range 6 { // past the breaker's opening, after 3 failures
					if o := call(c, peertest.Request("api", 0, "k=down"), 5*time.Second); o.code != tc.down(i) {
						t.Fatalf("memcached killed, call %d: %v, want %s\n%s", i, o, tc.down(i), logs)
					}
				}
				if tc.mode == "error" {
					mc.Restart()
					waitFor(t, "memcached back", func() bool { return call(c, peertest.Request("api", 0, "k=probe"), 5*time.Second).code == "OK" })
					mc.Pause()
					o := call(c, peertest.Request("api", 0, "k=stalled"), 5*time.Second)
					mc.Resume()
					if o.code != "DeadlineExceeded" || o.took > 2*time.Second {
						t.Errorf("memcached stalled: %v, want DeadlineExceeded within FLOODGATE_MEMCACHE_TIMEOUT (100 ms, and a loaded machine's slack)", o)
					}
				}
				mc.Restart()
				waitFor(t, "floodgate-rls writing to memcached again", func() bool {
					call(c, peertest.Request("api", 0, "k=probe"), 5*time.Second)
					return memcacheStats(t, mc.Addr())["curr_items"] > 0
				})
				passed := 0
				for range 7 {
					if code, _ := xdsCall(t, c, "after"); code == pb.RateLimitResponse_OK {
						passed++
					}
				}
				if passed != 5 {
					t.Fatalf("memcached back: %d of 7 passed on a limit of 5", passed)
				}
				if code, _ := get(t, "http://"+a.http+"/healthcheck"); code != 200 {
					t.Fatalf("/healthcheck after the restart: %d", code)
				}
			})
		}
	}
}
