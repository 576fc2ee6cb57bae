package redislimit_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/redislimit"
	"github.com/redis/go-redis/v9"
)

// One limit per client shared by every replica: 100 requests a minute in
// Redis, and 25 a minute per replica while Redis cannot answer.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, err := redislimit.New(rdb, redislimit.Config{
		Rule:    floodgate.Rule{Limit: 100, Period: time.Minute},
		Timeout: 50 * time.Millisecond,
		Local:   &floodgate.Rule{Limit: 25, Period: time.Minute},
	})
	if err != nil {
		log.Fatal(err)
	}
	d, _ := lim.Allow(context.Background(), "client-42")
	if !d.Allowed {
		fmt.Printf("429, retry after %v\n", d.RetryAfter)
	}
}

// httplimit's policies on Redis: every replica that runs this shares one
// limit per client, and a request to /api/ is decided by both of its
// policies in one round trip.
func ExampleNewStore() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	store, err := redislimit.NewStore(rdb, redislimit.Config{
		Timeout:     50 * time.Millisecond,
		FailureMode: redislimit.FailLocal, // while Redis is away, each replica applies the rules alone
	})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // after lim's, before rdb's: in lease mode it gives back what was leased
	lim, err := httplimit.New(httplimit.Config{
		Store: store,
		Routes: []httplimit.Route{{Pattern: "/api/", Policies: []httplimit.Policy{
			{Name: "burst", Rule: floodgate.Rule{Limit: 10, Period: time.Second}},
			{Name: "hourly", Algorithm: floodgate.SlidingCounter, Rule: floodgate.Rule{Limit: 1000, Period: time.Hour}},
		}}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	_ = lim.Handler // http.ListenAndServe(addr, lim.Handler(mux))
}

// A weighted request, and the answer's headers.
func ExampleLimiter_AllowN() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, err := redislimit.New(rdb, redislimit.Config{
		Algorithm: floodgate.SlidingCounter,
		Rule:      floodgate.Rule{Limit: 1000, Period: time.Hour},
	})
	if err != nil {
		log.Fatal(err)
	}
	d, err := lim.AllowN(context.Background(), "api-key-7", 10)
	if err != nil {
		return // the context ended; d is still the FailureMode's answer
	}
	fmt.Printf("RateLimit: limit=%d, remaining=%d, reset=%v\n", d.Limit, d.Remaining, d.ResetAfter)
}

// While Redis cannot answer (here nothing listens at all), FailLocal
// decides on the Local rule in process, and after BreakAfter failures the
// breaker stops calling Redis until ProbeEvery has passed.
func ExampleFailLocal() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, err := redislimit.New(rdb, redislimit.Config{
		Rule:        floodgate.Rule{Limit: 100, Period: time.Minute},
		Timeout:     20 * time.Millisecond,
		FailureMode: redislimit.FailLocal,
		Local:       &floodgate.Rule{Limit: 2, Period: time.Minute},
	})
	if err != nil {
		log.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		d, _ := lim.Allow(context.Background(), "client-42")
		fmt.Println(d.Allowed)
	}
	s := lim.Stats()
	fmt.Printf("%d calls failed, %d decided in process, breaker opened %d time\n", s.Errors, s.Fallbacks, s.Opens)
	// Output:
	// true
	// true
	// false
	// false
	// 3 calls failed, 4 decided in process, breaker opened 1 time
}

// Lease mode: each replica takes a busy key's allowance from Redis in
// batches and spends them in process, so most checks make no round trip;
// Close gives back what is left unspent.
func ExampleLease() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, err := redislimit.New(rdb, redislimit.Config{
		Rule:  floodgate.Rule{Limit: 10_000, Period: time.Second},
		Lease: redislimit.Lease{Max: 1000, TTL: time.Second},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := lim.Close(); err != nil {
			log.Print(err) // units that could not go back: the key under-admits until their time passes
		}
	}()
	for i := 0; i < 100; i++ {
		if d, _ := lim.Allow(context.Background(), "client-42"); !d.Allowed {
			fmt.Printf("429, retry after %v\n", d.RetryAfter)
		}
	}
	s := lim.Stats()
	fmt.Printf("%d round trips, %d units leased\n", s.Calls, s.Leased)
}

// Raising a running limit: from the call on, every key holds at most what
// it held and refills at the new rate; while other replicas still run the
// old rule, no key's allowance exceeds the larger of the two.
func ExampleLimiter_SetRule() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, err := redislimit.New(rdb, redislimit.Config{
		Algorithm: floodgate.SlidingLog,
		Rule:      floodgate.Rule{Limit: 100, Period: time.Minute},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := lim.SetRule(floodgate.Rule{Limit: 200, Period: time.Minute}); err != nil {
		log.Fatal(err) // a rule New would refuse: nothing changed
	}
	d, _ := lim.Allow(context.Background(), "client-42")
	fmt.Println(d.Limit)
}
