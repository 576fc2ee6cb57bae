package redislimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/outage"
)

// call is what one round trip asks of the script: a request of cost n
// (0 for a return alone), or with dry its peek; want extra units for a
// lease; give unspent leased units back, charged to window gk (the
// windows), whose slots ended at gk on Redis's clock (the buckets), or in
// the entry stamped gk (the log).
type call struct {
	n, want, give, gk int64
	dry               bool
	look              bool          // a check that charges for a lease (see refill): its fallback only looks
	force             bool          // a charge that cannot be refused (see Store.Charge)
	budget            time.Duration // the call's time for Redis; 0 means Timeout
	rs                *rules        // the rule it is sent under; nil means the one in force
}

// reply is the script's answer: the decision (Owed from the script's
// negative remaining); bound, that a forced charge would pass what the
// key can owe, and charged nothing; extra, the units leased
// beyond n; horizon, how long (µs) they stay spendable at most; k, the
// window they were charged to (the windows), their entry's stamp (the
// log) or Redis's clock (the buckets); redis, false when the
// FailureMode answered instead; res, the decision's result as
// AppendCounts counts it; and rs, the rule the call was sent under.
type reply struct {
	d                 floodgate.Decision
	extra, horizon, k int64
	bound             bool
	redis             bool
	res               result
	rs                *rules
}

// decide runs the script of call c for the client key, whose Redis key
// is rkey, or falls back.
//
// What counts against the breaker is Redis's own failure only: an error
// that says the server cannot serve (a broken connection, a refused dial,
// LOADING, BUSY, READONLY and the like), or the Store's own Timeout
// running out. A call whose caller's context ended first is abandoned: it
// tells nothing of Redis, since a client sets its own deadline (gRPC's
// grpc-timeout) and could otherwise open the breaker for every client. An
// error reply about one key's data (WRONGTYPE, a script error on a value
// something else wrote there) is that key's: it is answered by the
// FailureMode and counted in Errors and KeyErrors, but it opens the
// breaker for no one.
func (p *policy) decide(ctx context.Context, rkey, key string, c call) (reply, error) {
	if c.rs == nil {
		c.rs = p.rs()
	}
	if c.budget <= 0 {
		c.budget = p.s.set.timeout
	}
	var r reply
	o, err := p.s.guarded(ctx, c.budget, func() (err error) {
		r, err = p.run(ctx, rkey, c)
		return err
	})
	switch o {
	case tripAnswered:
		r.res = decided(r.d.Allowed)
		return r, nil
	case tripAbandoned:
		return reply{d: p.abandon(), res: resAbandoned}, err
	}
	if c.force && p.s.set.mode == FailLocal {
		return reply{d: p.chargeLocal(key, c.n), res: resFailLocal}, nil
	}
	d, res, err := p.unreached(key, c.n, c.dry || c.look, err)
	return reply{d: d, res: res}, err
}

// unreached is the FailureMode's answer to a request of cost n from key
// (with dry, to a peek) that Redis did not decide, for the reason cause
// (see guarded): the fallback's decision, or with FailError a refusal
// and its error.
func (p *policy) unreached(key string, n int64, dry bool, cause error) (floodgate.Decision, result, error) {
	if p.s.set.mode != FailError {
		return p.fallback(key, n, dry), p.s.failResult(), nil
	}
	p.s.fallbacks.Add(1)
	return p.s.refusedUnreached(p.rs().capacity), resFailError, p.s.unreachedErr(cause)
}

// chargeLocal is FailLocal's answer to a charge of n from key that Redis
// did not take (see Store.Charge): its in-process limiter takes it,
// whatever the key holds there, so that the key owes there as it would
// on Redis, and refuses the checks and requests after it until the debt
// is paid. (A request's answer, AllowN, would take nothing from a key
// holding less than n, and leave it passing every check: a token budget
// without end.) A charge past what the local key can owe takes nothing,
// and refuses.
func (p *policy) chargeLocal(key string, n int64) floodgate.Decision {
	p.s.fallbacks.Add(1)
	capacity := p.rs().capacity
	t, err := p.local()
	if err != nil { // CheckRule took the rule: not reached
		return p.s.refusedUnreached(capacity)
	}
	d, err := t.lim.Charge(key, n)
	if err != nil {
		return floodgate.Decision{Limit: capacity, RetryAfter: floodgate.Never}
	}
	return d
}

// refusedUnreached is the refusal of FailClosed and FailError under a
// policy of capacity c.
func (s *Store) refusedUnreached(c int64) floodgate.Decision {
	return floodgate.Decision{Unreached: true, Limit: c, RetryAfter: time.Duration(s.breaker.every)}
}

// Why guarded sent nothing: the breaker is open, or an earlier call of
// the request found Redis failing (see package outage).
var (
	errBreakerOpen = errors.New("the circuit breaker is open")
	errMarked      = errors.New("an earlier call of the request failed")
)

// unreachedErr is FailError's error for a call that Redis did not decide
// for the reason cause: a failed round trip's error, or why none was
// sent, which the latest failure of Redis then explains.
func (s *Store) unreachedErr(cause error) error {
	if cause != errBreakerOpen && cause != errMarked {
		return &unreachedError{cause: cause, timeout: cause == errLeaseWait || isTimeout(cause)}
	}
	e := &unreachedError{cause: errNoAnswer, open: true}
	if f := s.breaker.last.Load(); f != nil {
		e.cause, e.timeout = f.err, f.timeout
	}
	if cause == errMarked {
		e.open = false
		e.cause = fmt.Errorf("%w: %w", errMarked, e.cause)
	}
	return e
}

// run is one call on Redis for rkey: EVALSHA, and EVAL when Redis has
// lost the script, in a batch with the calls in flight beside it (see
// batcher), within the call's budget from now.
func (p *policy) run(ctx context.Context, rkey string, c call) (reply, error) {
	// An IntSliceCmd reads the reply's integers as they come; a Cmd would
	// box each in an interface (an allocation apiece above 255), then copy
	// them out.
	args := p.shortArgs(rkey, c)
	if args == nil {
		args = p.args(rkey, c)
	}
	var rf *refund
	if !c.dry && c.n > 0 {
		rf = &refund{n: 1}
		rf.ps[0], rf.rss[0] = p, c.rs
	}
	v, err := p.s.batch.do(ctx, args, p.script.src, time.Now().Add(c.budget), rf)
	if err != nil {
		return reply{}, err
	}
	return decode(v, c.rs)
}

// What became of a round trip that guarded ran.
type tripOutcome int

const (
	tripAnswered  tripOutcome = iota // Redis answered: the answer stands
	tripAbandoned                    // the caller's context ended first
	tripFailed                       // Redis did not answer, or the breaker is open: the FailureMode decides
)

// guarded runs trip, one round trip for a call whose caller's context is
// ctx, within budget, under the Store's breaker: a caller whose context
// has ended sends nothing; an open breaker sends nothing and fails, and
// so does a call of a request whose earlier call found Redis failing
// (ctx's outage mark), so that a request of several calls waits on
// Redis's failure once; an answer closes the breaker; a caller's
// deadline or cancellation is the caller's, and counts against no
// breaker; any other failure is counted, tried against the breaker (an
// error about one key's data is not Redis down, and marks no request),
// and given to OnError. err is the caller's context's error when the
// caller ended first (tripAbandoned), and why Redis did not decide when
// it failed (tripFailed: its error, errBreakerOpen or errMarked).
func (s *Store) guarded(ctx context.Context, budget time.Duration, trip func() error) (o tripOutcome, err error) {
	if err := ctx.Err(); err != nil {
		return tripAbandoned, err
	}
	mark := outage.From(ctx)
	if mark.Down() {
		return tripFailed, errMarked
	}
	probe, ok := s.breaker.enter(s.set.clock.Now())
	if !ok {
		mark.SetDown()
		return tripFailed, errBreakerOpen
	}
	deadline := time.Now().Add(budget)
	err = trip()
	if err == nil {
		s.breaker.succeed(probe)
		return tripAnswered, nil
	}
	if callerErr := callerEnded(ctx, deadline); callerErr != nil {
		s.breaker.abandon(probe)
		return tripAbandoned, callerErr
	}
	switch kind := s.failed(err); kind {
	case keyErr:
		s.breaker.succeed(probe) // Redis answered: it is up
	default:
		s.serverFailed()
		s.breaker.last.Store(&failure{err: err, timeout: kind == timeoutErr})
		if s.breaker.fail(probe, s.set.clock.Now()) {
			s.opens.Add(1)
		}
		mark.SetDown()
	}
	if s.set.onError != nil {
		s.set.onError(err)
	}
	return tripFailed, err
}

// abandon answers a call whose caller's context ended before Redis did,
// under every FailureMode, with a denial. The FailureMode answers for
// Redis when Redis cannot decide; a caller that gave up did not find
// Redis unable, and admitting it (as FailOpen would, or FailLocal's
// limiter, a limit per replica) would let any client pass the shared
// limit by sending a deadline too short for a round trip. Its caller is
// gone, so the denial turns no one away.
func (p *policy) abandon() floodgate.Decision {
	p.s.abandoned.Add(1)
	return floodgate.Decision{Limit: p.rs().capacity}
}

// fallback is the FailureMode's answer to a request of cost n from key
// (with dry, to a peek): FailError's is FailClosed's refusal, for a
// caller that answers without an error (see unreached).
func (p *policy) fallback(key string, n int64, dry bool) floodgate.Decision {
	s := p.s
	s.fallbacks.Add(1)
	capacity := p.rs().capacity
	switch s.set.mode {
	case FailOpen:
		return floodgate.Decision{Allowed: true, Unreached: true, Limit: capacity, Remaining: capacity - n}
	case FailClosed, FailError:
		return s.refusedUnreached(capacity)
	}
	t, err := p.local()
	if err != nil { // CheckRule took the rule: not reached
		return s.refusedUnreached(capacity)
	}
	if dry {
		return t.lim.Peek(key)
	}
	return t.lim.AllowN(key, n)
}

// failResult is the result of a decision that the FailureMode made.
func (s *Store) failResult() result {
	switch s.set.mode {
	case FailOpen:
		return resFailOpen
	case FailClosed:
		return resFailClosed
	case FailError:
		return resFailError
	}
	return resFailLocal
}

// decideOne decides a request of cost n from key by p alone: from its
// lease in lease mode, else in one round trip, or by the FailureMode. A
// cost below 1 or above the rule's capacity is a denial with RetryAfter
// Never, and reaches no server.
func (s *Store) decideOne(ctx context.Context, p *policy, key string, n int64) (floodgate.Decision, result, error) {
	rs := p.rs()
	if n < 1 || n > rs.capacity {
		return floodgate.Decision{Limit: rs.capacity, RetryAfter: floodgate.Never}, resDenied, nil
	}
	if s.lease != nil {
		return p.leaseAllow(ctx, key, n, rs)
	}
	r, err := p.decide(ctx, p.redisKey(key), key, call{n: n, rs: rs})
	return r.d, r.res, err
}
