package policy

import (
	"time"

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
	// After makes the policy's cost known when the request ends (see
	// Set.Reserve): it reserves Estimate at admission, 0 being a check
	// that charges nothing and refuses a key that owes, and Set.Settle
	// charges the request's cost in its place.
	After bool
	// Estimate is an After policy's reservation: 0 to its rule's capacity.
	Estimate int64
	// CostKey is the face's name of what carries an After policy's cost
	// (httplimit's response header or trailer, grpclimit's metadata key),
	// "" for a cost the handler reports.
	CostKey string
	// InFlight, above 0, makes the policy an in-flight limit: at most
	// InFlight requests of a key at once, each holding a slot from its
	// admission until it ends (see Set.Acquire). Rule, Algorithm, After
	// and Estimate are then zero.
	InFlight int
	// RetryAfter is the Retry-After of an in-flight policy's refusal: 0
	// is DefaultRetryAfter.
	RetryAfter time.Duration
}

// DefaultRetryAfter is the Retry-After of an in-flight policy's refusal
// when it gives none: a slot frees when one of the client's requests
// ends, which the server cannot foresee; a second is the shortest wait
// that the header can say.
const DefaultRetryAfter = time.Second

// algorithmName is a's name, "" being the token bucket.
func algorithmName(a string) string {
	if a == "" {
		return floodgate.TokenBucket
	}
	return a
}
