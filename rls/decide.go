package rls

import (
	"context"
	"errors"
	"math"

	"github.com/floodgate-go/floodgate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// How a descriptor's answer in sc.ds was reached.
const (
	charged     uint8 = iota // it decided the request, and charged it: Remaining is what is left
	peeked                   // it was not charged: the answer is what one more request would find
	refusedHere              // it refused the request
)

// decide decides the request's descriptors on the Store: the enforced
// and shadow ones in one Decide (the enforced all or nothing, then the
// shadows all or nothing among themselves: a shadow refuses nothing, and
// if one would, none is charged), and the checks by a look each, after.
// The descriptors that name one rule and key (and are enforced, or
// shadows, both) ask as one, for all their hits at once. A descriptor
// whose rule admits nothing (requests_per_unit 0), or whose limit
// override the table cannot hold, refuses before the Store is asked. It
// reports whether an enforced descriptor refused.
//
// Unless Options.StopIncrementOverLimit, each descriptor is charged its
// hits whatever its key holds, by the Store's Charge, and refuses if its
// key owes after (see Options); a charge past what a key can owe
// decides the request as StopIncrementOverLimit does.
//
// Hits that fit are charged alike by the Store's Decide, which in lease
// mode spends the leases (and takes them in its round trip), so every
// request is decided first; only when something refused are the hits
// that Decide did not charge charged into debt, in a second call.
func (s *Server) decide(ctx context.Context, sc *scratch) (over bool, err error) {
	if s.charger != nil && len(sc.kind) > 64 {
		// More descriptors than done can mark: charged at once.
		over, bound, err := s.decideBy(ctx, sc, true, 0)
		if !bound {
			return over, err
		}
	}
	over, _, err = s.decideBy(ctx, sc, false, 0)
	if s.charger == nil || err != nil || len(sc.kind) > 64 {
		return over, err
	}
	var done uint64 // descriptor i's hits were charged by Decide
	refused := false
	for i, k := range sc.kind {
		if (k != kindEnforced && k != kindShadow) || sc.first[i] != i || sc.rules[i].zero() {
			continue
		}
		if sc.state[i] == charged {
			done |= 1 << i
		} else {
			refused = true
		}
	}
	if !refused {
		return over, nil
	}
	over, _, err = s.chargeAll(ctx, sc, over, done)
	return over, err
}

// chargeAll charges into debt the hits of every descriptor that done does
// not mark; past what a key can owe, it charges nothing, and the request
// stands as Decide decided it (over), whose answers a bound leaves in sc.
func (s *Server) chargeAll(ctx context.Context, sc *scratch, over bool, done uint64) (bool, bool, error) {
	o, bound, err := s.decideBy(ctx, sc, true, done)
	if bound {
		return over, true, nil
	}
	return o, false, err
}

// decideBy is decide, by charges that cannot be refused (charge) or all
// or nothing; bound reports a charge past what a key can owe, which
// charged nothing. Descriptors that skip marks are left as they are,
// charged already.
func (s *Server) decideBy(ctx context.Context, sc *scratch, charge bool, skip uint64) (over, bound bool, err error) {
	n := len(sc.kind)
	sc.state = grow(sc.state, n)
	sc.first, sc.cost = grow(sc.first, n), grow(sc.cost, n)
	sc.asks, sc.askOf = sc.asks[:0], sc.askOf[:0]
	shadowsOut := false // a shadow refused before the Store is asked: no shadow is charged
	for i := range n {
		sc.first[i], sc.cost[i] = i, sc.hits[i]
		k := sc.kind[i]
		if k != kindEnforced && k != kindShadow && k != kindFull {
			continue
		}
		for j := range i {
			if sc.first[j] == j && sc.kind[j] == k && sc.rules[j] == sc.rules[i] && sc.keyOf(j) == sc.keyOf(i) {
				sc.first[i] = j
				sc.cost[j] = addHits(sc.cost[j], sc.hits[i])
				break
			}
		}
		if sc.first[i] == i && (k == kindFull || sc.rules[i].zero()) {
			sc.ds[i], sc.state[i] = floodgate.Decision{RetryAfter: floodgate.Never}, refusedHere
			if k == kindShadow {
				shadowsOut = true
			} else {
				over = true
			}
		}
	}
	look := func(i int) error {
		d, err := sc.rules[i].pol.Peek(ctx, sc.keyOf(i))
		sc.ds[i], sc.state[i] = d, peeked
		return err
	}
	for i := range n {
		k := sc.kind[i]
		if (k != kindEnforced && k != kindShadow) || sc.first[i] != i || sc.rules[i].zero() {
			continue
		}
		if charge && i < 64 && skip&(1<<i) != 0 {
			continue // charged by Decide, and it fit: its answer stands
		}
		if !charge && (over || k == kindShadow && shadowsOut) {
			if err := look(i); err != nil {
				return over, false, storeStatus(err)
			}
			continue
		}
		sc.asks = append(sc.asks, floodgate.Ask{Policy: sc.rules[i].pol, Key: sc.keyOf(i), N: clampHits(sc.cost[i]), Shadow: k == kindShadow})
		sc.askOf = append(sc.askOf, i)
	}
	if len(sc.asks) > floodgate.MaxPolicies {
		return false, false, status.Errorf(codes.InvalidArgument, "rls: %d limited descriptors in one request, more than the %d one decision takes", len(sc.asks), floodgate.MaxPolicies)
	}
	if len(sc.asks) > 0 && charge {
		sc.each = grow(sc.each, len(sc.asks))
		_, err := s.charger.Charge(ctx, sc.asks, sc.each)
		if errors.Is(err, floodgate.ErrDebtBound) {
			return false, true, nil
		}
		if err != nil {
			return false, false, storeStatus(err)
		}
		for k, i := range sc.askOf {
			d := sc.each[k]
			sc.ds[i], sc.state[i] = d, charged
			if !sc.asks[k].Shadow && owes(&d) {
				over = true
			}
		}
	} else if len(sc.asks) > 0 {
		sc.each = grow(sc.each, len(sc.asks))
		_, j, err := s.store.Decide(ctx, sc.asks, sc.each)
		if err != nil {
			return false, false, storeStatus(err)
		}
		over = j >= 0 && !sc.asks[j].Shadow
		for k, i := range sc.askOf {
			d := sc.each[k]
			switch {
			case k == j:
				sc.ds[i], sc.state[i] = d, refusedHere
			case j < 0 || sc.asks[j].Shadow && !sc.asks[k].Shadow:
				sc.ds[i], sc.state[i] = d, charged
			default:
				sc.ds[i], sc.state[i] = d, peeked
			}
		}
	}
	// The checks are looked at after every charge.
	for i, k := range sc.kind {
		if k == kindCheck {
			if sc.rules[i].zero() {
				sc.ds[i], sc.state[i] = floodgate.Decision{RetryAfter: floodgate.Never}, peeked
			} else if err := look(i); err != nil {
				return over, false, storeStatus(err)
			}
		}
	}
	for i, f := range sc.first {
		if f != i {
			sc.ds[i], sc.state[i] = sc.ds[f], sc.state[f]
		}
	}
	return over, false, nil
}

// owes reports whether a charged descriptor is over its limit: its key
// owes, or the Store's failure mode refused it.
func owes(d *floodgate.Decision) bool { return d.Owed > 0 || !d.Allowed }

// addHits is a + b, at most math.MaxUint64.
func addHits(a, b uint64) uint64 {
	if a+b < a {
		return math.MaxUint64
	}
	return a + b
}

// storeStatus is the gRPC status of a decision that the Store could not
// make (its failure mode fails the call: floodgate.ErrUnreached), or
// that the caller gave up on. A Store that did not answer in time is
// answered as envoyproxy/ratelimit's caller sees a stalled Redis (that
// server waits for Redis with no deadline, so its caller's own deadline
// ends the call): DeadlineExceeded, "context deadline exceeded". Any
// other failure of the Store is Unknown, the code that server's Redis
// errors reach its caller with (it returns them as plain errors), with
// the Store's error.
func storeStatus(err error) error {
	if errors.Is(err, floodgate.ErrUnreached) {
		var to interface{ Timeout() bool }
		if errors.As(err, &to) && to.Timeout() {
			return status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
		}
		return status.Error(codes.Unknown, err.Error())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, "rls: the caller's deadline passed before the Store answered")
	}
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, "rls: the caller gave up before the Store answered")
	}
	return status.Errorf(codes.Unavailable, "rls: %v", err)
}
