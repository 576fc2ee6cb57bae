package floodgate

import "time"

// Policy is one named limit of a middleware (httplimit's Route and
// Config.Default, grpclimit's methods), which decides it through its
// Store. Its fields say which of three kinds it is:
//
//   - a rate: Rule, by Algorithm, each request costing 1 at admission;
//   - a rate whose cost is known when the request ends (After): Estimate
//     reserved at admission, the request's cost charged in its place
//     when it ends (see Settler);
//   - an in-flight limit (InFlight above 0): at most InFlight requests
//     of a client at once; Rule, Algorithm, After, Estimate and
//     CostHeader are then zero.
//
// A request passes only if every policy of its route admits it, all or
// nothing (see Store's Decide): a request that one refuses is charged
// by none, and one that a rate refuses gives back the slots that its
// in-flight policies took. The middlewares check a Policy when they are
// made or given new routes, and return an error for any field out of
// range or of another kind.
type Policy struct {
	// Name names the policy in the counts and, over HTTP, in the
	// RateLimit-Policy and RateLimit headers: 1 to 64 of the characters
	// A-Z a-z 0-9 . _ -, unique within a route.
	Name string
	// Rule is the limit per client.
	Rule Rule
	// Algorithm is the algorithm that enforces Rule, one of this
	// package's algorithm names: "" is TokenBucket.
	Algorithm string
	// Shadow makes the policy a dry run: requests are decided and charged
	// as usual, and one that it alone would refuse is served and counted
	// as shadow_denied instead.
	Shadow bool
	// After makes a request's cost known when it ends (a handler
	// returns, a stream ends), instead of 1 at admission: a budget of
	// the tokens a model streams, or of the bytes sent. The policy
	// reserves Estimate when the request arrives; when it ends, the cost
	// that CostHeader carries, or that the handler reported (httplimit
	// and grpclimit's Report), is charged in its place, even if the
	// client has gone: what the Estimate had over it goes back, and an
	// overrun is charged whatever the client has left, so that it may
	// owe, and is refused until it has paid it back (see Limiter's
	// Charge). A cost neither carried nor reported leaves the Estimate
	// charged. It needs a Store that is a Settler (the one in process
	// and redislimit's are).
	After bool
	// Estimate is what an After policy reserves at admission, 0 to the
	// rule's capacity: 0 charges nothing then, and refuses a client that
	// owes (Envoy AI Gateway's pattern for token budgets).
	Estimate int64
	// CostHeader names where an After policy's cost comes back, in
	// decimal: over HTTP, a response header or trailer; over gRPC, a
	// metadata key of the response's header or trailer. The middleware
	// takes it out before the response is sent, so the client never sees
	// it, and ignores a value that is not one non-negative decimal
	// integer. "" takes the cost the handler reports instead.
	CostHeader string
	// InFlight, above 0, makes the policy an in-flight limit instead of
	// a rate: at most InFlight requests of a client at once, 1 to
	// inflight.MaxLimit. A request takes a slot when it is admitted and
	// gives it back when it ends. The route's in-flight policies take
	// their slots before its rate policies decide. A refusal says when
	// to retry (RetryAfter), and sends no RateLimit headers: an in-flight
	// limit is not a quota over time, which is what they describe. In
	// process, an in-flight policy is an inflight.Limiter of the
	// LocalStore's; on another Store, the Store must be a SlotStore.
	InFlight int
	// RetryAfter is how long an in-flight policy's refusal tells the
	// client to wait (HTTP's Retry-After, rounded up to whole seconds;
	// gRPC's RetryInfo): 0 is one second. A slot frees when one of the
	// client's requests ends, which the server cannot foresee: set it to
	// how long the route's requests usually run.
	RetryAfter time.Duration
}
