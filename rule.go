package floodgate

import (
	"fmt"
	"time"
)

// Rule is a limit of Limit requests per Period, with bursts of up to Burst.
//
// For the token bucket, Burst is the bucket's capacity (0 means Limit) and
// the bucket refills continuously at Limit per Period. Supported range:
// Limit ≥ 1, Period > 0, Burst ≥ 0, no more than one token per nanosecond
// (Limit ≤ Period in nanoseconds), and a burst window Burst × Period / Limit
// of at most 2^60 ticks of the bucket's fixed point (at least 16 years when
// Period/Limit is a whole number of nanoseconds; 30 days at the finest
// scale, 1/8192 ns). Every rule from 1 to 1,000,000 per 1ms to 30 days with
// Burst 0 is inside it. New reports a rule outside the range as an error;
// nothing is clamped.
type Rule struct {
	Limit  int64         // N requests ...
	Period time.Duration // ... per Period T
	Burst  int64         // bucket capacity; 0 means Limit
}

// Capacity returns the largest cost one request may take: Burst, or Limit
// when Burst is 0.
func (r Rule) Capacity() int64 {
	if r.Burst == 0 {
		return r.Limit
	}
	return r.Burst
}

// Validate reports the first way in which r is malformed, whatever the
// algorithm: a Limit or Period that is not positive, or a negative Burst.
// Each algorithm adds its own range checks when New builds it.
func (r Rule) Validate() error {
	switch {
	case r.Limit <= 0:
		return fmt.Errorf("Rule.Limit must be at least 1, got %d", r.Limit)
	case r.Period <= 0:
		return fmt.Errorf("Rule.Period must be positive, got %v", r.Period)
	case r.Burst < 0:
		return fmt.Errorf("Rule.Burst must be 0 (meaning Limit) or positive, got %d", r.Burst)
	}
	return nil
}
