package memcachelimit_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memcachelimit"
)

// httplimit's policies on memcached: every replica that runs this shares
// one limit per client, exactly, and a request to /api/ is decided by
// both of its policies together, all or nothing.
func ExampleNewStore() {
	mc := memcache.New("localhost:11211")
	mc.Timeout = 50 * time.Millisecond // each round trip's bound
	defer mc.Close()
	store, err := memcachelimit.NewStore(mc, memcachelimit.Config{
		FailureMode: memcachelimit.FailLocal, // while memcached is away, each replica applies the rules alone
	})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
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

// A request decided by a policy of the Store directly, and the answer's
// headers.
func ExampleStore_Decide() {
	mc := memcache.New("localhost:11211")
	defer mc.Close()
	store, err := memcachelimit.NewStore(mc, memcachelimit.Config{Prefix: "api:"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	hourly, err := store.Policy("hourly", floodgate.SlidingCounter, floodgate.Rule{Limit: 1000, Period: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	d, _, err := store.Decide(context.Background(), []floodgate.Ask{{Policy: hourly, Key: "api-key-7", N: 10}}, nil)
	if err != nil {
		return // the context ended
	}
	fmt.Printf("RateLimit: limit=%d, remaining=%d, reset=%v\n", d.Limit, d.Remaining, d.ResetAfter)
}

// While memcached cannot answer (here nothing listens at all), FailLocal
// decides on each policy's rule in process, and after BreakAfter
// failures the breaker stops calling memcached until ProbeEvery has
// passed.
func ExampleFailLocal() {
	mc := memcache.New("127.0.0.1:1")
	defer mc.Close()
	store, err := memcachelimit.NewStore(mc, memcachelimit.Config{FailureMode: memcachelimit.FailLocal})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	p, err := store.Policy("minute", floodgate.TokenBucket, floodgate.Rule{Limit: 2, Period: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	for range 4 {
		d, _, _ := store.Decide(context.Background(), []floodgate.Ask{{Policy: p, Key: "client-42", N: 1}}, nil)
		fmt.Println(d.Allowed)
	}
	s := store.Stats()
	fmt.Printf("%d calls failed, %d decided in process, breaker opened %d time\n", s.Errors, s.Fallbacks, s.Opens)
	// Output:
	// true
	// true
	// false
	// false
	// 3 calls failed, 4 decided in process, breaker opened 1 time
}
