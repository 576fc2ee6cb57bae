package floodgate

import (
	"context"
	"errors"

	"github.com/floodgate-go/floodgate/counts"
)

// ErrUnreached is wrapped by the error of a call that a Store could not
// decide because it could not reach its state, when its failure mode is
// to fail the call rather than to answer it (redislimit's FailError):
// the caller, or the proxy in front of it (Envoy's failure_mode_deny),
// then chooses what a request is owed. The request is refused, and
// charged nothing that the Store could see. An error that wraps it may
// also report, by a Timeout method as net.Error's, that the state did
// not answer in time.
var ErrUnreached = errors.New("floodgate: the Store could not reach its state")

// MaxPolicies is the most limits one decision takes together: the
// Limiters of a Limits, the asks of a Store's Decide, and so the
// policies of a middleware's route. A decision keeps what each granted
// on its stack until all have answered.
const MaxPolicies = 8

// Store keeps the clients' state of a set of named policies, and decides
// requests by several of them together, all or nothing. The middlewares
// (httplimit, grpclimit) and Envoy's rate-limit service (package rls)
// decide every request through one: NewLocalStore keeps the state in
// this process, and redislimit.NewStore on Redis, shared by every
// replica of a service. floodgate itself knows no network: it only
// names what a Store does, and holds the one in process.
//
// An implementation keeps the contract of each method below, and every
// guarantee of a Limiter but speed: no key passes more than its rule,
// across every replica and at any concurrency; a refused request is
// charged by no policy; SetRule gives no key allowance. A backend
// written elsewhere builds on package storekit, which holds what every
// Store shares, and proves itself with package storetest's suite.
type Store interface {
	// Policy returns a new policy: algorithm ("" is TokenBucket) applied
	// to rule, per key. name identifies the policy's keys within the
	// Store; two live policies must not share it (a middleware names each
	// by its route, tier and policy name). On a Store whose state
	// outlives the process, a policy that a restart gives the same name
	// finds its clients' state as it was left. It is an error to give an
	// algorithm or a rule that the Store cannot hold exactly, with a
	// message that says why.
	Policy(name, algorithm string, rule Rule) (StorePolicy, error)

	// CheckRule reports whether Policy would take algorithm and rule,
	// and whether a policy's SetRule would take rule, without making a
	// policy or holding anything: a service that loads many rules
	// checks them all before it applies any.
	CheckRule(algorithm string, rule Rule) error

	// Decide decides the asks together, all or nothing, in at most one
	// round trip to wherever the state lives. There are 1 to MaxPolicies
	// asks, each of a policy this Store made. Shadow asks count what
	// they would refuse and refuse nothing:
	//
	//   - If an enforced ask refuses, the request is refused and charged
	//     by none; refused is the index of the first enforced ask that
	//     refuses, and the Decision its answer.
	//   - Else, if a shadow ask refuses, the request is admitted and
	//     charged by the enforced asks alone; refused is the index of the
	//     first shadow that refuses, and the Decision the most
	//     restrictive enforced answer (the shadow's own when every ask is
	//     a shadow).
	//   - Else every ask charges it; refused is -1, and the Decision is
	//     the most restrictive answer (the fewest remaining, the longest
	//     ResetAfter among equals).
	//
	// So an ask is charged if refused is -1, or if refused is a shadow and
	// the ask is enforced; else it is not. An ask whose N is below 1 or
	// above its policy's capacity refuses before anything is charged
	// (RetryAfter is Never), as a refusal of its policy would: an
	// enforced one refuses the request, a shadow one refuses as a shadow.
	// Asks that name the same policy and key are one ask of their summed
	// cost, whose answer each of them receives; it is an error to name
	// them once as a shadow and once enforced.
	//
	// No other replica ever sees a charge that the request does not
	// keep. each, nil or up to len(asks) long, receives each ask's
	// answer: what it decided if it charged the request or refused it,
	// else what its policy would answer to one request for its key now
	// (as Peek does). A Store that can look only at an ask's own cost
	// without charging it may answer that instead for an ask whose N is
	// above 1: a refusal with Remaining 0, when that cost would not pass.
	//
	// Decide keeps no reference to an ask's Key once it returns: a caller
	// may pass a view of a buffer it reuses.
	//
	// The error is ctx's when the caller gave up before the Store could
	// decide; the request is then refused, and keeps no charge (see the
	// Store's own documentation for what that takes). A Store that cannot
	// reach its state answers by its own failure mode: with a Decision
	// and a nil error, or, when that mode is to fail the call, with the
	// request refused and an error that wraps ErrUnreached. Any other
	// error (no asks, too many, a policy of another Store) comes before
	// anything is charged, with the request refused.
	Decide(ctx context.Context, asks []Ask, each []Decision) (d Decision, refused int, err error)

	// AppendCounts appends the Store's own counts (see package counts):
	// how its requests were decided, and what reaching its state cost.
	// A middleware's counts do not include them: export the Store as a
	// counts.Source of its own.
	AppendCounts(dst []counts.Sample) []counts.Sample
}

// StorePolicy is one policy of a Store (see Store.Policy).
type StorePolicy interface {
	// Peek returns what one request for key would be answered now, and
	// charges nothing. It keeps no reference to key; its error is as
	// Decide's.
	Peek(ctx context.Context, key string) (Decision, error)
	// SetRule changes the policy's rule while it serves, with Limiter's
	// SetRule contract: no key gains allowance from the change. Its
	// algorithm cannot change.
	SetRule(Rule) error
	// AppendCounts appends the policy's own counts, beyond those its
	// middleware keeps (in process, its keys and evictions), with Route
	// and Policy "" (the middleware sets them).
	AppendCounts(dst []counts.Sample) []counts.Sample
	// Close releases what the policy holds in this process, and gives
	// back to the Store what it took ahead (a lease's unspent units). The
	// policy must not be used after.
	Close() error
}

// Ask is one part of a request that a Store decides together with the
// others (see Store.Decide): N units for Key, by Policy, which counts
// what it would refuse and refuses nothing if Shadow.
type Ask struct {
	Policy StorePolicy
	Key    string
	N      int64
	Shadow bool
}
