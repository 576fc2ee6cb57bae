package rls

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/redislimit"
	"github.com/floodgate-go/floodgate/rls/internal/peertest"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The reference server, envoyproxy/ratelimit, is built from its Go module
// at the version testdata/ratelimit-peer pins, never imported: it is
// what this package is compared with, not a part of it.

// peerModule is the directory whose go.mod pins the reference.
const peerModule = "testdata/ratelimit-peer"

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
}

// peer is a running reference server.
type peer struct {
	client pb.RateLimitServiceClient
	redis  *redistest.Server
}

// startPeer runs the reference server on redis with files as its
// configuration, with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT and the
// RateLimit headers on, until the test ends.
func startPeer(t *testing.T, bin string, redis *redistest.Server, files map[string]string, env ...string) *peer {
	t.Helper()
	root := t.TempDir()
	cfgDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(cfgDir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	grpcPort := freePort(t)
	defaults := []string{"USE_STATSD=false", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redis.Addr,
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT=" + freePort(t), "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + grpcPort,
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + freePort(t), "LOG_LEVEL=warn",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true", "LIMIT_RESPONSE_HEADERS_ENABLED=true", "EXPIRATION_JITTER_MAX_SECONDS=0"}
	proc := peertest.Start(t, bin, append(defaults, env...)...) // env after the defaults: the later of two settings wins
	return &peer{redis: redis, client: proc.Dial(t, "127.0.0.1:"+grpcPort,
		&pb.RateLimitRequest{Domain: "readiness-probe", Descriptors: []*rlv3.RateLimitDescriptor{desc("k", "v")}},
		grpc.WithTransportCredentials(insecure.NewCredentials()))}
}

// flush empties the reference's Redis: every count starts again.
func (p *peer) flush(t *testing.T) {
	t.Helper()
	p.redis.Flush()
}

// sideBySide sends each sequence to both servers, request by request,
// and requires the same answer to each, both with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT. A sequence runs from empty
// counts, within one second of the Unix clock (so within one window of
// every unit, and one reading of duration_until_reset); one that crossed
// a second is run again from empty counts.
func sideBySide(t *testing.T, p *peer, files map[string]string, seqs map[string][]*pb.RateLimitRequest, onRedis bool) {
	t.Helper()
	sideBySideOpts(t, p, files, seqs, onRedis, Options{})
}

// sideBySideOpts is sideBySide with floodgate's Server built from base
// (its Headers and StopIncrementOverLimit set as the reference runs).
func sideBySideOpts(t *testing.T, p *peer, files map[string]string, seqs map[string][]*pb.RateLimitRequest, onRedis bool, base Options) {
	t.Helper()
	var cfgFiles []File
	for name, data := range files {
		cfgFiles = append(cfgFiles, File{Name: name, Data: []byte(data)})
	}
	cfg, err := LoadOptions{}.Load(cfgFiles)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(seqs))
	for name := range seqs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		reqs := seqs[name]
		for attempt := 0; ; attempt++ {
			p.flush(t)
			opts := base
			opts.Headers, opts.StopIncrementOverLimit = true, true // as the reference runs (see startPeer)
			if onRedis {
				opts.Store = store(t, redisClient(t, p.redis.Addr), redislimit.Config{Prefix: "floodgate", FailureMode: redislimit.FailClosed})
			}
			_, ours := serve(t, cfg, opts)
			start := time.Now().Unix()
			var diffs []string
			for i, req := range reqs {
				theirs, err1 := p.client.ShouldRateLimit(context.Background(), req)
				mine, err2 := ours.ShouldRateLimit(context.Background(), req)
				if err1 != nil || err2 != nil {
					if (err1 == nil) != (err2 == nil) {
						diffs = append(diffs, fmt.Sprintf("request %d: envoyproxy/ratelimit %v, floodgate %v", i, err1, err2))
					}
					continue
				}
				if a, b := peertest.Answer(theirs), peertest.Answer(mine); a != b {
					diffs = append(diffs, fmt.Sprintf("request %d:\n  envoyproxy/ratelimit %s\n  floodgate            %s", i, a, b))
				}
			}
			if time.Now().Unix() != start {
				if attempt < 8 {
					continue // crossed a second: windows may have ended between the two servers' answers
				}
				t.Fatalf("%s: every attempt crossed a second", name)
			}
			if len(diffs) > 0 {
				t.Errorf("%s: the servers differ:\n%s", name, strings.Join(diffs, "\n"))
			}
			break
		}
	}
}

// readPeerConfigs returns the YAML files of the reference's own
// integration tests and examples, from its module.
func readPeerConfigs(t *testing.T) map[string]map[string]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/envoyproxy/ratelimit")
	cmd.Dir = peerModule
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("locating envoyproxy/ratelimit's module: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	sets := map[string]map[string]string{}
	for _, sub := range []string{"test/integration/runtime/current/ratelimit/config", "examples/ratelimit/config"} {
		files, err := filepath.Glob(filepath.Join(dir, sub, "*.yaml"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no configs in %s: %v", sub, err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			sets[filepath.Base(f)] = map[string]string{filepath.Base(f): string(data)}
		}
	}
	return sets
}

// ours is a configuration of our own, with what the reference's configs
// lack: wildcards, nesting with a default key, unlimited, shadow mode,
// replaces across descriptors, a zero limit, and weeks, months, years.
const oursYAML = `domain: ours
descriptors:
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: path
    value: /a*b*c
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: path
    rate_limit: {unit: week, requests_per_unit: 5}
  - key: user
    descriptors:
      - key: plan
        value: gold
        rate_limit: {name: gold, unit: month, requests_per_unit: 6, replaces: [{name: everyone}]}
      - key: plan
        rate_limit: {name: everyone, unit: year, requests_per_unit: 2}
  - key: health
    rate_limit: {unlimited: true}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: closed
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: team
    rate_limit: {unit: hour, requests_per_unit: 3}
`

// TestSideBySide: for fixed windows, the reference under
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT and floodgate, in process and
// on Redis, give every sequential request the same code,
// limit_remaining, duration_until_reset, current_limit and headers: on
// the reference's own integration and example configs, and on ours.
func TestSideBySide(t *testing.T) {
	bin := peertest.Build(t, peerModule)
	redis := redistest.Start(t)
	configs := readPeerConfigs(t)
	configs["ours.yaml"] = map[string]string{"ours.yaml": oursYAML}
	seqs := map[string]map[string][]*pb.RateLimitRequest{
		"another.yaml": {
			"key2 20/min":  peertest.Times(22, peertest.Request("another", 0, "key2=a")),
			"key3 10/hour": peertest.Times(12, peertest.Request("another", 0, "key3=b")),
			"key4 20/day":  peertest.Times(22, peertest.Request("another", 0, "key4")),
			"both, then key3's end": slices.Concat(
				peertest.Times(12, peertest.Request("another", 0, "key2=a", "key3=b")),
				peertest.Times(3, peertest.Request("another", 0, "key2=a"))),
		},
		"basic.yaml": {
			"key1 50/s":         peertest.Times(52, peertest.Request("basic", 0, "key1=x")),
			"one per minute":    peertest.Times(3, peertest.Request("basic", 0, "one_per_minute=y")),
			"hits 7 on 50/s":    peertest.Times(9, peertest.Request("basic", 7, "key1=z")),
			"unknown key":       peertest.Times(2, peertest.Request("basic", 0, "nope=1")),
			"unknown domain":    peertest.Times(2, peertest.Request("nowhere", 0, "key1=x")),
			"deeper than rules": peertest.Times(2, peertest.Request("basic", 0, "key1=x,more=1")),
		},
		"share_threshold.yaml": {
			"shared":     slices.Concat(peertest.Times(6, peertest.Request("share-threshold-test", 0, "files=files/a")), peertest.Times(6, peertest.Request("share-threshold-test", 0, "files=files/b"))),
			"not shared": slices.Concat(peertest.Times(6, peertest.Request("share-threshold-test", 0, "files_no_share=files_no_share/a")), peertest.Times(6, peertest.Request("share-threshold-test", 0, "files_no_share=files_no_share/b"))),
		},
		"config.yaml": {
			"users": peertest.Times(3, peertest.Request("mongo_cps", 0, "database=users")),
			"other": peertest.Times(2, peertest.Request("mongo_cps", 0, "database=other")),
		},
		"example.yaml": {
			"account":            peertest.Times(6, peertest.Request("rl", 0, "category=account")),
			"bkthomps":           peertest.Times(4, peertest.Request("rl", 0, "source_cluster=proxy,destination_cluster=bkthomps")),
			"mock":               peertest.Times(3, peertest.Request("rl", 0, "source_cluster=proxy,destination_cluster=mock")),
			"replaced":           peertest.Times(6, peertest.Request("rl", 0, "category=account", "source_cluster=proxy,destination_cluster=bkthomps", "source_cluster=proxy,destination_cluster=fake")),
			"foo":                peertest.Times(4, peertest.Request("rl", 0, "foo=x")),
			"foo bar":            peertest.Times(5, peertest.Request("rl", 0, "foo=x,bar=y")),
			"foo bar bkthomps":   peertest.Times(3, peertest.Request("rl", 0, "foo=x,bar=bkthomps")),
			"banned":             peertest.Times(2, peertest.Request("rl", 0, "foo=x,bar=banned")),
			"banned replaced":    peertest.Times(3, peertest.Request("rl", 0, "foo=x,bar=banned", "source_cluster=proxy,destination_cluster=override")),
			"baz":                peertest.Times(3, peertest.Request("rl", 0, "foo=x,baz=z")),
			"not-so-shady":       peertest.Times(5, peertest.Request("rl", 0, "foo=x,baz=not-so-shady")),
			"all or nothing":     peertest.Times(5, peertest.Request("rl", 0, "foo=x", "foo=x,bar=y")),
			"over at the second": peertest.Times(4, peertest.Request("rl", 0, "foo=x,baz=z", "foo=x,bar=y")),
		},
		"ours.yaml": {
			"api wildcard":    slices.Concat(peertest.Times(3, peertest.Request("ours", 0, "path=/api/a")), peertest.Times(3, peertest.Request("ours", 0, "path=/api/b"))),
			"default key":     peertest.Times(7, peertest.Request("ours", 0, "path=/elsewhere")),
			"gold":            peertest.Times(8, peertest.Request("ours", 0, "user=u,plan=gold")),
			"everyone":        peertest.Times(4, peertest.Request("ours", 0, "user=u,plan=free")),
			"gold replaces":   peertest.Times(8, peertest.Request("ours", 0, "user=u,plan=gold", "user=u,plan=free")),
			"health":          peertest.Times(3, peertest.Request("ours", 0, "health=1")),
			"shadowed":        peertest.Times(4, peertest.Request("ours", 0, "shadowed=1")),
			"closed":          peertest.Times(2, peertest.Request("ours", 0, "closed=1")),
			"team and closed": peertest.Times(2, peertest.Request("ours", 0, "team=t", "closed=1")),
		},
	}
	for name, files := range configs {
		if seqs[name] == nil {
			t.Errorf("%s: a config of the reference with no sequences to compare: add some", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			p := startPeer(t, bin, redis, files)
			t.Run("in process", func(t *testing.T) { sideBySide(t, p, files, seqs[name], false) })
			t.Run("on Redis", func(t *testing.T) { sideBySide(t, p, files, seqs[name], true) })
		})
	}
}

// TestSideBySideDifferences shows, request by request, where floodgate
// decides otherwise by design, on the same config and requests:
//
//   - A weighted hit over the limit: with
//     STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT unset, both charge it, and
//     refuse a smaller hit after it; with StopIncrementOverLimit,
//     floodgate charges a refused hit nothing, and admits the smaller one
//     that fits (the reference, even with that setting, charges the
//     descriptor that goes over).
//   - Without that setting, both charge every refused hit, and the other
//     descriptors of a refused request too; with it, floodgate charges a
//     refused request's descriptors nothing.
//   - A descriptor's own hits_addend of 0: the reference reads a set
//     wrapper of 0 as a check; so does floodgate.
//   - Concurrency: 64 callers race on one descriptor; floodgate admits
//     exactly the limit, the reference what its GET and INCRBY let
//     through (logged).
//   - A shadow rule over its limit: the reference stops charging the
//     request's other descriptors (its stop-increment check counts the
//     shadow's), so they pass uncounted; floodgate charges them.
//   - One descriptor twice in a request: the reference charges each in
//     turn, and charges both when the second goes over; floodgate asks
//     for both hits at once, on every backend, and charges nothing when
//     they do not fit.
//   - Wildcards inside a value ("/a*b*c"): the pinned reference, the
//     newest the Go module proxy serves, matches a trailing * only, and
//     reads the value literally; envoyproxy/ratelimit matches inner
//     wildcards since March 2026 (#1085), as floodgate does.
func TestSideBySideDifferences(t *testing.T) {
	bin := peertest.Build(t, peerModule)
	redis := redistest.Start(t)
	files := map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n  - key: j\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"}
	cfg, err := LoadOptions{}.Load([]File{{Name: "d.yaml", Data: []byte(files["d.yaml"])}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(p *peer, ours pb.RateLimitServiceClient, reqs []*pb.RateLimitRequest) (theirs, mine []string) {
		for _, r := range reqs {
			a, err := p.client.ShouldRateLimit(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			b, err := ours.ShouldRateLimit(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			theirs, mine = append(theirs, summary(a)), append(mine, summary(b))
		}
		return theirs, mine
	}
	// codes is each answer's first status, code and what is left.
	codes := func(s []string) string {
		var out []string
		for _, x := range s {
			parts := strings.Split(strings.Fields(x)[1], "/")
			out = append(out, parts[0]+"/"+parts[1])
		}
		return strings.Join(out, " ")
	}
	t.Run("weighted hit over the limit", func(t *testing.T) {
		p := startPeer(t, bin, redis, files)
		p.flush(t)
		_, ours := serve(t, cfg, Options{})
		reqs := []*pb.RateLimitRequest{peertest.Request("d", 8, "k=a"), peertest.Request("d", 5, "k=a"), peertest.Request("d", 2, "k=a")}
		theirs, mine := run(p, ours, reqs)
		t.Logf("envoyproxy/ratelimit: %q\nfloodgate:            %q", theirs, mine)
		if got := codes(theirs); got != "OK/2 OVER_LIMIT/0 OVER_LIMIT/0" {
			t.Fatalf("the reference: %s, want OK then two refusals (it charged the refused 5)", got)
		}
		if got, want := codes(mine), codes(theirs); got != want {
			t.Fatalf("floodgate with the setting unset: %s, want the reference's %s (the refused 5 charged)", got, want)
		}
		// With StopIncrementOverLimit, floodgate charges a refused hit
		// nothing: the 2 that fit pass.
		p.flush(t)
		_, stop := serve(t, cfg, Options{StopIncrementOverLimit: true})
		_, mine = run(p, stop, reqs)
		if got := codes(mine); got != "OK/2 OVER_LIMIT/0 OK/0" {
			t.Fatalf("floodgate with StopIncrementOverLimit: %s, want OK, refused, then the 2 that fit admitted", got)
		}
	})
	t.Run("without STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", func(t *testing.T) {
		p := startPeer(t, bin, redis, files, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false")
		p.flush(t)
		_, ours := serve(t, cfg, Options{})
		reqs := slices.Concat(peertest.Times(12, peertest.Request("d", 0, "j=a", "k=a")), peertest.Times(1, peertest.Request("d", 0, "j=a")))
		theirs, mine := run(p, ours, reqs)
		// j is charged by the reference for each of the two refused pairs.
		if got := codes(theirs[12:]); got != "OK/87" {
			t.Fatalf("the reference's j after two refused pairs: %s, want 87 left (charged for them)", got)
		}
		if got := codes(mine[12:]); got != "OK/87" {
			t.Fatalf("floodgate's j after two refused pairs, the setting unset: %s, want 87 left, as the reference", got)
		}
		// With StopIncrementOverLimit, a request's descriptors are all or
		// nothing: j is not charged for the refused pairs.
		_, stop := serve(t, cfg, Options{StopIncrementOverLimit: true})
		_, mine = run(p, stop, reqs)
		if got := codes(mine[12:]); got != "OK/89" {
			t.Fatalf("floodgate's j after two refused pairs, with StopIncrementOverLimit: %s, want 89 left", got)
		}
	})
	t.Run("concurrency", func(t *testing.T) {
		p := startPeer(t, bin, redis, files)
		p.flush(t)
		_, ours := serve(t, cfg, Options{})
		race := func(c pb.RateLimitServiceClient) int64 {
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 10 {
						if admits(t, c, "d", desc("j", "hot")) {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			return admitted.Load()
		}
		theirs, mine := race(p.client), race(ours)
		t.Logf("64 callers, 640 hits on a limit of 100: envoyproxy/ratelimit admitted %d, floodgate %d", theirs, mine)
		if mine != 100 {
			t.Fatalf("floodgate admitted %d, want exactly 100", mine)
		}
	})
	t.Run("ours", func(t *testing.T) {
		files := map[string]string{"ours.yaml": oursYAML}
		cfg, err := LoadOptions{}.Load([]File{{Name: "ours.yaml", Data: []byte(oursYAML)}})
		if err != nil {
			t.Fatal(err)
		}
		p := startPeer(t, bin, redis, files)
		step := func(name string, reqs []*pb.RateLimitRequest, check func(theirs, mine []*pb.RateLimitResponse) string) {
			p.flush(t)
			_, ours := serve(t, cfg, Options{StopIncrementOverLimit: true}) // floodgate's own decisions
			var theirs, mine []*pb.RateLimitResponse
			for _, r := range reqs {
				a, err := p.client.ShouldRateLimit(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				b, err := ours.ShouldRateLimit(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				theirs, mine = append(theirs, a), append(mine, b)
			}
			if msg := check(theirs, mine); msg != "" {
				var lines []string
				for i := range theirs {
					lines = append(lines, fmt.Sprintf("  %d: envoyproxy/ratelimit %s\n     floodgate            %s", i, summary(theirs[i]), summary(mine[i])))
				}
				t.Errorf("%s: %s\n%s", name, msg, strings.Join(lines, "\n"))
			}
		}
		left := func(r *pb.RateLimitResponse, i int) uint32 { return r.Statuses[i].LimitRemaining }
		step("shadow over its limit", peertest.Times(5, peertest.Request("ours", 0, "shadowed=1", "team=t")), func(theirs, mine []*pb.RateLimitResponse) string {
			if left(theirs[4], 1) != 1 || theirs[4].OverallCode != pb.RateLimitResponse_OK {
				return "the reference should stop charging team once the shadow is over: team left 1, OK"
			}
			if left(mine[2], 1) != 0 || mine[3].OverallCode != pb.RateLimitResponse_OVER_LIMIT {
				return "floodgate should charge team throughout: none left at the third, refused at the fourth"
			}
			return ""
		})
		step("one descriptor twice", slices.Concat(peertest.Times(3, peertest.Request("ours", 0, "team=t", "team=t")), peertest.Times(1, peertest.Request("ours", 0, "team=t"))), func(theirs, mine []*pb.RateLimitResponse) string {
			if theirs[3].OverallCode != pb.RateLimitResponse_OVER_LIMIT {
				return "the reference should have charged the refused pair: team alone refused after it"
			}
			if mine[3].OverallCode != pb.RateLimitResponse_OK || mine[1].OverallCode != pb.RateLimitResponse_OVER_LIMIT || left(mine[0], 0) != 1 || left(mine[0], 1) != 1 {
				return "floodgate should decide the pair as one ask of 2 (1 left after the first), refuse the second whole, and admit team alone after it"
			}
			return ""
		})
		step("inner wildcard", peertest.Times(1, peertest.Request("ours", 0, "path=/axxbyyc")), func(theirs, mine []*pb.RateLimitResponse) string {
			if l := theirs[0].Statuses[0].CurrentLimit; l == nil || l.Unit != pb.RateLimitResponse_RateLimit_WEEK {
				return "the pinned reference should read /a*b*c literally, and give the default key's 5 a week"
			}
			if l := mine[0].Statuses[0].CurrentLimit; l == nil || l.Unit != pb.RateLimitResponse_RateLimit_HOUR {
				return "floodgate should match /a*b*c, 3 an hour"
			}
			return ""
		})
	})
	t.Run("check only", func(t *testing.T) {
		p := startPeer(t, bin, redis, files)
		p.flush(t)
		_, ours := serve(t, cfg, Options{})
		check := peertest.Request("d", 0, "k=c")
		check.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
		theirs, mine := run(p, ours, []*pb.RateLimitRequest{peertest.Request("d", 3, "k=c"), check, check})
		for i := range theirs {
			if codes(theirs[i:i+1]) != codes(mine[i:i+1]) {
				t.Fatalf("request %d: envoyproxy/ratelimit %s, floodgate %s", i, theirs[i], mine[i])
			}
		}
	})
}

// TestSideBySideTokenBudget: Envoy AI Gateway's token budget as Envoy
// Gateway sends it, against envoyproxy/ratelimit with its defaults: a
// budget of 1,000 tokens an hour; at each request a check (the
// descriptor's hits_addend 0), and when its stream ends the tokens it
// used (hits_addend 600). Four streams, and a last check. With the
// setting unset, floodgate-rls answers every request with the reference's
// code and what is left, in process, on Redis and in lease mode: the
// second stream's 600 are counted and put the budget 200 over, and the
// checks refuse from the third on. With StopIncrementOverLimit, the
// second stream's 600 do not fit in the 400 left: they are refused and
// counted nothing, so every check passes and 600 of the 2,400 served are
// counted, the difference docs/rls.md names.
func TestSideBySideTokenBudget(t *testing.T) {
	bin := peertest.Build(t, peerModule)
	srv := redistest.Start(t)
	files := map[string]string{"ai.yaml": "domain: ai\ndescriptors:\n  - key: tokens\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n"}
	cfg, err := LoadOptions{}.Load([]File{{Name: "ai.yaml", Data: []byte(files["ai.yaml"])}})
	if err != nil {
		t.Fatal(err)
	}
	hit := func(n uint64) *pb.RateLimitRequest {
		d := desc("tokens", "client-a")
		d.HitsAddend = wrapperspb.UInt64(n)
		return &pb.RateLimitRequest{Domain: "ai", Descriptors: []*rlv3.RateLimitDescriptor{d}}
	}
	var reqs []*pb.RateLimitRequest
	for range 4 {
		reqs = append(reqs, hit(0), hit(600))
	}
	reqs = append(reqs, hit(0))
	// answers is each response's code and what its status says is left.
	answers := func(c pb.RateLimitServiceClient) []string {
		var out []string
		for _, r := range reqs {
			resp, err := c.ShouldRateLimit(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s/%d", resp.OverallCode, resp.Statuses[0].LimitRemaining))
		}
		return out
	}
	p := startPeer(t, bin, srv, files)
	p.flush(t)
	theirs := answers(p.client)
	want := []string{"OK/1000", "OK/400", "OK/400", "OVER_LIMIT/0", "OVER_LIMIT/0", "OVER_LIMIT/0", "OVER_LIMIT/0", "OVER_LIMIT/0", "OVER_LIMIT/0"}
	if !slices.Equal(theirs, want) {
		t.Fatalf("the reference answered %q, want %q", theirs, want)
	}
	rc := redisClient(t, srv.Addr)
	for name, o := range map[string]Options{
		"in process": {},
		"redis":      {Store: store(t, rc, redislimit.Config{Prefix: fmt.Sprint("tokens-", time.Now().UnixNano()), FailureMode: redislimit.FailClosed})},
		"lease":      {Store: store(t, rc, redislimit.Config{Prefix: fmt.Sprint("tokens-lease-", time.Now().UnixNano()), FailureMode: redislimit.FailClosed, Lease: redislimit.Lease{Max: 64}})},
	} {
		s, c := serve(t, cfg, o)
		if got := answers(c); !slices.Equal(got, theirs) {
			t.Errorf("%s: floodgate-rls answered %q, the reference %q", name, got, theirs)
		}
		total := "# HELP ratelimit_service_rate_limit_total_hits Hits asked of the rule (each request's hits_addend).\n" +
			"# TYPE ratelimit_service_rate_limit_total_hits counter\n" +
			"ratelimit_service_rate_limit_total_hits{domain=\"ai\",key1=\"tokens\",key2=\"\"} 2400\n"
		if err := testutil.CollectAndCompare(s.Collector(), strings.NewReader(total), "ratelimit_service_rate_limit_total_hits"); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	_, c := serve(t, cfg, Options{StopIncrementOverLimit: true})
	got := answers(c)
	stop := []string{"OK/1000", "OK/400", "OK/400", "OVER_LIMIT/0", "OK/400", "OVER_LIMIT/0", "OK/400", "OVER_LIMIT/0", "OK/400"}
	if !slices.Equal(got, stop) {
		t.Errorf("with StopIncrementOverLimit: %q, want %q: a refused stream's tokens counted nothing", got, stop)
	}
}

// TestSideBySideQuota: quota_mode, QUOTA_MODE and
// RESPONSE_DYNAMIC_METADATA answer as the reference's: the same codes,
// counts, headers and metadata, request by request, in process and on
// Redis.
func TestSideBySideQuota(t *testing.T) {
	bin := peertest.Build(t, peerModule)
	redis := redistest.Start(t)
	files := map[string]string{"quota.yaml": strings.ReplaceAll(quotaYAML, "domain: q", "domain: quota")}
	seqs := map[string][]*pb.RateLimitRequest{
		"quota over":           peertest.Times(4, peertest.Request("quota", 0, "k=a")),
		"quota and enforced":   peertest.Times(4, peertest.Request("quota", 0, "k=a", "n=b")),
		"shadow and quota":     peertest.Times(3, peertest.Request("quota", 0, "s=c")),
		"weighted":             peertest.Times(3, peertest.Request("quota", 2, "k=d")),
		"no rule and quota":    peertest.Times(4, peertest.Request("quota", 0, "none=1", "k=e")),
		"enforced, then quota": slices.Concat(peertest.Times(2, peertest.Request("quota", 0, "n=f")), peertest.Times(4, peertest.Request("quota", 0, "k=f", "n=g"))),
	}
	for _, mode := range []struct {
		name string
		env  []string
		opts Options
	}{
		{"quota_mode", []string{"RESPONSE_DYNAMIC_METADATA=true"}, Options{DynamicMetadata: true}},
		{"QUOTA_MODE", []string{"RESPONSE_DYNAMIC_METADATA=true", "QUOTA_MODE=true"}, Options{DynamicMetadata: true, Quota: true}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			p := startPeer(t, bin, redis, files, mode.env...)
			t.Run("in process", func(t *testing.T) { sideBySideOpts(t, p, files, seqs, false, mode.opts) })
			t.Run("on Redis", func(t *testing.T) { sideBySideOpts(t, p, files, seqs, true, mode.opts) })
		})
	}
}
