package redislimit

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/internal/countinfo"
	"github.com/floodgate-go/floodgate/internal/redistest"
)

// figures are the counts a test expects of a Limiter without leases.
type figures struct {
	allowed, denied, failOpen, failClosed, failLocal, failError, abandoned int64
	calls, timeouts, keyErrs, others, open, opens                          int64
}

func (f figures) samples() []counts.Sample {
	return []counts.Sample{
		{Metric: counts.Requests, Label: countinfo.Allowed, Value: f.allowed},
		{Metric: counts.Requests, Label: countinfo.Denied, Value: f.denied},
		{Metric: counts.Requests, Label: countinfo.FailOpen, Value: f.failOpen},
		{Metric: counts.Requests, Label: countinfo.FailClosed, Value: f.failClosed},
		{Metric: counts.Requests, Label: countinfo.FailLocal, Value: f.failLocal},
		{Metric: counts.Requests, Label: countinfo.FailError, Value: f.failError},
		{Metric: counts.Requests, Label: countinfo.Abandoned, Value: f.abandoned},
		{Metric: counts.StoreCalls, Value: f.calls},
		{Metric: counts.StoreErrors, Label: countinfo.ErrorTimeout, Value: f.timeouts},
		{Metric: counts.StoreErrors, Label: countinfo.ErrorKey, Value: f.keyErrs},
		{Metric: counts.StoreErrors, Label: countinfo.ErrorOther, Value: f.others},
		{Metric: counts.StoreBreakerOpen, Value: f.open},
		{Metric: counts.StoreBreakerOpens, Value: f.opens},
	}
}

func checkCounts(t *testing.T, stage string, l *Limiter, want figures) {
	t.Helper()
	if got := l.AppendCounts(nil); !slices.Equal(got, want.samples()) {
		t.Fatalf("%s: AppendCounts =\n%+v\nwant\n%+v", stage, got, want.samples())
	}
}

var _ counts.Source = (*Limiter)(nil)

// TestCountsSequence: a rule of 2 an hour admits two requests and denies
// the third, on Redis, under FailOpen (which would have admitted it); an
// invalid cost is a denial that reaches no server; Peek and Reset decide
// nothing; a cancelled context is abandoned.
func TestCountsSequence(t *testing.T) {
	srv := redistest.Start(t)
	l := mustNew(t, client(t, srv), Config{Rule: floodgate.Rule{Limit: 2, Period: time.Hour}, FailureMode: FailOpen})
	ctx := context.Background()
	var want figures
	checkCounts(t, "new", l, want)
	for i, allowed := range []bool{true, true, false} {
		if d, err := l.Allow(ctx, "k"); err != nil || d.Allowed != allowed {
			t.Fatalf("request %d: %+v, %v; want Allowed %v", i, d, err, allowed)
		}
	}
	want.allowed, want.denied, want.calls = 2, 1, 3
	checkCounts(t, "allowed, allowed, denied", l, want)

	for _, n := range []int64{0, 3} {
		if d, err := l.AllowN(ctx, "k", n); err != nil || d.Allowed {
			t.Fatalf("AllowN(%d): %+v, %v; want a denial", n, d, err)
		}
	}
	want.denied += 2
	checkCounts(t, "invalid costs", l, want)

	if _, err := l.Peek(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	want.calls++ // Peek's round trip; Reset's DEL is no script call
	checkCounts(t, "Peek and Reset", l, want)
	if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
		t.Fatalf("after Reset: %+v, %v", d, err)
	}
	want.allowed++
	want.calls++
	checkCounts(t, "after Reset", l, want)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if d, err := l.Allow(cancelled, "k"); err == nil || d.Allowed {
		t.Fatalf("a cancelled context: %+v, %v", d, err)
	}
	want.abandoned++
	checkCounts(t, "abandoned", l, want)

	// The counts are appended to what dst holds.
	head := counts.Sample{Metric: counts.Keys, Value: 7}
	if got := l.AppendCounts([]counts.Sample{head}); len(got) != 1+len(want.samples()) || got[0] != head {
		t.Fatalf("AppendCounts did not append: %+v", got)
	}
	if s := l.Stats(); s.Calls != want.calls || s.Abandoned != want.abandoned || s.Errors != 0 || s.Fallbacks != 0 {
		t.Fatalf("Stats = %+v", s)
	}
}

// TestCountsFailures makes Redis fail under each FailureMode: an error
// reply about one key's data (key), a command the server refuses (NOPERM:
// other), and a paused server (timeouts), which opens the breaker. Each
// decision the FailureMode made is counted once under the mode's result,
// each failed round trip once under its kind, and the breaker's gauge is
// 1 from its opening until the probe finds Redis back.
func TestCountsFailures(t *testing.T) {
	for _, mode := range []FailureMode{FailLocal, FailOpen, FailClosed, FailError} {
		t.Run(mode.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			c := client(t, srv)
			ctx := context.Background()
			clock := floodgate.NewManualClock(0)
			l := mustNew(t, c, Config{Rule: floodgate.Rule{Limit: 10, Period: time.Hour}, Timeout: 150 * time.Millisecond,
				FailureMode: mode, Clock: clock, BreakAfter: 3, ProbeEvery: time.Second})
			var want figures
			fail := map[FailureMode]*int64{FailLocal: &want.failLocal, FailOpen: &want.failOpen, FailClosed: &want.failClosed, FailError: &want.failError}[mode]
			// A decision the FailureMode made is Unreached, except
			// FailLocal's, which its local state made; FailError's
			// returns an error that wraps floodgate.ErrUnreached.
			allow := func(stage, key string, byMode bool) {
				t.Helper()
				d, err := l.Allow(ctx, key)
				if wantErr := byMode && mode == FailError; wantErr != errors.Is(err, floodgate.ErrUnreached) || !wantErr && err != nil {
					t.Fatalf("%s: %v", stage, err)
				}
				if want := byMode && mode != FailLocal; d.Unreached != want {
					t.Fatalf("%s: %+v, want Unreached %v", stage, d, want)
				}
			}

			allow("healthy", "k", false)
			want.allowed, want.calls = 1, 1
			checkCounts(t, "healthy", l, want)

			if err := c.RPush(ctx, l.redisKey("list"), "x").Err(); err != nil {
				t.Fatal(err)
			}
			allow("key error", "list", true)
			want.calls++
			want.keyErrs++
			*fail++
			checkCounts(t, "key error", l, want)

			if err := c.Do(ctx, "acl", "setuser", "default", "-evalsha", "-eval").Err(); err != nil {
				t.Fatal(err)
			}
			allow("NOPERM", "k", true)
			want.calls++
			want.others++
			*fail++
			checkCounts(t, "NOPERM", l, want)
			if err := c.Do(ctx, "acl", "setuser", "default", "+@all").Err(); err != nil {
				t.Fatal(err)
			}
			allow("permitted again", "k", false)
			want.allowed++
			want.calls++
			checkCounts(t, "permitted again", l, want)

			srv.Pause()
			for i := 0; i < 3; i++ {
				allow("paused", "k", true)
			}
			want.calls += 3
			want.timeouts += 3
			*fail += 3
			want.open, want.opens = 1, 1
			checkCounts(t, "paused: the breaker opens", l, want)
			allow("breaker open", "k", true)
			*fail++
			checkCounts(t, "breaker open", l, want)
			srv.Resume()
			clock.Advance(time.Second)
			allow("probe", "k", false)
			want.allowed++
			want.calls++
			want.open = 0
			checkCounts(t, "probe", l, want)

			s := l.Stats()
			if s.Calls != want.calls || s.Errors != want.timeouts+want.keyErrs+want.others || s.Timeouts != want.timeouts ||
				s.KeyErrors != want.keyErrs || s.Opens != want.opens || s.Fallbacks != *fail {
				t.Fatalf("Stats = %+v; disagree with the counts %+v", s, want)
			}
		})
	}
}

// TestCountsLease: in lease mode every request served from a lease is
// allowed, and the leased, returned and lapsed units are Stats' and
// account for every leased unit once Close has returned the rest; a
// refill that fails on a key's data is counted once under the
// FailureMode.
func TestCountsLease(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	clock := floodgate.NewManualClock(epoch)
	rule := floodgate.Rule{Limit: 1000, Period: time.Hour}
	l := replica(t, c, Config{Rule: rule, Lease: Lease{Max: 50, TTL: time.Second}, FailureMode: FailClosed}, clock)
	const requests = 200
	for i := 0; i < requests; i++ {
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
	}
	if err := c.RPush(ctx, l.redisKey("list"), "x").Err(); err != nil {
		t.Fatal(err)
	}
	if d, err := l.Allow(ctx, "list"); err != nil || d.Allowed {
		t.Fatalf("a key error in lease mode: %+v, %v; want FailClosed's denial", d, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	s := l.Stats()
	if s.Leased == 0 || s.Returned == 0 || s.Refills == 0 {
		t.Fatalf("the test leased nothing, or returned nothing: %+v", s)
	}
	want := append(figures{allowed: requests, failClosed: 1, calls: s.Calls, keyErrs: 1}.samples(),
		counts.Sample{Metric: counts.StoreLeased, Value: s.Leased},
		counts.Sample{Metric: counts.StoreReturned, Value: s.Returned},
		counts.Sample{Metric: counts.StoreLapsed, Value: s.Lapsed})
	if got := l.AppendCounts(nil); !slices.Equal(got, want) {
		t.Fatalf("AppendCounts =\n%+v\nwant\n%+v", got, want)
	}
	// Each refill decided one request on Redis (and the key error's one
	// failed); the other requests spent leased units, and Close returned
	// what was left.
	if spent := int64(requests) - (s.Refills - 1); s.Leased != spent+s.Returned+s.Lapsed {
		t.Fatalf("leased %d units: %d spent, %d returned, %d lapsed (%+v)", s.Leased, spent, s.Returned, s.Lapsed, s)
	}
	p, err := l.Peek(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if requests+p.Remaining+1 != rule.Limit { // Peek's Remaining is after the request it peeks at
		t.Fatalf("Redis has %d left after %d admitted and the rest returned; want %d", p.Remaining, requests, rule.Limit-requests-1)
	}
}
