package policy

import (
	"github.com/floodgate-go/floodgate"
)

// Spec is one named policy: a rule and its algorithm ("" is the token
// bucket), and whether it is a shadow, which counts what it would refuse
// and refuses nothing.
type Spec struct {
	// Name is the policy's name, unique within its Set.
	Name string
	// Rule is the limit per key.
	Rule floodgate.Rule
	// Algorithm is the floodgate algorithm; "" is the token bucket.
	Algorithm string
	// Shadow makes the policy count what it would refuse, and refuse
	// nothing.
	Shadow bool
}

// algorithmName is a's name, "" being the token bucket.
func algorithmName(a string) string {
	if a == "" {
		return floodgate.TokenBucket
	}
	return a
}
