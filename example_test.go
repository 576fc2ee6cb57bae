package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
)

// A limit of 10 requests per second per client, with bursts of 3. The
// manual clock makes the output reproducible; production code leaves Clock
// nil for the system's monotonic clock.
func Example() {
	clock := floodgate.NewManualClock(0)
	limiter, err := floodgate.New(floodgate.Config{
		Rule:  floodgate.Rule{Limit: 10, Period: time.Second, Burst: 3},
		Clock: clock,
	})
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	for i := range 4 {
		fmt.Println("request", i, limiter.Allow("alice"))
	}
	fmt.Println("bob is not alice:", limiter.Allow("bob"))
	clock.Advance(100 * time.Millisecond) // one token refills every 100ms
	fmt.Println("100ms later:", limiter.Allow("alice"))
	// Output:
	// request 0 true
	// request 1 true
	// request 2 true
	// request 3 false
	// bob is not alice: true
	// 100ms later: true
}

// AllowN returns a Decision with what an HTTP 429 response needs.
func ExampleLimiter_AllowN() {
	clock := floodgate.NewManualClock(0)
	limiter, _ := floodgate.New(floodgate.Config{
		Rule:  floodgate.Rule{Limit: 5, Period: time.Second},
		Clock: clock,
	})
	defer limiter.Close()

	fmt.Printf("%+v\n", limiter.AllowN("api-key-1", 4))
	fmt.Printf("%+v\n", limiter.AllowN("api-key-1", 2))
	fmt.Printf("%+v\n", limiter.AllowN("api-key-1", 6)) // above the capacity: never
	// Output:
	// {Allowed:true Unreached:false Limit:5 Remaining:1 RetryAfter:0s ResetAfter:800ms Owed:0}
	// {Allowed:false Unreached:false Limit:5 Remaining:1 RetryAfter:200ms ResetAfter:800ms Owed:0}
	// {Allowed:false Unreached:false Limit:5 Remaining:1 RetryAfter:2562047h47m16.854775807s ResetAfter:800ms Owed:0}
}

// A global cap bounds all clients together. A client refused by the cap
// keeps its own tokens: it is not punished twice.
func ExampleConfig_global() {
	clock := floodgate.NewManualClock(0)
	limiter, _ := floodgate.New(floodgate.Config{
		Rule:   floodgate.Rule{Limit: 3, Period: time.Second},
		Global: &floodgate.Rule{Limit: 4, Period: time.Second},
		Clock:  clock,
	})
	defer limiter.Close()

	limiter.AllowN("a", 3)
	fmt.Println("b before:", limiter.Peek("b").Remaining)
	d := limiter.AllowN("b", 2)
	fmt.Println("b allowed:", d.Allowed, "limit that applied:", d.Limit)
	fmt.Println("b after:", limiter.Peek("b").Remaining)
	// Output:
	// b before: 2
	// b allowed: false limit that applied: 4
	// b after: 2
}

// A Decision maps onto the headers of a 429 response.
func ExampleDecision() {
	limiter, _ := floodgate.New(floodgate.Config{Rule: floodgate.Rule{Limit: 1, Period: time.Minute}})
	defer limiter.Close()

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := limiter.AllowN(r.RemoteAddr, 1)
		w.Header().Set("RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
		w.Header().Set("RateLimit-Remaining", strconv.FormatInt(d.Remaining, 10))
		if !d.Allowed {
			// Retry-After is in whole seconds: round up.
			w.Header().Set("Retry-After", strconv.FormatInt(int64((d.RetryAfter+time.Second-1)/time.Second), 10))
			http.Error(w, "too many requests", http.StatusTooManyRequests)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	for range 2 {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		fmt.Printf("%d remaining=%s retry-after=%q\n", rec.Code, rec.Header().Get("RateLimit-Remaining"), rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 remaining=0 retry-after=""
	// 429 remaining=0 retry-after="60"
}

// EvictIdle removes keys whose state a fresh key would have; IdleTTL runs
// it in the background.
func ExampleLimiter_EvictIdle() {
	clock := floodgate.NewManualClock(0)
	limiter, _ := floodgate.New(floodgate.Config{Rule: floodgate.Rule{Limit: 2, Period: time.Second}, Clock: clock})
	defer limiter.Close()

	limiter.Allow("a")
	limiter.Allow("b")
	limiter.Allow("b")
	clock.Advance(500 * time.Millisecond) // a is full again; b is not
	fmt.Println(limiter.EvictIdle(), limiter.Len())
	// Output: 1 1
}

// A CoarseClock makes every clock read one atomic load, at the price of
// seeing time in steps of its resolution.
func ExampleNewCoarseClock() {
	clock := floodgate.NewCoarseClock(time.Millisecond)
	defer clock.Stop() // after the limiters that use it are done

	limiter, _ := floodgate.New(floodgate.Config{
		Rule:  floodgate.Rule{Limit: 100, Period: time.Second},
		Clock: clock,
	})
	defer limiter.Close()
	fmt.Println(limiter.Allow("k"))
	// Output: true
}

// A TSCClock reads the processor's counter instead of the monotonic
// clock, where the processor has an invariant one; elsewhere it is the
// SystemClock. Either way the rule holds.
func ExampleNewTSCClock() {
	clock := floodgate.NewTSCClock()
	defer clock.Stop() // after the limiters that use it are done

	limiter, _ := floodgate.New(floodgate.Config{
		Rule:  floodgate.Rule{Limit: 2, Period: time.Hour},
		Clock: clock,
	})
	defer limiter.Close()
	fmt.Println(limiter.Allow("k"), limiter.Allow("k"), limiter.Allow("k"))
	// Output: true true false
}

// AllowAt takes a time the caller already holds, on the scale of the
// limiter's Clock (here a ManualClock's nanoseconds), as x/time/rate's
// AllowN(t, n) does: no clock read at all.
func ExampleLimiter_AllowAt() {
	limiter, _ := floodgate.New(floodgate.Config{
		Rule:  floodgate.Rule{Limit: 2, Period: time.Second},
		Clock: floodgate.NewManualClock(0),
	})
	t := int64(0)
	fmt.Println(limiter.AllowAt("k", t, 1).Allowed, limiter.AllowAt("k", t, 1).Allowed)
	d := limiter.AllowAt("k", t, 1)
	fmt.Println(d.Allowed, d.RetryAfter)
	fmt.Println(limiter.AllowAt("k", t+int64(d.RetryAfter), 1).Allowed)
	// Output:
	// true true
	// false 500ms
	// true
}

// Wait reserves and blocks until the request may pass, or fails at once
// when it could pass only after the context's deadline, consuming nothing.
func ExampleLimiter_Wait() {
	limiter, _ := floodgate.New(floodgate.Config{Rule: floodgate.Rule{Limit: 1, Period: time.Hour}})
	defer limiter.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fmt.Println(limiter.Wait(ctx, "k")) // the bucket's one token: at once
	err := limiter.Wait(ctx, "k")       // the next comes in an hour
	fmt.Println(errors.Is(err, floodgate.ErrExceedsDeadline))
	// Output:
	// <nil>
	// true
}

// Limits admit a request only if every limiter does; a refusal by one
// gives back what the others took.
func ExampleNewLimits() {
	perSecond, _ := floodgate.New(floodgate.Config{Rule: floodgate.Rule{Limit: 10, Period: time.Second}})
	perHour, _ := floodgate.New(floodgate.Config{Rule: floodgate.Rule{Limit: 2, Period: time.Hour}})
	defer perSecond.Close()
	defer perHour.Close()
	limits, _ := floodgate.NewLimits(perSecond, perHour)
	for range 3 {
		d := limits.AllowN("client", 1)
		fmt.Println(d.Allowed, d.Limit)
	}
	// Output:
	// true 2
	// true 2
	// false 2
}

// Decide writes each limiter's answer into a slice the caller keeps and
// names the one that refused: a middleware's headers read every answer.
// On a refusal the others' answers are what they would answer to one
// more request (their Peek): 8 left, so 7 after it.
func ExampleLimits_Decide() {
	perSecond, _ := floodgate.New(floodgate.Config{Rule: floodgate.Rule{Limit: 10, Period: time.Second}})
	perHour, _ := floodgate.New(floodgate.Config{Rule: floodgate.Rule{Limit: 2, Period: time.Hour}})
	defer perSecond.Close()
	defer perHour.Close()
	limits, _ := floodgate.NewLimits(perSecond, perHour)
	var each [2]floodgate.Decision
	for range 3 {
		_, j := limits.Decide("client", 1, each[:])
		fmt.Println(j, each[0].Remaining, each[1].Remaining)
	}
	// Output:
	// -1 9 1
	// -1 8 0
	// 1 7 0
}

// Deciding one request by several policies on keys of their own, all or
// nothing, with a Store (in process here; redislimit's keeps the same
// policies on Redis): a gateway charges a request both to its client
// (10 an hour) and to the route it calls (3 an hour, all clients
// together). The fourth request is refused by the route, and the client
// is not charged for it.
func ExampleLocalStore_Decide() {
	store := floodgate.NewLocalStore(floodgate.LocalStoreConfig{})
	defer store.Close()
	perClient, _ := store.Policy("per-client", floodgate.TokenBucket, floodgate.Rule{Limit: 10, Period: time.Hour})
	perRoute, _ := store.Policy("per-route", floodgate.FixedWindow, floodgate.Rule{Limit: 3, Period: time.Hour})
	asks := []floodgate.Ask{
		{Policy: perClient, Key: "client-7", N: 1},
		{Policy: perRoute, Key: "/search", N: 1},
	}
	var each [2]floodgate.Decision
	for range 4 {
		_, j, _ := store.Decide(context.Background(), asks, each[:])
		fmt.Println(j, each[0].Remaining, each[1].Remaining)
	}
	// Output:
	// -1 9 2
	// -1 8 1
	// -1 7 0
	// 1 6 0
}

// Changing the rule of a running Limiter: a client keeps no more than it
// had left, the new capacity caps it, and it refills at the new rate; a
// client first seen after the change starts full under the new rule.
func ExampleLimiter_SetRule() {
	clock := floodgate.NewManualClock(0)
	limiter, err := floodgate.New(floodgate.Config{
		Rule:  floodgate.Rule{Limit: 10, Period: time.Second}, // bursts of 10
		Clock: clock,
	})
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	limiter.AllowN("alice", 4) // alice has 6 left
	if err := limiter.SetRule(floodgate.Rule{Limit: 100, Period: time.Second, Burst: 50}); err != nil {
		panic(err)
	}
	fmt.Println("alice keeps:", limiter.Peek("alice").Remaining+1)
	fmt.Println("bob starts with:", limiter.Peek("bob").Remaining+1)
	clock.Advance(100 * time.Millisecond) // 10 more at 100 a second
	fmt.Println("alice 100ms later:", limiter.Peek("alice").Remaining+1)

	err = limiter.SetRule(floodgate.Rule{Limit: 0, Period: time.Second})
	fmt.Println(err)
	// Output:
	// alice keeps: 6
	// bob starts with: 50
	// alice 100ms later: 16
	// floodgate: Rule.Limit must be at least 1, got 0
}

// A token budget of 1,000 an hour per client: each reply reserves what
// it may take, and settles to what it took. The third reply ran 300 over
// what was left, so the client owes 300, and is refused until the budget
// has paid it back (18 minutes at 1,000 an hour).
func ExampleLimiter_Reserve() {
	clock := floodgate.NewManualClock(0)
	budget, err := floodgate.New(floodgate.Config{Rule: floodgate.Rule{Limit: 1000, Period: time.Hour}, Clock: clock})
	if err != nil {
		panic(err)
	}
	for _, used := range []int64{200, 500, 600} {
		r := budget.Reserve("alice", 300)
		if !r.Decision().Allowed {
			fmt.Println("refused")
			continue
		}
		d, _ := r.Settle(used)
		fmt.Printf("used %d: remaining %d, owed %d\n", used, d.Remaining, d.Owed)
	}
	next := budget.Reserve("alice", 1)
	fmt.Println("next:", next.Decision().RetryAfter)
	// Output:
	// used 200: remaining 800, owed 0
	// used 500: remaining 300, owed 0
	// used 600: remaining 0, owed 300
	// next: 18m3.6s
}

// Charge takes a cost already spent: the bytes a download sent, counted
// against 1 MB a minute, even past what was left.
func ExampleLimiter_Charge() {
	clock := floodgate.NewManualClock(0)
	bytes, err := floodgate.New(floodgate.Config{Algorithm: floodgate.FixedWindow, Rule: floodgate.Rule{Limit: 1 << 20, Period: time.Minute}, Clock: clock})
	if err != nil {
		panic(err)
	}
	d, err := bytes.Charge("alice", 1_500_000)
	fmt.Println(d.Owed, d.RetryAfter, err)
	clock.Advance(time.Minute) // the next window
	fmt.Println(bytes.Peek("alice").Owed)
	// Output:
	// 451424 1m0s <nil>
	// 0
}
