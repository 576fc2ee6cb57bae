package policy

import (
	"fmt"
	"slices"
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
}

// Common is what every Limiter of one middleware shares, as the
// middleware's Config gives it: MaxKeys 0 means DefaultMaxKeys of each
// policy and a negative one no bound; IdleTTL 0 means DefaultIdleTTL and a
// negative one no sweeper.
type Common struct {
	// Store, if set, keeps every policy's state instead of a Limiter in
	// process (Clock, MaxKeys and IdleTTL are then the Store's business).
	Store floodgate.Store
	// Clock is every Limiter's clock; nil is the SystemClock.
	Clock floodgate.Clock
	// MaxKeys bounds each Limiter's keys: 0 is DefaultMaxKeys, negative
	// none.
	MaxKeys int
	// IdleTTL is each Limiter's sweep of idle keys: 0 is DefaultIdleTTL,
	// negative none.
	IdleTTL time.Duration
}

// DefaultIdleTTL is how long a client's state must have been what a new
// client's would be before the middlewares forget it by default. Any
// value keeps the limit exact: a forgotten state was a new one, so
// forgetting it changes no decision. A minute keeps the sweep rare.
const DefaultIdleTTL = time.Minute

// DefaultMemory is what one policy's clients may hold at most by default:
// DefaultMaxKeys bounds the keys so that their states, the table around
// them and MaxKeys's sketch stay within it.
const DefaultMemory = 64 << 20

// Bytes a key of the bound costs at most (measured by the middlewares'
// heap tests): a state inline in the table, and one held as an object
// (the sliding log's, beside 16 bytes per entry it keeps), each with its
// share of the table and 8 bytes of sketch.
const (
	inlineKeyBytes = 64
	objectKeyBytes = 512
	logEntryBytes  = 16
)

// DefaultMaxKeys is the bound on the keys of a policy that keeps them
// within DefaultMemory. A sliding log keeps an entry per request in its
// window, up to Limit, so its bound shrinks with Limit; it is never below
// 1,024, and so a log whose Limit is in the tens of thousands may hold
// more than DefaultMemory: set MaxKeys for it.
func DefaultMaxKeys(s Spec) int {
	per := inlineKeyBytes
	switch {
	case s.Algorithm == floodgate.SlidingLog:
		per = objectKeyBytes + logEntryBytes*int(min(s.Rule.Limit, DefaultMemory))
	case !builtin(s.Algorithm):
		per = objectKeyBytes
	}
	return max(1024, DefaultMemory/per)
}

// Build1 makes the Limiter of one policy, with c's bounds: MaxKeys 0 is
// DefaultMaxKeys(s), IdleTTL 0 is DefaultIdleTTL, and a negative one of
// either none.
func Build1(s Spec, c Common) (*floodgate.Limiter, error) {
	maxKeys, ttl := c.MaxKeys, c.IdleTTL
	switch {
	case maxKeys == 0:
		maxKeys = DefaultMaxKeys(s)
	case maxKeys < 0:
		maxKeys = 0 // no bound, on purpose
	}
	switch {
	case ttl == 0:
		ttl = DefaultIdleTTL
	case ttl < 0:
		ttl = 0 // no sweeper, on purpose
	}
	if maxKeys > 0 && !builtin(s.Algorithm) && slices.Contains(floodgate.Algorithms(), s.Algorithm) {
		// floodgate refuses to bound what it cannot evict exactly, and its
		// error names its own knob, MaxKeys 0, which here means the
		// default bound: name the middleware's instead.
		return nil, fmt.Errorf("policy %q: algorithm %q is registered, and MaxKeys cannot bound it: it cannot remember what an evicted key held; "+
			"set the middleware's Config.MaxKeys to -1 (no bound: its 0 means the default bound) and bound the keys with IdleTTL", s.Name, s.Algorithm)
	}
	l, err := floodgate.New(floodgate.Config{Algorithm: s.Algorithm, Rule: s.Rule,
		Clock: c.Clock, MaxKeys: maxKeys, IdleTTL: ttl})
	if err != nil {
		return nil, fmt.Errorf("policy %q: %w", s.Name, err)
	}
	return l, nil
}

// builtin reports whether name is one of floodgate's own algorithms ("" is
// the token bucket): the ones MaxKeys can bound.
func builtin(name string) bool {
	switch name {
	case "", floodgate.TokenBucket, floodgate.LeakyBucket, floodgate.FixedWindow, floodgate.SlidingCounter, floodgate.SlidingLog:
		return true
	}
	return false
}
