package memcachelimit

import (
	"errors"
	"fmt"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/floodgate-go/floodgate"
)

// FailureMode says how a Store decides while memcached cannot.
type FailureMode uint8

const (
	// FailLocal, the default, decides with an in-process floodgate
	// limiter for each policy, on the policy's own rule. Each process
	// then applies the rule on its own: with R replicas a client may pass
	// up to R times the rule while memcached is away.
	FailLocal FailureMode = iota
	// FailOpen admits every request while memcached cannot decide; its
	// decisions are Unreached.
	FailOpen
	// FailClosed denies every request while memcached cannot decide,
	// with RetryAfter set to the breaker's probe interval; its decisions
	// are Unreached.
	FailClosed
	// FailError fails every call that memcached cannot decide: it is
	// refused (Unreached, RetryAfter the breaker's probe interval), and
	// its error wraps floodgate.ErrUnreached and memcached's own error,
	// so that the caller chooses what a request is owed (Envoy's
	// failure_mode_deny, for floodgate-rls). Its Timeout method reports
	// a memcached that did not answer in time.
	FailError
)

// String returns the mode's name.
func (m FailureMode) String() string {
	switch m {
	case FailLocal:
		return "FailLocal"
	case FailOpen:
		return "FailOpen"
	case FailClosed:
		return "FailClosed"
	case FailError:
		return "FailError"
	}
	return fmt.Sprintf("FailureMode(%d)", uint8(m))
}

// Config configures a Store (NewStore). Every field is optional.
type Config struct {
	// Prefix begins every key; "" means "floodgate:". It must be a
	// valid piece of a memcached key: at most 128 bytes, none of them a
	// space, a control byte or DEL.
	Prefix string
	// Clock is the time every decision reads, in Unix nanoseconds, which
	// every replica sharing a memcached must share: memcached has no
	// clock of its own (see the package's doc on skew). nil means this
	// machine's wall clock, time.Now().UnixNano(). It also times the
	// breaker, and the FailLocal limiters when set (nil: they read the
	// process's monotonic clock, floodgate.SystemClock, which a step of
	// the wall clock does not move).
	Clock floodgate.Clock
	// Timeout bounds each call that the caller's context does not bound
	// sooner: no round trip starts after it, and a compare-and-swap that
	// keeps losing to other replicas gives up at it. 0 means the
	// client's own Timeout (memcache.DefaultTimeout, 500 ms, when that
	// is 0). Each round trip is bounded by the client's Timeout, which
	// gomemcache applies to every read and write: set it to at most this.
	// A request that waits on its key's round (see the package's doc)
	// waits for the round before it too, so up to about two Timeouts;
	// its context's end is looked at when its round starts.
	Timeout time.Duration
	// FailureMode decides while memcached cannot; the zero value is
	// FailLocal.
	FailureMode FailureMode
	// BreakAfter is how many consecutive failures open the circuit
	// breaker; 0 means 3. A Store has one breaker, whatever its number of
	// policies.
	BreakAfter int
	// ProbeEvery is how long the breaker then stays open before one call
	// probes memcached again; 0 means 250 ms.
	ProbeEvery time.Duration
	// OnError, when set, is called with every error from memcached that
	// the FailureMode answered for, and with every state that could not
	// be read (see Stats.KeyErrors). It runs on the request path.
	OnError func(error)
}

// Stats counts what a Store has done since it was made.
type Stats struct {
	// Calls counts round trips to memcached (a get of several keys is
	// one); Errors, the calls that failed; Timeouts, those of the
	// failures that ran out of time.
	Calls, Errors, Timeouts int64
	// KeyErrors counts the states that a step could not read (bytes that
	// something else wrote under a key of ours): answered by the
	// FailureMode, never written over, and opening the breaker for no
	// one.
	KeyErrors int64
	// CASConflicts counts the writes that another replica's write beat
	// (a cas that found the item changed, an add that found it made): the
	// step was read and decided again.
	CASConflicts int64
	// Fallbacks counts decisions made by the FailureMode; Opens, the
	// times the breaker opened.
	Fallbacks, Opens int64
	// Abandoned counts calls whose caller's context ended before they
	// were decided: refused, and counted against no breaker.
	Abandoned int64
	// RolledBack counts the grants given back because a later ask of
	// the same request refused after they were written (another replica
	// raced the request between its read and its writes).
	RolledBack int64
}

const (
	defaultPrefix     = "floodgate:"
	maxPrefix         = 128
	defaultBreakAfter = 3
	defaultProbeEvery = 250 * time.Millisecond
)

// settings are a Config, checked and with its defaults.
type settings struct {
	prefix     string
	clock      floodgate.Clock
	localClock floodgate.Clock // FailLocal's: Clock, or the process's monotonic clock
	timeout    time.Duration
	mode       FailureMode
	breakAfter int64
	probeEvery int64
	onError    func(error)
}

// wallClock is the default Clock: Unix nanoseconds of this machine.
type wallClock struct{}

func (wallClock) Now() int64 { return time.Now().UnixNano() }

func readConfig(c *memcache.Client, cfg Config) (settings, error) {
	if c == nil {
		return settings{}, errors.New("memcachelimit: NewStore needs a client")
	}
	set := settings{prefix: cfg.Prefix, clock: cfg.Clock, timeout: cfg.Timeout, mode: cfg.FailureMode, onError: cfg.OnError}
	if set.prefix == "" {
		set.prefix = defaultPrefix
	}
	if len(set.prefix) > maxPrefix || !legalKey(set.prefix) {
		return settings{}, fmt.Errorf("memcachelimit: Prefix %q is not a valid start of a memcached key: at most %d bytes, none a space, a control byte or DEL", cfg.Prefix, maxPrefix)
	}
	set.localClock = set.clock
	if set.clock == nil {
		set.clock, set.localClock = wallClock{}, floodgate.SystemClock()
	}
	switch {
	case cfg.Timeout < 0:
		return settings{}, fmt.Errorf("memcachelimit: Timeout must be 0 (the client's) or positive, got %v", cfg.Timeout)
	case cfg.Timeout == 0:
		set.timeout = c.Timeout
		if set.timeout <= 0 {
			set.timeout = memcache.DefaultTimeout
		}
	}
	if cfg.FailureMode > FailError {
		return settings{}, fmt.Errorf("memcachelimit: unknown %v", cfg.FailureMode)
	}
	if cfg.BreakAfter < 0 || cfg.ProbeEvery < 0 {
		return settings{}, fmt.Errorf("memcachelimit: BreakAfter and ProbeEvery must be 0 (the default) or positive, got %d and %v", cfg.BreakAfter, cfg.ProbeEvery)
	}
	set.breakAfter = int64(cfg.BreakAfter)
	if set.breakAfter == 0 {
		set.breakAfter = defaultBreakAfter
	}
	set.probeEvery = int64(cfg.ProbeEvery)
	if set.probeEvery == 0 {
		set.probeEvery = int64(defaultProbeEvery)
	}
	return set, nil
}
