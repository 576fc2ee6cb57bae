package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/rls/internal/config"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// unixStart is the tests' clock: a Unix time 20 seconds into a minute
// and an hour, so that windows end where the tests expect.
const unixStart = 1_800_000_020 * int64(time.Second)

func mustConfig(t testing.TB, yaml ...string) *Config {
	t.Helper()
	var files []File
	for i, y := range yaml {
		files = append(files, File{Name: fmt.Sprintf("f%d.yaml", i), Data: []byte(y)})
	}
	c, err := LoadOptions{}.Load(files)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// serve starts a Server on a real gRPC server on loopback and returns a
// client of it.
func serve(t testing.TB, cfg *Config, opts Options) (*Server, pb.RateLimitServiceClient) {
	t.Helper()
	s, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.MaxRecvMsgSize(16 << 20))
	pb.RegisterRateLimitServiceServer(g, s)
	go g.Serve(ln)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(16<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
		s.Close()
	})
	return s, pb.NewRateLimitServiceClient(conn)
}

// desc is a descriptor of the given key, value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// admits reports whether the request was admitted, from any goroutine.
func admits(t testing.TB, c pb.RateLimitServiceClient, domain string, ds ...*rlv3.RateLimitDescriptor) bool {
	resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Error(err)
		return false
	}
	return resp.OverallCode == pb.RateLimitResponse_OK
}

func ask(t testing.TB, c pb.RateLimitServiceClient, domain string, ds ...*rlv3.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// summary is a response in short: the overall code, then each status's
// code, remaining and reset.
func summary(r *pb.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(r.OverallCode.String())
	for _, s := range r.Statuses {
		fmt.Fprintf(&b, " %s/%d/%ds", s.Code, s.LimitRemaining, s.DurationUntilReset.GetSeconds())
	}
	return b.String()
}

const basic = `domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: big
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: small
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: none
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: tb
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket}
  - key: gold
    rate_limit:
      name: gold
      unit: hour
      requests_per_unit: 100
      replaces: [{name: everyone}]
  - key: everyone
    rate_limit: {name: everyone, unit: hour, requests_per_unit: 1}
`

// TestFixedWindow: a fixed window answers as envoyproxy/ratelimit does
// with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: the limit's hits pass,
// then every one is over, with nothing left and the seconds to the
// window's end on the Unix clock; the next window starts whole.
func TestFixedWindow(t *testing.T) {
	clock := floodgate.NewManualClock(unixStart)
	_, c := serve(t, mustConfig(t, basic), Options{Clock: clock})
	var got []string
	for range 5 {
		got = append(got, summary(ask(t, c, "d", desc("k", "a"))))
	}
	want := []string{"OK OK/2/40s", "OK OK/1/40s", "OK OK/0/40s", "OVER_LIMIT OVER_LIMIT/0/40s", "OVER_LIMIT OVER_LIMIT/0/40s"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if r := summary(ask(t, c, "d", desc("k", "b"))); r != "OK OK/2/40s" {
		t.Fatalf("another value: %s, want a count of its own", r)
	}
	clock.Advance(39*time.Second + 999*time.Millisecond)
	if r := summary(ask(t, c, "d", desc("k", "a"))); r != "OVER_LIMIT OVER_LIMIT/0/1s" {
		t.Fatalf("the window's last millisecond: %s", r)
	}
	clock.Advance(time.Millisecond)
	if r := summary(ask(t, c, "d", desc("k", "a"))); r != "OK OK/2/60s" {
		t.Fatalf("the next window: %s", r)
	}
	st := ask(t, c, "d", desc("k", "a")).Statuses[0]
	if l := st.CurrentLimit; l.RequestsPerUnit != 3 || l.Unit != pb.RateLimitResponse_RateLimit_MINUTE {
		t.Fatalf("current_limit %v", l)
	}
}

// TestAllOrNothing: a request refused by one descriptor leaves no charge
// in the others; their statuses say what they hold, OK while they could
// take the request.
func TestAllOrNothing(t *testing.T) {
	_, c := serve(t, mustConfig(t, basic), Options{StopIncrementOverLimit: true, Clock: floodgate.NewManualClock(unixStart)})
	var got []string
	for range 4 {
		got = append(got, summary(ask(t, c, "d", desc("big", "x"), desc("small", "x"))))
	}
	want := []string{
		"OK OK/9/3580s OK/1/3580s",
		"OK OK/8/3580s OK/0/3580s",
		"OVER_LIMIT OK/8/3580s OVER_LIMIT/0/3580s",
		"OVER_LIMIT OK/8/3580s OVER_LIMIT/0/3580s",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if r := summary(ask(t, c, "d", desc("big", "x"))); r != "OK OK/7/3580s" {
		t.Fatalf("big alone after two refusals: %s, want 7 left: a refusal kept a charge", r)
	}
}

// TestKinds: unlimited, unmatched, replaced, shadow and zero rules
// answer as envoyproxy/ratelimit answers them.
func TestKinds(t *testing.T) {
	s, c := serve(t, mustConfig(t, basic), Options{Clock: floodgate.NewManualClock(unixStart)})
	if r := ask(t, c, "d", desc("free", "x")); r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != math.MaxUint32 || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("unlimited: %v", r)
	}
	if r := ask(t, c, "d", desc("nothing", "x")); r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("no rule: %v", r)
	}
	if r := ask(t, c, "unknown-domain", desc("k", "x")); r.OverallCode != pb.RateLimitResponse_OK {
		t.Fatalf("unknown domain: %v", r)
	}
	if r := summary(ask(t, c, "d", desc("none", "x"))); r != "OVER_LIMIT OVER_LIMIT/0/1s" {
		t.Fatalf("requests_per_unit 0: %s", r)
	}
	// gold replaces everyone: with both, only gold counts; alone, everyone's 1 applies.
	for range 3 {
		if r := summary(ask(t, c, "d", desc("gold", "u"), desc("everyone", "u"))); !strings.HasPrefix(r, "OK OK/") || !strings.HasSuffix(r, " OK/0/0s") {
			t.Fatalf("gold and everyone: %s", r)
		}
	}
	if r := ask(t, c, "d", desc("everyone", "u")); r.OverallCode != pb.RateLimitResponse_OK {
		t.Fatalf("everyone alone, never charged while replaced: %v", r)
	}
	// A shadow rule over its limit answers OK, and holds no one back.
	for i := range 3 {
		r := ask(t, c, "d", desc("shadow", "x"), desc("big", "s"))
		if r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].Code != pb.RateLimitResponse_OK {
			t.Fatalf("shadow request %d: %v", i, r)
		}
		if left := r.Statuses[1].LimitRemaining; left != uint32(9-i) {
			t.Fatalf("shadow request %d: big has %d left, want %d", i, left, 9-i)
		}
	}
	sh := s.snap.Load().cfg.Find("d", []config.Entry{{Key: "shadow", Value: "x"}})
	r := s.snap.Load().rules[sh.Index].Load()
	if got := r.stats.value(statShadow); got != 2 {
		t.Fatalf("shadow_mode counted %d, want 2", got)
	}
	if got := r.stats.value(statTotal); got != 3 {
		t.Fatalf("total_hits counted %d, want 3", got)
	}
}

// TestHitsAddend: the request's hits_addend (0 is 1), a descriptor's own
// (0 checks without charging), and hits past any limit, which are
// refused and charge nothing.
func TestHitsAddend(t *testing.T) {
	_, c := serve(t, mustConfig(t, basic), Options{StopIncrementOverLimit: true, Clock: floodgate.NewManualClock(unixStart)})
	do := func(reqHits uint32, ds ...*rlv3.RateLimitDescriptor) string {
		resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: ds, HitsAddend: reqHits})
		if err != nil {
			t.Fatal(err)
		}
		return summary(resp)
	}
	with := func(h uint64, d *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
		d.HitsAddend = wrapperspb.UInt64(h)
		return d
	}
	steps := []struct{ got, want string }{
		{do(0, desc("big", "h")), "OK OK/9/3580s"},
		{do(4, desc("big", "h")), "OK OK/5/3580s"},
		{do(1, with(0, desc("big", "h"))), "OK OK/5/3580s"}, // check only
		{do(1, with(6, desc("big", "h"))), "OVER_LIMIT OVER_LIMIT/0/3580s"},
		{do(1, with(5, desc("big", "h"))), "OK OK/0/3580s"}, // the refused 6 was charged nothing
		{do(1, with(0, desc("big", "h"))), "OK OK/0/3580s"},
		{do(1, with(math.MaxUint64, desc("big", "g"))), "OVER_LIMIT OVER_LIMIT/0/3580s"},
		{do(math.MaxUint32, desc("big", "g")), "OVER_LIMIT OVER_LIMIT/0/3580s"},
		{do(1, desc("big", "g")), "OK OK/9/3580s"},
	}
	for i, s := range steps {
		if s.got != s.want {
			t.Fatalf("step %d: %s, want %s", i, s.got, s.want)
		}
	}
}

// TestOverride: a descriptor's limit override is a fixed window of its
// own, in a known domain only; an unknown unit is refused; a new
// override past MaxOverrides is refused, and known ones still serve.
func TestOverride(t *testing.T) {
	clock := floodgate.NewManualClock(unixStart)
	_, c := serve(t, mustConfig(t, basic), Options{StopIncrementOverLimit: true, Clock: clock, MaxOverrides: 2})
	over := func(rpu uint32, unit typev3.RateLimitUnit, kv ...string) *rlv3.RateLimitDescriptor {
		d := desc(kv...)
		d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
		return d
	}
	for i, want := range []string{"OK OK/1/40s", "OK OK/0/40s", "OVER_LIMIT OVER_LIMIT/0/40s"} {
		if r := summary(ask(t, c, "d", over(2, typev3.RateLimitUnit_MINUTE, "k", "o"))); r != want {
			t.Fatalf("override request %d: %s, want %s", i, r, want)
		}
	}
	if r := summary(ask(t, c, "elsewhere", over(2, typev3.RateLimitUnit_MINUTE, "k", "o"))); r != "OK OK/0/0s" {
		t.Fatalf("an override in an unknown domain: %s, want no limit", r)
	}
	_, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{over(2, 99, "k", "o")}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unit 99: %v, want InvalidArgument", err)
	}
	ask(t, c, "d", over(5, typev3.RateLimitUnit_HOUR, "k", "o"))
	// A third override while both windows run: over the limit, never
	// an error that Envoy would let through unlimited.
	if r := summary(ask(t, c, "d", over(6, typev3.RateLimitUnit_HOUR, "k", "o"), desc("big", "x"))); r != "OVER_LIMIT OVER_LIMIT/0/3580s OK/10/3580s" {
		t.Fatalf("a third override past MaxOverrides 2: %s", r)
	}
	if r := summary(ask(t, c, "d", over(5, typev3.RateLimitUnit_HOUR, "k", "o"))); r != "OK OK/3/3580s" {
		t.Fatalf("a known override after the refusal: %s", r)
	}
	if r := summary(ask(t, c, "d", desc("big", "x"))); r != "OK OK/9/3580s" {
		t.Fatalf("the refused request charged another descriptor: %s", r)
	}
	// Once the minute's window has ended, the third takes its place; the
	// hour's, whose window runs, keeps what its keys hold.
	clock.Advance(time.Minute)
	if r := summary(ask(t, c, "d", over(6, typev3.RateLimitUnit_HOUR, "k", "o"))); r != "OK OK/5/3520s" {
		t.Fatalf("a third override once the minute ended: %s", r)
	}
	if r := summary(ask(t, c, "d", over(5, typev3.RateLimitUnit_HOUR, "k", "o"))); r != "OK OK/2/3520s" {
		t.Fatalf("the hour's override after the recycling: %s", r)
	}
	if r := summary(ask(t, c, "d", over(2, typev3.RateLimitUnit_MINUTE, "k", "o"))); r != "OVER_LIMIT OVER_LIMIT/0/40s" {
		t.Fatalf("the minute's override, recycled, while the two hours' run: %s", r)
	}
}

// TestOverridesRecycle: thousands of distinct overrides, a few at a
// time within a window, never fill the table for good, and a key of an
// override that comes back finds what its window left.
func TestOverridesRecycle(t *testing.T) {
	clock := floodgate.NewManualClock(unixStart)
	_, c := serve(t, mustConfig(t, basic), Options{Clock: clock, MaxOverrides: 16})
	over := func(rpu uint32) *rlv3.RateLimitDescriptor {
		d := desc("k", "o")
		d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: typev3.RateLimitUnit_SECOND}
		return d
	}
	for i := range 3000 {
		rpu := uint32(1 + i%5000)
		if r := ask(t, c, "d", over(rpu)); r.OverallCode != pb.RateLimitResponse_OK {
			t.Fatalf("override %d: %s", i, summary(r))
		}
		if i%10 == 9 {
			clock.Advance(time.Second)
		}
	}
	// 1 a second: the second request within the second is over, after
	// the override was recycled and made again.
	clock.Advance(time.Second)
	ask(t, c, "d", over(1))
	for i := range 20 {
		ask(t, c, "d", over(uint32(100+i)))
	}
	if r := summary(ask(t, c, "d", over(1))); r != "OVER_LIMIT OVER_LIMIT/0/1s" {
		t.Fatalf("a spent key of a live override: %s", r)
	}
}

// TestHeaders: the RateLimit headers describe the descriptor with the
// least left, or the one over its limit.
func TestHeaders(t *testing.T) {
	_, c := serve(t, mustConfig(t, basic), Options{Clock: floodgate.NewManualClock(unixStart), Headers: true})
	hdrs := func(r *pb.RateLimitResponse) string {
		var b []string
		for _, h := range r.ResponseHeadersToAdd {
			b = append(b, h.Key+"="+h.Value)
		}
		return strings.Join(b, " ")
	}
	if h := hdrs(ask(t, c, "d", desc("big", "x"), desc("small", "x"))); h != "RateLimit-Limit=2 RateLimit-Remaining=1 RateLimit-Reset=3580" {
		t.Fatalf("headers %q", h)
	}
	ask(t, c, "d", desc("small", "x"))
	if h := hdrs(ask(t, c, "d", desc("small", "x"), desc("big", "x"))); h != "RateLimit-Limit=2 RateLimit-Remaining=0 RateLimit-Reset=3580" {
		t.Fatalf("headers over the limit %q", h)
	}
	if h := hdrs(ask(t, c, "d", desc("free", "x"))); h != "" {
		t.Fatalf("headers for an unlimited descriptor: %q, want none", h)
	}
}

// TestGlobalShadow: with Options.Shadow, a request over its limit is
// answered OK, its statuses still say what was decided, and it charges
// nothing.
func TestGlobalShadow(t *testing.T) {
	_, c := serve(t, mustConfig(t, basic), Options{StopIncrementOverLimit: true, Clock: floodgate.NewManualClock(unixStart), Shadow: true})
	for range 2 {
		ask(t, c, "d", desc("small", "x"))
	}
	r := ask(t, c, "d", desc("big", "x"), desc("small", "x"))
	if r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[1].Code != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("shadow over the limit: %s", summary(r))
	}
	if left := ask(t, c, "d", desc("big", "x")).Statuses[0].LimitRemaining; left != 9 {
		t.Fatalf("big left %d after its first charge, want 9: the shadowed refusal charged it", left)
	}
}

// TestBadInput: each malformed request gets a clear status, and the
// server goes on serving.
func TestBadInput(t *testing.T) {
	_, c := serve(t, mustConfig(t, basic), Options{Clock: floodgate.NewManualClock(unixStart)})
	many := make([]*rlv3.RateLimitDescriptor, 10_000)
	for i := range many {
		many[i] = desc("big", "x")
	}
	mb := strings.Repeat("v", 1<<20)
	for _, tc := range []struct {
		name string
		req  *pb.RateLimitRequest
		code codes.Code
	}{
		{"empty domain", &pb.RateLimitRequest{Descriptors: []*rlv3.RateLimitDescriptor{desc("k", "v")}}, codes.InvalidArgument},
		{"no descriptors", &pb.RateLimitRequest{Domain: "d"}, codes.InvalidArgument},
		{"10,000 descriptors", &pb.RateLimitRequest{Domain: "d", Descriptors: many}, codes.InvalidArgument},
		{"1 MB value", &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("k", mb)}}, codes.OK},
		{"1 MB key", &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc(mb, "v")}}, codes.OK},
		{"empty key", &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("", "")}}, codes.OK},
		{"no entries", &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{{}}}, codes.OK},
	} {
		_, err := c.ShouldRateLimit(context.Background(), tc.req)
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
		}
	}
	// The 1 MB value was counted under its own key, as any other.
	if r := summary(ask(t, c, "d", desc("k", mb))); r != "OK OK/1/40s" {
		t.Fatalf("the 1 MB value again: %s", r)
	}
	if r := summary(ask(t, c, "d", desc("k", "v"))); r != "OK OK/2/40s" {
		t.Fatalf("after the bad input: %s", r)
	}
}

// TestNewErrors: bad options are refused.
func TestNewErrors(t *testing.T) {
	cfg := mustConfig(t, basic)
	for name, o := range map[string]Options{
		"ratio above 1":     {NearLimitRatio: 1.5},
		"negative ratio":    {NearLimitRatio: -0.1},
		"NaN ratio":         {NearLimitRatio: math.NaN()},
		"negative max desc": {MaxDescriptors: -1},
		"negative max keys": {MaxKeys: -1},
	} {
		if s, err := New(cfg, o); err == nil {
			s.Close()
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Error("nil config: no error")
	}
}

// plainStore is a Store with no Settler's methods.
type plainStore struct{ floodgate.Store }

// TestStoreNotSettler: hits charged whatever a key holds (the default)
// need a Store that is a floodgate.Settler; one that is not is refused
// by a message that says so, and serves with StopIncrementOverLimit.
func TestStoreNotSettler(t *testing.T) {
	cfg := mustConfig(t, basic)
	ls := floodgate.NewLocalStore(floodgate.LocalStoreConfig{Clock: floodgate.NewManualClock(unixStart)})
	defer ls.Close()
	if s, err := New(cfg, Options{Store: plainStore{ls}}); err == nil || !strings.Contains(err.Error(), "floodgate.Settler") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("a Store that is no Settler, charging every hit: %v; want an error that names floodgate.Settler", err)
	}
	s, err := New(cfg, Options{Store: plainStore{ls}, StopIncrementOverLimit: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// TestExactConcurrent: 64 gRPC callers race on one descriptor, for every
// algorithm: exactly the limit passes on a frozen clock.
func TestExactConcurrent(t *testing.T) {
	for _, alg := range []string{floodgate.FixedWindow, floodgate.TokenBucket, floodgate.LeakyBucket, floodgate.SlidingCounter, floodgate.SlidingLog} {
		t.Run(alg, func(t *testing.T) {
			cfg := mustConfig(t, fmt.Sprintf("domain: d\ndescriptors:\n  - key: hot\n    rate_limit: {unit: hour, requests_per_unit: 500, algorithm: %s}\n  - key: other\n    rate_limit: {unit: hour, requests_per_unit: 300}\n", alg))
			_, c := serve(t, cfg, Options{StopIncrementOverLimit: true, Clock: floodgate.NewManualClock(unixStart)})
			var hot, pairs atomic.Int64
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 20 {
						if (g+i)%2 == 0 {
							if admits(t, c, "d", desc("hot", "x")) {
								hot.Add(1)
							}
						} else if admits(t, c, "d", desc("other", "y"), desc("hot", "x")) {
							pairs.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if got := hot.Load() + pairs.Load(); got != 500 {
				t.Fatalf("hot admitted %d, want exactly 500", got)
			}
			left := ask(t, c, "d", desc("other", "y")).Statuses[0].LimitRemaining + 1
			if want := uint32(300 - pairs.Load()); left != want {
				t.Fatalf("other holds %d, want %d: a refused pair kept its charge", left, want)
			}
		})
	}
}

// TestReload: a config changed mid-run keeps every key's state: a rule
// whose limit falls never lets a key pass more than the old limit in the
// window, nor a window's key more once it has spent the new one; one
// whose limit rises gives no key more than it held.
func TestReload(t *testing.T) {
	clock := floodgate.NewManualClock(unixStart)
	cfg := func(n int, alg string) *Config {
		return mustConfig(t, fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: %d, algorithm: %s}\n", n, alg))
	}
	for _, alg := range []string{floodgate.FixedWindow, floodgate.TokenBucket, floodgate.SlidingCounter, floodgate.SlidingLog} {
		t.Run(alg, func(t *testing.T) {
			s, c := serve(t, cfg(100, alg), Options{Clock: clock})
			var admitted atomic.Int64
			var wg sync.WaitGroup
			run := func(n int) {
				for g := range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range n / 16 {
							if admits(t, c, "d", desc("k", fmt.Sprint(g%2))) {
								admitted.Add(1)
							}
						}
					}()
				}
			}
			run(160) // 80 per key: all pass
			wg.Wait()
			run(320)
			if err := s.SetConfig(context.Background(), cfg(50, alg)); err != nil { // mid-run: each key holds more than 50 already
				t.Fatal(err)
			}
			wg.Wait()
			// Before the change each key could take its 100; the change
			// leaves a bucket what it held (at most 20), and a window
			// nothing: it has spent 80 or more of a limit now 50.
			low := int64(200)
			if alg != floodgate.TokenBucket {
				low = 160
			}
			if got := admitted.Load(); got < low || got > 200 {
				t.Fatalf("admitted %d across the change, want from %d to 200 (each key's 100, the most it could take before it)", got, low)
			}
			if err := s.SetConfig(context.Background(), cfg(130, alg)); err != nil {
				t.Fatal(err)
			}
			run(320)
			wg.Wait()
			if got := admitted.Load(); got > 260 {
				t.Fatalf("admitted %d after rising to 130, want at most 260", got)
			}
		})
	}
}

// TestReloadFirstUseMeanwhile: SetConfig carries the rules in use over
// without the lock, pausing at Options.Pace, while requests go on; a
// rule first used then, by the configuration before, keeps the count it
// took into the new configuration; one used before keeps its count too,
// and SetConfig after Close is an error.
func TestReloadFirstUseMeanwhile(t *testing.T) {
	clock := floodgate.NewManualClock(unixStart)
	yaml := func(extra string) *Config {
		var b strings.Builder
		b.WriteString("domain: d\ndescriptors:\n")
		for i := range 200 {
			fmt.Fprintf(&b, "  - {key: k%d, rate_limit: {unit: hour, requests_per_unit: 3}}\n", i)
		}
		b.WriteString(extra)
		return mustConfig(t, b.String())
	}
	var c pb.RateLimitServiceClient
	paused := 0
	s, c := serve(t, yaml(""), Options{Clock: clock, Pace: func() {
		// The new configuration's check (201 rules) pauses 3 times
		// first; the fourth pause is the carrying over's first, past k10.
		if paused++; paused == 201/64+1 {
			for range 3 { // k10's first use, while SetConfig carries the rules over
				if !admits(t, c, "d", desc("k10", "x")) {
					t.Error("k10 refused within its limit")
				}
			}
		}
	}})
	for i := range 100 {
		if i != 10 && !admits(t, c, "d", desc(fmt.Sprintf("k%d", i), "x")) {
			t.Fatalf("k%d refused on its first request", i)
		}
	}
	for range 2 {
		admits(t, c, "d", desc("k20", "x")) // k20 spends all 3
	}
	if err := s.SetConfig(context.Background(), yaml("  - {key: more, rate_limit: {unit: hour, requests_per_unit: 1}}\n")); err != nil {
		t.Fatal(err)
	}
	if paused == 0 {
		t.Fatal("SetConfig never paused")
	}
	for _, k := range []string{"k10", "k20"} {
		if admits(t, c, "d", desc(k, "x")) {
			t.Errorf("%s admitted after the reload: its spent count was lost", k)
		}
	}
	if !admits(t, c, "d", desc("k30", "x")) {
		t.Error("k30, 1 of 3 spent, refused after the reload")
	}
	s.Close()
	if err := s.SetConfig(context.Background(), yaml("")); err == nil || !strings.Contains(err.Error(), "after Close") {
		t.Errorf("SetConfig after Close: %v", err)
	}
}

// TestReloadStopped: SetConfig stopped by its context while it
// checks the new configuration, or while it carries the rules in use
// over, returns the context's cause and changes nothing: the
// configuration before decides, with every key's count and every
// policy as they were (none closed, none given the new limit).
func TestReloadStopped(t *testing.T) {
	clock := floodgate.NewManualClock(unixStart)
	yaml := func(n, rules int) *Config {
		var b strings.Builder
		b.WriteString("domain: d\ndescriptors:\n")
		for i := range rules {
			fmt.Fprintf(&b, "  - {key: k%d, rate_limit: {unit: hour, requests_per_unit: %d}}\n", i, n)
		}
		return mustConfig(t, b.String())
	}
	stop := errors.New("stopped by the test")
	ctx, cancel := context.WithCancelCause(context.Background())
	paused := 0
	s, c := serve(t, yaml(3, 200), Options{Clock: clock, Pace: func() {
		// The check of the new configuration (100 rules) pauses once;
		// the carrying over's first pause is the second.
		if paused++; paused == 2 {
			cancel(stop)
		}
	}})
	for i := range 100 {
		admits(t, c, "d", desc(fmt.Sprintf("k%d", i), "x"))
	}
	// k50 to k199 are gone from the new configuration, and k0 to k49
	// get 5: neither may happen.
	if err := s.SetConfig(ctx, yaml(5, 50)); !errors.Is(err, stop) {
		t.Fatalf("SetConfig stopped while carrying over: %v, want the context's cause", err)
	}
	if paused < 2 {
		t.Fatalf("paused %d times: the test did not stop the carrying over", paused)
	}
	if err := s.SetConfig(ctx, yaml(5, 50)); !errors.Is(err, stop) {
		t.Fatalf("SetConfig with an ended context: %v, want the context's cause", err)
	}
	for _, k := range []string{"k10", "k60"} { // in use: 1 of 3 spent
		for i := range 3 {
			if got := admits(t, c, "d", desc(k, "x")); got != (i < 2) {
				t.Fatalf("%s, request %d after the stopped reload: admitted %v; want the limit of 3 and the count before", k, i, got)
			}
		}
	}
	if r := ask(t, c, "d", desc("k150", "x")); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 3 {
		t.Fatalf("a rule first used after the stopped reload: %v", r.Statuses[0])
	}
}
