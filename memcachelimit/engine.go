package memcachelimit

import (
	"context"
	"errors"
	"hash/maphash"
	"math"
	"net"
	"slices"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/floodgate-go/floodgate"
)

// maxAsks is the most asks a call takes.
const maxAsks = floodgate.MaxPolicies

// trip is one call's time: its caller's context, and the instant past
// which it starts no round trip (Config.Timeout from the call, or the
// context's deadline if sooner).
type trip struct {
	ctx   context.Context
	until time.Time
}

// errBudget is a call's failure when its Timeout ran out before it was
// decided (a compare-and-swap that kept losing, or slow round trips).
var errBudget = timeoutError{}

type timeoutError struct{}

func (timeoutError) Error() string   { return "memcachelimit: the call's Timeout ran out" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// newTrip is the time of a call made now with ctx.
func (s *Store) newTrip(ctx context.Context) trip {
	return trip{ctx: ctx, until: time.Now().Add(s.set.timeout)}
}

// ready returns why no round trip may start now: the caller's context's
// error, or errBudget; nil when one may.
func (t *trip) ready() error {
	if err := t.ctx.Err(); err != nil {
		return err
	}
	if !time.Now().Before(t.until) {
		return errBudget
	}
	return nil
}

// keyError is a state that a step could not read: its key's, not
// memcached's.
type keyError struct{ err error }

func (e *keyError) Error() string { return "memcachelimit: a key's state: " + e.err.Error() }
func (e *keyError) Unwrap() error { return e.err }

// locks holds the stripes of a call's keys, each once, taken in order so
// that two calls never wait on each other.
type locks struct {
	n  int
	at [2 * maxAsks]uint16
}

// lock takes the stripes of keys.
func (s *Store) lock(l *locks, keys []string) {
	for _, k := range keys {
		if k == "" {
			continue
		}
		i := s.stripe(k)
		if !slices.Contains(l.at[:l.n], i) {
			l.at[l.n] = i
			l.n++
		}
	}
	slices.Sort(l.at[:l.n])
	for _, i := range l.at[:l.n] {
		s.stripes[i].Lock()
	}
}

// stripe is the index of key's lock.
func (s *Store) stripe(key string) uint16 { return uint16(maphash.String(s.seed, key) % numStripes) }

// unlock releases what lock took.
func (s *Store) unlock(l *locks) {
	for _, i := range l.at[:l.n] {
		s.stripes[i].Unlock()
	}
	l.n = 0
}

// fetch reads the items of keys ("" for none) into items, nil for a key
// memcached does not hold, in one round trip.
func (s *Store) fetch(t *trip, keys []string, items []*memcache.Item) error {
	if err := t.ready(); err != nil {
		return err
	}
	var one string
	n := 0
	for _, k := range keys {
		if k != "" {
			one = k
			n++
		}
	}
	clear(items)
	if n == 0 {
		return nil
	}
	s.calls.Add(1)
	if n == 1 {
		it, err := s.c.Get(one)
		switch {
		case err == memcache.ErrCacheMiss:
			return nil
		case err != nil:
			return err
		}
		for i, k := range keys {
			if k == one {
				items[i] = it
			}
		}
		return nil
	}
	var buf [2 * maxAsks]string
	ks := buf[:0]
	for _, k := range keys {
		if k != "" && !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	got, err := s.c.GetMulti(ks)
	if err != nil {
		return err
	}
	for i, k := range keys {
		if k != "" {
			items[i] = got[k] // a key read twice shares its item: it is written once
		}
	}
	return nil
}

// store writes next as key's state, read as it (nil: missing), expiring
// at exp, and reports whether it was written: false when another
// replica's write came first (the caller reads again and decides again).
func (s *Store) store(t *trip, key string, it *memcache.Item, next []byte, exp int32) (bool, error) {
	if err := t.ready(); err != nil {
		return false, err
	}
	s.calls.Add(1)
	var err error
	if it == nil {
		err = s.c.Add(&memcache.Item{Key: key, Value: next, Expiration: exp})
	} else {
		if s.beforeStore != nil {
			s.beforeStore(key)
		}
		it.Value, it.Expiration = next, exp
		err = s.c.CompareAndSwap(it)
	}
	switch err {
	case nil:
		return true, nil
	case memcache.ErrNotStored, memcache.ErrCASConflict, memcache.ErrCacheMiss:
		// An add that found the key made, a cas that found it changed,
		// or (NOT_FOUND) gone: expired, evicted or deleted since it was
		// read.
		s.conflicts.Add(1)
		return false, nil
	}
	return false, err
}

// reread reads key's item alone, after a lost write.
func (s *Store) reread(t *trip, key string) (*memcache.Item, error) {
	var it [1]*memcache.Item
	err := s.fetch(t, []string{key}, it[:])
	return it[0], err
}

// stateOf is an item's bytes, nil for a missing one.
func stateOf(it *memcache.Item) []byte {
	if it == nil {
		return nil
	}
	return it.Value
}

// minTTL is the shortest life an item is given: a state whose rule
// would forget it sooner still costs memcached its bytes this long, so
// that a replica whose clock lags cannot see it vanish early.
const minTTL = 60 // seconds

// maxRelative is the longest expiration memcached reads as relative;
// beyond it, an expiration is an absolute Unix time.
const maxRelative = 30 * 24 * 3600

// expiry is the expiration of a state that is fresh from the instant
// fresh, written at now (both on the Store's Clock): the seconds until
// fresh, rounded up, plus one, and at least minTTL, so that memcached
// never forgets a state before it is fresh; as an absolute Unix time
// past 30 days, and 0 (never) past what memcached's 32 bits hold.
func expiry(fresh, now int64) int32 {
	const second = int64(time.Second)
	d := fresh - now
	if fresh < now {
		d = 0
	}
	if d > math.MaxInt32*second {
		return 0
	}
	secs := (d+second-1)/second + 1
	secs = max(secs, minTTL)
	if secs <= maxRelative {
		return int32(secs)
	}
	abs := time.Now().Unix() + secs
	if abs > math.MaxInt32 {
		return 0
	}
	return int32(abs)
}

// Kinds of failure (see failed).
type errKind uint8

const (
	otherErr errKind = iota
	timeoutErr
	keyErr
)

// failed counts a call that failed with err, by kind, and returns the
// kind.
func (s *Store) failed(err error) errKind {
	s.errs.Add(1)
	var ke *keyError
	switch {
	case errors.As(err, &ke):
		s.keyErrs.Add(1)
		return keyErr
	case isTimeout(err):
		s.timeouts.Add(1)
		return timeoutErr
	}
	s.otherErrs.Add(1)
	return otherErr
}

// isTimeout reports whether err is a round trip running out of time.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ce *memcache.ConnectTimeoutError
	if errors.As(err, &ce) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// What became of a call that guarded ran.
type outcome uint8

const (
	answered  outcome = iota // memcached answered: the answer stands
	abandoned                // the caller's context ended first
	unreached                // memcached did not answer, or the breaker is open: the FailureMode decides
)

// errBreakerOpen is why a call was not sent.
var errBreakerOpen = errors.New("the circuit breaker is open")

// guarded runs fn, a call's round trips, under the Store's breaker: a
// caller whose context has ended sends nothing; an open breaker sends
// nothing; an answer closes the breaker; a caller's deadline or
// cancellation is the caller's, and counts against no breaker; any other
// failure is counted, tried against the breaker (a state that could not
// be read is one key's, not memcached's), and given to OnError.
func (s *Store) guarded(ctx context.Context, fn func(t *trip) error) (outcome, error) {
	return s.guardedIn(ctx, false, fn)
}

// guardedIn is guarded; inside says that the call runs within another
// guarded call (a request of several asks writing through its keys'
// groups), which passed the breaker already: it does not ask the
// breaker again, so that a probe's request is not refused by its own
// probe. What it fails with reaches the outer call as a counted error,
// which that call does not count again.
func (s *Store) guardedIn(ctx context.Context, inside bool, fn func(t *trip) error) (outcome, error) {
	if err := ctx.Err(); err != nil {
		s.abandoned.Add(1)
		return abandoned, err
	}
	probe := false
	if !inside {
		var ok bool
		if probe, ok = s.breaker.enter(s.set.clock.Now()); !ok {
			return unreached, errBreakerOpen
		}
	}
	t := s.newTrip(ctx)
	err := fn(&t)
	if err == nil {
		s.breaker.succeed(probe)
		return answered, nil
	}
	if c, ok := err.(counted); ok { // an inner call's failure, counted there
		s.breaker.abandon(probe)
		return unreached, c.error
	}
	if cerr := ctx.Err(); cerr != nil && (errors.Is(err, cerr) || err == errBudget) {
		s.breaker.abandon(probe)
		s.abandoned.Add(1)
		return abandoned, cerr
	}
	switch s.failed(err) {
	case keyErr:
		s.breaker.succeed(probe)
	default:
		s.breaker.last.Store(&failure{err: err, timeout: isTimeout(err)})
		if s.breaker.fail(probe, s.set.clock.Now()) {
			s.opens.Add(1)
		}
	}
	if s.set.onError != nil {
		s.set.onError(err)
	}
	return unreached, err
}

// counted is the failure of a call made within another (see
// guardedIn), counted already by the inner call.
type counted struct{ error }

func (c counted) Unwrap() error { return c.error }
