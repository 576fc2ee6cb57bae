package storekit_test

import (
	"bytes"
	"fmt"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/storekit"
)

// casStore is a toy backend: each key's bytes, replaced only if they are
// still the ones read (memcached's gets and cas, in one process).
type casStore struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (c *casStore) get(key string) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key]
}

func (c *casStore) cas(key string, old, next []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !bytes.Equal(c.m[key], old) {
		return false
	}
	c.m[key] = bytes.Clone(next)
	return true
}

// take is the backend's request: read, step, and write if the step
// changed the state, again from the read if another replica wrote first.
func take(c *casStore, m *storekit.Machine, key string, now, n int64) floodgate.Decision {
	var buf [64]byte
	for {
		old := c.get(key)
		d, next, _, err := m.Take(old, now, n, buf[:0])
		if err != nil {
			return floodgate.Decision{RetryAfter: floodgate.Never}
		}
		if next == nil || c.cas(key, old, next) {
			return d
		}
	}
}

func ExampleMachine() {
	m, err := storekit.NewMachine(floodgate.SlidingLog, floodgate.Rule{Limit: 3, Period: time.Minute})
	if err != nil {
		panic(err)
	}
	c := &casStore{m: map[string][]byte{}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for i := range 4 {
		d := take(c, m, "alice", now+int64(i)*int64(time.Second), 1)
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	fresh, _ := m.Fresh(c.get("alice"))
	fmt.Println("forget after", time.Duration(fresh-now))
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 57s
	// forget after 1m2s
}
