package floodgate

import (
	"math"
	"time"

	"github.com/floodgate-go/floodgate/internal/decision"
)

// Never is the RetryAfter of a request that can never pass as asked: a cost
// below 1 or above the capacity, or a clock reading more than the supported
// span before the key's state was made (see Rule). As an IdleTTL
// (Config, LocalStoreConfig, inflight.Config), it is a sweep that never
// comes: idle keys are kept.
const Never = decision.Never

// Unbounded, as a MaxKeys (Config, LocalStoreConfig, inflight.Config),
// holds every key: no bound on the keys' memory, which a client that
// rotates its id then grows by a key per id. It is math.MaxInt, a bound
// no table reaches.
const Unbounded = math.MaxInt

// Decision is the answer to one request, with what an HTTP 429 response
// needs: RateLimit-Limit, RateLimit-Remaining, Retry-After and
// RateLimit-Reset.
type Decision struct {
	Allowed bool
	// Unreached reports that no key's state made the decision: a Store
	// could not reach its state, and its failure mode answered with a
	// fixed answer, admitting or refusing every request (redislimit's
	// FailOpen and FailClosed). A refusal that is Unreached refuses even
	// a request that would charge nothing, such as a check of a budget.
	// A failure mode that decides by another state (redislimit's
	// FailLocal) leaves it false, as does every decision in process.
	Unreached  bool
	Limit      int64         // the capacity that applied
	Remaining  int64         // whole requests of cost 1 still allowed now, after this decision
	RetryAfter time.Duration // 0 when allowed; else the shortest wait after which the same request could pass
	ResetAfter time.Duration // time until the key is back to full capacity
	// Owed is what the key owes, in whole units, when more was taken
	// than it held: by charges (Limiter.Charge, Reservation.Settle), by
	// requests that Wait holds for later, or by a request whose clock
	// reading is older than the key's latest. No request is admitted
	// until it is paid back. 0 when the key owes nothing. A key that
	// MaxKeys evicted while it owed owes as much when it comes back (see
	// the package documentation), and one that SetRule converts owes its
	// debt under the new rule.
	Owed int64
}

// fromCore converts the algorithm packages' Decision field by field: a
// whole-struct conversion goes through memory, and its mixed-width copies
// stall store forwarding on the hot path (measured: about 10 ns per call).
func fromCore(d decision.Decision) Decision {
	return Decision{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter, Owed: d.Owed}
}
