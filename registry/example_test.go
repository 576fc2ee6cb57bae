package registry_test

import (
	"fmt"

	"github.com/floodgate-go/floodgate/registry"
)

// Counting requests per client, with at most 10,000 clients held
// whatever ids arrive.
func Example() {
	m, err := registry.New(10_000)
	if err != nil {
		panic(err)
	}
	for _, client := range []string{"alice", "bob", "alice"} {
		if _, err := m.Add(client, 1); err != nil {
			panic(err)
		}
	}
	alice, _ := m.Load("alice")
	_, held := m.Load("carol")
	fmt.Println("alice:", alice, "carol held:", held, "keys:", m.Len())

	// A compare-and-swap admits a request only while the count is below 2.
	n, _ := m.Load("bob")
	ok, _ := m.CompareAndSwap("bob", n, n+1)
	fmt.Println("bob's second:", ok)
	// Output:
	// alice: 2 carol held: false keys: 2
	// bob's second: true
}
