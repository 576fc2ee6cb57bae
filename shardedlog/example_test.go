package shardedlog_test

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/shardedlog"
)

// A log of 3 a second admits exactly 3 in any second: a request passes
// again only once the oldest of the three has left the window.
func Example() {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	l, err := shardedlog.New(3, time.Second, start)
	if err != nil {
		panic(err)
	}
	for _, ms := range []int{0, 400, 800, 900} {
		d := l.AllowN(start.Add(time.Duration(ms)*time.Millisecond), 1)
		fmt.Printf("at %4dms: %v, retry after %v\n", ms, d.Allowed, d.RetryAfter)
	}
	fmt.Println("at 1000ms:", l.Allow(start.Add(time.Second)))
	// Output:
	// at    0ms: true, retry after 0s
	// at  400ms: true, retry after 0s
	// at  800ms: true, retry after 0s
	// at  900ms: false, retry after 100ms
	// at 1000ms: true
}
