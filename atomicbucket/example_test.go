package atomicbucket_test

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/atomicbucket"
)

// A bucket of 10 a second: a burst of 10 at once, then one token every
// 100 ms. A cost known only after the work is charged, and may leave the
// bucket owing.
func Example() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b, err := atomicbucket.New(10, time.Second, 0, start)
	if err != nil {
		panic(err)
	}
	admitted := 0
	for range 15 {
		if b.Allow(start) {
			admitted++
		}
	}
	fmt.Println("admitted at once:", admitted)

	d := b.AllowN(start, 1)
	fmt.Println("then:", d.Allowed, "retry after", d.RetryAfter)

	later := start.Add(100 * time.Millisecond)
	fmt.Println("100ms later:", b.Allow(later))

	d, err = b.ChargeN(later, 3)
	fmt.Println("charged 3:", d.Owed, "owed, retry after", d.RetryAfter, err)
	// Output:
	// admitted at once: 10
	// then: false retry after 100ms
	// 100ms later: true
	// charged 3: 3 owed, retry after 400ms <nil>
}
