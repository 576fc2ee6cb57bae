package main

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/memcachetest"
	"github.com/floodgate-go/floodgate/internal/policy"
	"github.com/floodgate-go/floodgate/memcachelimit"
)

// startMemcacheReplicas starts replicas servers on the memcached at
// addr, each with -metrics, the replica tests' rule, -redis-failure
// closed and a generous -redis-timeout: a request that memcached did
// not decide is refused, never decided by one replica alone, and
// scrapeMemcache checks that none was.
func startMemcacheReplicas(t *testing.T, addr string) []*server {
	t.Helper()
	var ss []*server
	for range replicas {
		ss = append(ss, launch(t, "-memcache", addr, "-redis-timeout", "10s", "-redis-failure", "closed", "-metrics", "127.0.0.1:0",
			"-limit", strconv.Itoa(replicaLimit), "-period", replicaPeriod.String()))
	}
	return ss
}

// memcachePeek is the middleware's GET /hello policy as a Store of the
// test's own sees it on the same memcached: available is what key could
// still be admitted, charging nothing.
func memcachePeek(t *testing.T, addr string) func(key string) int64 {
	t.Helper()
	c := memcache.New(addr)
	c.Timeout = 10 * time.Second
	store, err := memcachelimit.NewStore(c, memcachelimit.Config{Timeout: 10 * time.Second, FailureMode: memcachelimit.FailError})
	if err != nil {
		t.Fatal(err)
	}
	p, err := store.Policy(policy.StoreName("GET /hello", "", "hello"), "", floodgate.Rule{Limit: replicaLimit, Period: replicaPeriod})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(); c.Close() })
	return func(key string) int64 {
		t.Helper()
		d, err := p.Peek(context.Background(), key)
		if err != nil {
			t.Fatalf("Peek: %v", err)
		}
		if !d.Allowed {
			return 0
		}
		return d.Remaining + 1 // Remaining is after the peeked request
	}
}

// scrapeMemcache checks a replica's -metrics: its Store's round trips
// are there, and -redis-failure decided no request.
func scrapeMemcache(t *testing.T, i int, s *server) {
	t.Helper()
	resp, err := http.Get(s.metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var trips, fallbacks float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		cut := strings.LastIndexByte(line, ' ')
		if cut < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		series := line[:cut]
		v, err := strconv.ParseFloat(line[cut+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		switch {
		case series == `floodgate_store_round_trips_total{limiter="httpserver-memcache"}`:
			trips = v
		case strings.HasPrefix(series, `floodgate_requests_total{limiter="httpserver-memcache",`) && strings.Contains(series, `result="fail_`):
			fallbacks += v
		}
	}
	if trips == 0 {
		t.Errorf("replica %d: no round trip to memcached in its -metrics", i)
	}
	if fallbacks != 0 {
		t.Errorf("replica %d: %v requests decided by -redis-failure: memcached did not answer in time, and the counts prove nothing", i, fallbacks)
	}
}

// TestMemcacheReplicasShareOneLimit: three replicas of the server on one
// memcached, driven round-robin by 64 workers as one client, admit
// exactly -limit between them (plus the whole units the rule refilled
// during the run): memcachelimit's compare-and-swap loses no update.
// What was admitted and what memcached still holds add up to the
// allowance.
func TestMemcacheReplicasShareOneLimit(t *testing.T) {
	mc := memcachetest.Start(t)
	ss := startMemcacheReplicas(t, mc.Addr())
	available := memcachePeek(t, mc.Addr())
	begin := time.Now()
	l := drive(t, ss, "/hello", demand, nil, 0, nil)
	key, _ := l.key.Load().(string)
	if key == "" {
		t.Fatal("no request was admitted")
	}
	admitted := l.admitted()
	extra := refill(time.Since(begin))
	t.Logf("GET /hello on memcached, key %q: admitted %v = %d, denied %v, refill allowance %d", key, counts(&l.ok), admitted, counts(&l.denied), extra)
	if admitted < replicaLimit || admitted > replicaLimit+extra {
		t.Errorf("%d admitted across the replicas, want %d (up to %d with the refill)", admitted, replicaLimit, replicaLimit+extra)
	}
	for i, s := range ss {
		scrapeMemcache(t, i, s)
	}
	for _, s := range ss {
		s.stop()
	}
	extra = refill(time.Since(begin))
	avail := available(key)
	if sum := admitted + avail; sum < replicaLimit || sum > replicaLimit+extra {
		t.Errorf("admitted %d + available %d = %d, want %d (up to %d with the refill)", admitted, avail, sum, replicaLimit, replicaLimit+extra)
	}
}

// TestMemcacheReplicaKilled: a replica killed with SIGKILL in the middle
// of the run (once a third of the limit is admitted): the two left never
// admit past the allowance, and neither do they with what memcached
// still holds.
func TestMemcacheReplicaKilled(t *testing.T) {
	mc := memcachetest.Start(t)
	ss := startMemcacheReplicas(t, mc.Addr())
	available := memcachePeek(t, mc.Addr())
	begin := time.Now()
	const victim = 0
	var dead [replicas]atomic.Bool
	kill := func() {
		dead[victim].Store(true)
		if err := ss[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Errorf("SIGKILL: %v", err)
		}
	}
	l := drive(t, ss, "/hello", demand, kill, replicaLimit/3, &dead)
	if !dead[victim].Load() {
		t.Fatal("the run ended before the kill")
	}
	ss[victim].done = true
	if err := ss[victim].cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("the killed replica exited with %v", err)
	}
	for i, s := range ss {
		if i != victim {
			scrapeMemcache(t, i, s)
			s.stop()
		}
	}
	key, _ := l.key.Load().(string)
	admitted, avail := l.admitted(), available(key)
	extra := refill(time.Since(begin))
	t.Logf("on memcached: admitted %v = %d, denied %v, failed %v (replica %d killed); %d available", counts(&l.ok), admitted, counts(&l.denied), counts(&l.failed), victim, avail)
	if admitted > replicaLimit+extra || admitted+avail > replicaLimit+extra {
		t.Errorf("admitted %d, and %d available: over the allowance %d", admitted, avail, replicaLimit+extra)
	}
	for i := range ss {
		if i != victim && l.failed[i].Load() != 0 {
			t.Errorf("replica %d, alive, failed %d requests", i, l.failed[i].Load())
		}
	}
}

// TestMemcacheBadFlags: -memcache with -redis, with -lease-max (memcached
// has no lease mode) or -inflight (nor slots), with an unknown
// -redis-failure, or naming a memcached that does not answer, is an
// error at start that names the flag, before the server says it
// listens.
func TestMemcacheBadFlags(t *testing.T) {
	mc := memcachetest.Start(t)
	for _, c := range []struct {
		args []string
		name string
	}{
		{[]string{"-redis", "127.0.0.1:1", "-memcache", mc.Addr()}, "-memcache"},
		{[]string{"-memcache", mc.Addr(), "-lease-max", "64"}, "-lease-max"},
		{[]string{"-memcache", mc.Addr(), "-inflight", "2"}, "-inflight"},
		{[]string{"-memcache", mc.Addr(), "-redis-failure", "nonsense"}, "-redis-failure"},
		{[]string{"-memcache", "127.0.0.1:1"}, "-memcache"},
		{[]string{"-memcache", "no port"}, "-memcache"},
	} {
		out, err := command(t, append([]string{"-addr", "127.0.0.1:0"}, c.args...)...).CombinedOutput()
		if err == nil || strings.Contains(string(out), "listening on") || !strings.Contains(string(out), c.name) {
			t.Errorf("%v: %v, %s; want an error naming %s before listening", c.args, err, out, c.name)
		}
	}
}
