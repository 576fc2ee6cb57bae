package atomicwindow_test

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/atomicwindow"
)

// A sliding window counter of 100 a minute. Half a minute into the next
// window, half of the last window's count still weighs: 40 of the 80
// admitted then, so 60 more fit.
func Example() {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	w, err := atomicwindow.NewSliding(100, time.Minute, start)
	if err != nil {
		panic(err)
	}
	w.AllowN(start, 80)

	later := start.Add(90 * time.Second)
	d := w.AllowN(later, 61)
	fmt.Println("61 at 12:01:30:", d.Allowed, "remaining", d.Remaining)
	d = w.AllowN(later, 60)
	fmt.Println("60 at 12:01:30:", d.Allowed, "remaining", d.Remaining)
	// Output:
	// 61 at 12:01:30: false remaining 60
	// 60 at 12:01:30: true remaining 0
}
