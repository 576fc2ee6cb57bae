package floodgate

import (
	"context"

	"github.com/floodgate-go/floodgate/counts"
)

// Store keeps the clients' state of a middleware's policies outside this
// process, so that every replica of a service shares one limit per
// client. The middlewares (httplimit, grpclimit) take one in their
// Config; without one their policies live in process, on Limiters.
// redislimit.NewStore makes one on Redis. floodgate itself knows no
// network: it only names what a Store does.
//
// An implementation keeps the contract of each method below, and every
// guarantee of the Limiter it stands for but speed: no key passes more
// than its rule, across every replica and at any concurrency; a refused
// request is charged by no policy; SetRule gives no key allowance.
type Store interface {
	// Policy returns a new policy: algorithm ("" is TokenBucket) applied
	// to rule, per key. name identifies the policy's keys within the
	// Store; two live policies must not share it (a middleware names each
	// by its route, tier and policy name), and a policy that a restart
	// gives the same name finds its clients' state as it was left. It is
	// an error to give an algorithm or a rule that the Store cannot hold
	// exactly, with a message that says why.
	Policy(name, algorithm string, rule Rule) (StorePolicy, error)

	// Decide decides a request of cost n from key by the policies ps
	// (made by this Store, at most 8) together, all or nothing, in at most
	// one round trip to wherever the state lives. shadow, nil or of
	// len(ps), marks the shadow policies, which count what they would
	// refuse and refuse nothing:
	//
	//   - If an enforced policy refuses, the request is refused and
	//     charged by none; refused is the index of the first enforced
	//     policy that refuses, and the Decision its answer.
	//   - Else, if a shadow policy refuses, the request is admitted and
	//     charged by the enforced policies alone; refused is the index of
	//     the first shadow that refuses, and the Decision the most
	//     restrictive enforced answer (the shadow's own when every policy
	//     is a shadow).
	//   - Else every policy charges it; refused is -1, and the Decision is
	//     the most restrictive answer (the fewest remaining, the longest
	//     ResetAfter among equals).
	//
	// No other replica ever sees a charge that the request does not keep.
	// each, nil or up to len(ps) long, receives each policy's answer: what
	// it decided if it charged the request, else what it would answer
	// now. The error is ctx's when the caller gave up before the Store
	// could decide; the request is then refused, and charged by none. A
	// Store that cannot reach its state answers by its own failure mode,
	// and returns a nil error.
	Decide(ctx context.Context, key string, n int64, ps []StorePolicy, shadow []bool, each []Decision) (d Decision, refused int, err error)

	// AppendCounts appends the Store's own counts (see package counts):
	// how its requests were decided, and what reaching its state cost.
	// A middleware's counts do not include them: export the Store as a
	// counts.Source of its own.
	AppendCounts(dst []counts.Sample) []counts.Sample
}

// StorePolicy is one policy of a Store (see Store.Policy).
type StorePolicy interface {
	// SetRule changes the policy's rule while it serves, with Limiter's
	// SetRule contract: no key gains allowance from the change. Its
	// algorithm cannot change.
	SetRule(Rule) error
	// AppendCounts appends the policy's own counts, beyond those its
	// middleware keeps, with Route and Policy "" (the middleware sets
	// them).
	AppendCounts(dst []counts.Sample) []counts.Sample
	// Close releases what the policy holds in this process, and gives
	// back to the Store what it took ahead (a lease's unspent units). The
	// policy must not be used after.
	Close() error
}
