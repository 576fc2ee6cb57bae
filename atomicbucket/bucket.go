package atomicbucket

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/bucket"
	"github.com/floodgate-go/floodgate/internal/reading"
)

// Bucket is a lock-free token bucket. Make one with New; its methods are
// safe for concurrent use.
type Bucket struct {
	// state is the bucket. It is replaced only when the clock has run so
	// far past the state's origin that the state must move its origin
	// (at least 39 hours, at least 36 years for a rule whose interval is a
	// whole number of nanoseconds): the old state then retires, carrying
	// what it held to its successor exactly, and every call moves on to it.
	state    atomic.Pointer[bucket.Bucket]
	base     reading.Base // the time the constructor was given: readings are Unix nanoseconds from it
	capacity int64
}

// New returns a bucket of limit tokens per period, with bursts of up to
// burst tokens (0 means limit), that is full at now.
//
// The rule must have limit ≥ 1, period > 0, burst ≥ 0, at most one token
// per nanosecond (limit ≤ period in nanoseconds), and a burst window
// burst × period / limit of at most 2^60 ticks of the bucket's fixed
// point (at least 16 years when period/limit is a whole number of
// nanoseconds; 30 days at the finest scale, 1/8192 ns). A rule outside
// that range is an error; nothing is clamped.
func New(limit int64, period time.Duration, burst int64, now time.Time) (*Bucket, error) {
	p, err := bucket.NewParams(limit, period, burst)
	if err != nil {
		return nil, fmt.Errorf("atomicbucket: %w", err)
	}
	b := &Bucket{base: reading.New(now), capacity: burst}
	if burst == 0 {
		b.capacity = limit
	}
	b.state.Store(bucket.New(p, b.base.Unix()))
	return b, nil
}

// Allow reports whether a request of cost 1 passes at now, and takes its
// token if it does. It is AllowN's verdict alone, without the Decision's
// arithmetic: the call for a hot path.
func (b *Bucket) Allow(now time.Time) bool {
	t := b.base.At(now)
	for {
		s := b.state.Load()
		if allowed, live := s.Take(t, 1); live {
			return allowed
		}
		b.state.CompareAndSwap(s, s.Successor(t))
	}
}

// AllowN decides a request of cost n at now: if the bucket holds n
// tokens, it takes them and the Decision is Allowed; otherwise it takes
// nothing, and RetryAfter is the wait until it will hold them. A cost
// below 1 or above the burst can never pass: its RetryAfter is
// floodgate.Never, as is that of a reading more than the bucket's range
// before New's now.
func (b *Bucket) AllowN(now time.Time, n int64) floodgate.Decision {
	t := b.base.At(now)
	for {
		s := b.state.Load()
		if d, live := s.AllowN(t, n); live {
			return answer(d)
		}
		b.state.CompareAndSwap(s, s.Successor(t))
	}
}

// Peek returns what AllowN(now, 1) would answer, and takes nothing.
func (b *Bucket) Peek(now time.Time) floodgate.Decision {
	t := b.base.At(now)
	for {
		s := b.state.Load()
		if d, live := s.Peek(t); live {
			return answer(d)
		}
		b.state.CompareAndSwap(s, s.Successor(t))
	}
}

// ChargeN takes n tokens at now whatever the bucket holds: a cost already
// spent, which no refusal could undo. A bucket that held fewer is left
// owing the rest, and refuses every request until the debt is paid back
// at the rule's rate. The Decision is the bucket after the charge:
// Allowed, Remaining the whole tokens left (0 while it owes), Owed the
// whole tokens owed, and RetryAfter the wait until a request of cost 1
// could pass.
//
// It returns an error, and charges nothing, for n < 1, and for a charge
// that would leave the bucket owing for longer than its state spans (36
// years of refill for a rule whose interval is a whole number of
// nanoseconds, 39 hours at the finest scale): that error wraps
// floodgate.ErrDebtBound and says how much more may be charged.
func (b *Bucket) ChargeN(now time.Time, n int64) (floodgate.Decision, error) {
	t := b.base.At(now)
	for {
		s := b.state.Load()
		if d, live, err := s.ChargeN(t, n); live {
			if err != nil {
				return floodgate.Decision{}, fmt.Errorf("atomicbucket: %w", err)
			}
			return answer(d), nil
		}
		b.state.CompareAndSwap(s, s.Successor(t))
	}
}

// Refund gives back n tokens that an earlier AllowN or ChargeN took, when
// the work they paid for was not done or cost less: exactly, in debt too,
// so that a charge and its refund at one instant leave the bucket as it
// was. A refund never fills the bucket past its burst. n must be from 1
// to the burst; any other n is an error, and nothing is given back.
func (b *Bucket) Refund(n int64) error {
	if n < 1 || n > b.capacity {
		return fmt.Errorf("atomicbucket: a refund must be from 1 to the burst, %d, got %d", b.capacity, n)
	}
	for {
		s := b.state.Load()
		if s.Refund(n) {
			return nil
		}
		// The state moved its origin: its successor carries the grant.
		// (The reading matters only to a successor after a reset, which
		// no Bucket makes.)
		b.state.CompareAndSwap(s, s.Successor(b.base.Unix()))
	}
}

// answer converts the implementation's Decision field by field.
func answer(d bucket.Decision) floodgate.Decision {
	return floodgate.Decision{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter, Owed: d.Owed}
}
