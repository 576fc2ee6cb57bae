package redislimit

import "github.com/floodgate-go/floodgate/counts"

// result is what decided a request, as AppendCounts counts it: the index
// of its counter in Limiter.requests.
type result uint8

const (
	resAllowed result = iota
	resDenied
	resFailOpen
	resFailClosed
	resFailLocal
	resAbandoned
	numResults
)

// resultLabels are the results' labels, in counts' names.
var resultLabels = [numResults]string{
	resAllowed:    counts.Allowed,
	resDenied:     counts.Denied,
	resFailOpen:   counts.FailOpen,
	resFailClosed: counts.FailClosed,
	resFailLocal:  counts.FailLocal,
	resAbandoned:  counts.Abandoned,
}

// decided is the result of a decision that Redis or a lease made.
func decided(allowed bool) result {
	if allowed {
		return resAllowed
	}
	return resDenied
}

// failResult is the result of a decision that the FailureMode made.
func (l *Limiter) failResult() result {
	switch l.mode {
	case FailOpen:
		return resFailOpen
	case FailClosed:
		return resFailClosed
	}
	return resFailLocal
}

// AppendCounts appends the Limiter's counts to dst (see package counts),
// with Route and Policy "", which makes the Limiter a counts.Source.
//
// counts.Requests counts each decision of Allow and AllowN once (Peek and
// Reset decide nothing), under one result:
//
//   - allowed and denied: Redis decided, in the request's own round trip
//     or, in lease mode, through the units this replica had leased (a
//     request served from a lease is allowed; one answered from a denial
//     that Redis made for the key and the replica holds until its
//     RetryAfter is denied). A cost below 1 or above the rule's capacity,
//     which reaches no server, is denied too.
//   - fail_open, fail_closed, fail_local: the FailureMode decided, as it
//     does while Redis fails (a round trip that failed or ran out of
//     Timeout, an error reply about the key's data, a lease refill that
//     outlasted Timeout) or while the breaker is open. The one of the
//     Limiter's FailureMode counts them all: fail_open for the admissions
//     of FailOpen, fail_closed for the denials of FailClosed, and
//     fail_local for FailLocal's decisions, whatever its in-process
//     limiter answered.
//   - abandoned: the caller's context ended before Redis answered (or
//     before the call): denied, with the context's error (see AllowN).
//
// Then Redis's side: counts.StoreCalls, the round trips (Stats.Calls:
// batches of decisions, lease renewals and returns, whether or not they
// failed); counts.StoreErrors, the calls that failed (Stats.Errors, each
// call of a failed batch), by kind:
// timeout (ran out of Timeout, Stats.Timeouts), key (an error reply about
// one key's data, Stats.KeyErrors) and other (every other failure: a
// broken or refused connection, a server state such as LOADING or
// READONLY); counts.StoreBreakerOpen, 1 from the breaker's opening until
// a call finds Redis back (while it is 1 the FailureMode decides, but for
// one probe at a time once ProbeEvery has passed), else 0; and
// counts.StoreBreakerOpens, the times it opened (Stats.Opens).
//
// In lease mode only: counts.StoreLeased, StoreReturned and StoreLapsed,
// the units of Stats.Leased, Returned and Lapsed.
func (l *Limiter) AppendCounts(dst []counts.Sample) []counts.Sample {
	for r, label := range resultLabels {
		dst = append(dst, counts.Sample{Metric: counts.Requests, Label: label, Value: l.requests.Value(r)})
	}
	open := int64(0)
	if l.breaker.openUntil.Load() != closed {
		open = 1
	}
	dst = append(dst,
		counts.Sample{Metric: counts.StoreCalls, Value: l.calls.Load()},
		counts.Sample{Metric: counts.StoreErrors, Label: counts.ErrorTimeout, Value: l.timeouts.Load()},
		counts.Sample{Metric: counts.StoreErrors, Label: counts.ErrorKey, Value: l.keyErrs.Load()},
		counts.Sample{Metric: counts.StoreErrors, Label: counts.ErrorOther, Value: l.otherErrs.Load()},
		counts.Sample{Metric: counts.StoreBreakerOpen, Value: open},
		counts.Sample{Metric: counts.StoreBreakerOpens, Value: l.opens.Load()})
	if ls := l.lease; ls != nil {
		dst = append(dst,
			counts.Sample{Metric: counts.StoreLeased, Value: ls.leased.Load()},
			counts.Sample{Metric: counts.StoreReturned, Value: ls.returned.Load()},
			counts.Sample{Metric: counts.StoreLapsed, Value: ls.lapsed.Load()})
	}
	return dst
}
