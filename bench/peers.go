package bench

import (
	"cmp"
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/reference"
	"github.com/floodgate-go/floodgate/internal/testhook"
	"github.com/juju/ratelimit"
	"github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
	uber "go.uber.org/ratelimit"
	"golang.org/x/time/rate"
)

// Rate is the rule every implementation is built with: Limit requests per
// Period, with bursts of up to Limit (the bucket starts full).
type Rate struct {
	Limit  int64
	Period time.Duration
}

// Plenty is the rule under which a benchmark measures the grant path. It
// must never deny at any speed a machine can run a benchmark, on this
// 2-core VM or on the fastest desktop, so it is not sized to any measured
// rate. No machine calls Allow on one key more than once every 2 ns (one
// call is a hash, a clock read and a locked CAS: the CAS alone takes
// longer on any core, and calls on one key from many cores queue on its
// cache line), and floodgate refuses any rule faster than one request a
// nanosecond. So each rule is either at that ceiling, twice the fastest
// machine, or starts with more than a run can spend:
//
//   - Plenty itself, for the buckets, the fixed window and every peer: a
//     trillion an hour, with a burst of a trillion (the bucket starts
//     full; the fixed window's hour holds a trillion). At one call every
//     2 ns a key takes 2,000 s to spend it, and no benchmark runs for more
//     than a few seconds on one limiter. The hour matters for
//     go-limiter, whose memorystore refills delta × Interval/Tokens tokens
//     after delta ticks, capped at Tokens: above √Interval tokens (1,000
//     for 1ms) it refills less than configured, and a "1,000,000 per ms"
//     rule refuses nearly every call after the first millisecond.
//   - plentyCounter, for the sliding counter, whose Limit is at most
//     8,388,606: that many per as many nanoseconds, one request a
//     nanosecond, the counter's ceiling. (Its windows are then 8.4 ms
//     long; the counter refuses, by design, a reading from a window its
//     key has already left, which a goroutine preempted across a window
//     boundary can bring: those rare denials are reported as denied/op.)
//   - plentyLog, for the sliding log, which keeps one entry per admission
//     in its window: a million per millisecond, also one a nanosecond,
//     with a window short enough that a hot key's log stays small.
//
// TestPlentyOutrunsAnyMachine checks each at one request every 2 ns.
var Plenty = Rate{Limit: 1_000_000_000_000, Period: time.Hour}

// plentyCounter and plentyLog stand for Plenty with the sliding counter
// and the sliding log (see Plenty).
var (
	plentyCounter = Rate{Limit: maxCounterLimit, Period: maxCounterLimit * time.Nanosecond}
	plentyLog     = Rate{Limit: 1_000_000, Period: time.Millisecond}
)

// maxCounterLimit is the largest Limit the sliding counter holds.
const maxCounterLimit = 8_388_606

// Scarce is one request an hour: after the first request, every call is a
// denial.
var Scarce = Rate{Limit: 1, Period: time.Hour}

// Limiter is what every implementation is driven through: one request for
// key, allowed or not.
type Limiter interface {
	Allow(key string) bool
}

// Options is how a scenario builds an implementation.
type Options struct {
	Rate Rate
	// IdleTTL > 0 asks for idle keys to be dropped after about that long,
	// by whatever means the implementation has.
	IdleTTL time.Duration
	// Global, if not nil, is a cap over all keys together.
	Global *Rate
	// MaxKeys > 0 asks for at most that many keys to be held, by whatever
	// means the implementation has.
	MaxKeys int
}

// errUnsupported is returned by New for options an implementation lacks.
var errUnsupported = errors.New("not supported by this implementation")

// Impl is one implementation under test. New returns a limiter and a
// function that releases it (stops its goroutines), or errUnsupported.
type Impl struct {
	Name string
	// PerKey is false for peers that hold one limit only; those are measured
	// on the hot-key scenarios, where the key is ignored.
	PerKey bool
	// Denies is false for peers that cannot refuse (go.uber.org/ratelimit
	// only waits); those are left out of the denial scenario.
	Denies bool
	New    func(o Options) (Limiter, func(), error)
}

// Floodgate variants: every algorithm, lock-free and its mutex twin, on the
// SystemClock; and the same on a coarse clock ("-coarse", 1ms resolution).
var floodgateAlgorithms = []struct{ short, lockFree, mutex string }{
	{"tb", floodgate.TokenBucket, testhook.TokenBucketMutex},
	{"lb", floodgate.LeakyBucket, testhook.LeakyBucketMutex},
	{"fw", floodgate.FixedWindow, testhook.FixedWindowMutex},
	{"sc", floodgate.SlidingCounter, testhook.SlidingCounterMutex},
	{"sl", floodgate.SlidingLog, testhook.SlidingLogMutex},
}

// CoarseResolution is the coarse clock's tick in the "-coarse" variants.
const CoarseResolution = time.Millisecond

// floodgateImpl is floodgate with algorithm alg, on the coarse clock or
// not; variant, if not nil, changes the Config further.
func floodgateImpl(name, alg string, coarse bool, variant func(floodgate.Config) floodgate.Config) Impl {
	return builtOn(name, alg, coarse, variant, func(c floodgate.Config) (closer, error) { return floodgate.New(c) })
}

// closer is a Limiter that holds goroutines or resources until Close.
type closer interface {
	Limiter
	Close() error
}

// builtOn is the implementation that make builds from the Config of
// algorithm alg for each scenario's Options: floodgate's Limiter, or the
// reference limiter.
func builtOn(name, alg string, coarse bool, variant func(floodgate.Config) floodgate.Config, make func(floodgate.Config) (closer, error)) Impl {
	return Impl{Name: name, PerKey: true, Denies: true,
		New: func(o Options) (Limiter, func(), error) {
			if o.Rate == Plenty {
				o.Rate = plentyFor(alg)
			}
			cfg := floodgate.Config{
				Algorithm: alg,
				Rule:      floodgate.Rule{Limit: o.Rate.Limit, Period: o.Rate.Period},
				IdleTTL:   cmp.Or(o.IdleTTL, floodgate.Never), // what was asked, and no more
				MaxKeys:   cmp.Or(o.MaxKeys, floodgate.Unbounded),
			}
			cfg = testhook.Twins(cfg).(floodgate.Config) // alg may name a mutex twin
			if variant != nil {
				cfg = variant(cfg)
			}
			if g := o.Global; g != nil {
				cfg.Global = &floodgate.Rule{Limit: g.Limit, Period: g.Period}
			}
			stop := func() {}
			if coarse {
				c := floodgate.NewCoarseClock(CoarseResolution)
				cfg.Clock = c
				stop = c.Stop
			}
			l, err := make(cfg)
			if err != nil {
				stop()
				return nil, nil, err
			}
			return l, func() { l.Close(); stop() }, nil
		}}
}

// plentyFor is Plenty as algorithm alg can hold it.
func plentyFor(alg string) Rate {
	switch alg {
	case floodgate.SlidingCounter, testhook.SlidingCounterMutex:
		return plentyCounter
	case floodgate.SlidingLog, testhook.SlidingLogMutex:
		return plentyLog
	}
	return Plenty
}

// Floodgates returns every floodgate variant: "floodgate-tb",
// "floodgate-tb-mutex", "floodgate-tb-coarse", "floodgate-tb-mutex-coarse"
// and the same for lb (leaky bucket), fw (fixed window), sc (sliding
// counter) and sl (sliding log).
func Floodgates() []Impl {
	var out []Impl
	for _, a := range floodgateAlgorithms {
		for _, coarse := range []bool{false, true} {
			suffix := ""
			if coarse {
				suffix = "-coarse"
			}
			out = append(out,
				floodgateImpl("floodgate-"+a.short+suffix, a.lockFree, coarse, nil),
				floodgateImpl("floodgate-"+a.short+"-mutex"+suffix, a.mutex, coarse, nil))
		}
	}
	return out
}

// Variants returns floodgate-tb in the forms that show what one choice
// costs or gains, each on the SystemClock and the coarse clock:
// "-xsync" is the token bucket in the reference limiter, which keeps each
// key's bucket as an object of its own in the reference registry (sharded
// xsync maps) instead of a word in the flat table; "-stats" counts every
// decision (Config.Stats).
func Variants() []Impl {
	var out []Impl
	for _, coarse := range []bool{false, true} {
		suffix := ""
		if coarse {
			suffix = "-coarse"
		}
		xsync := builtOn("floodgate-tb-xsync"+suffix, floodgate.TokenBucket, coarse, nil, func(c floodgate.Config) (closer, error) {
			if c.MaxKeys != floodgate.Unbounded {
				return nil, errUnsupported // the reference limiter has no bound
			}
			return reference.New(c)
		})
		out = append(out, xsync,
			floodgateImpl("floodgate-tb-stats"+suffix, floodgate.TokenBucket, coarse, func(c floodgate.Config) floodgate.Config {
				c.Stats = true
				return c
			}))
	}
	return out
}

// Peers returns the other libraries, each driven as its documentation
// shows.
func Peers() []Impl {
	return []Impl{
		{Name: "xtime", Denies: true, New: newXTime},
		{Name: "xtime-syncmap", PerKey: true, Denies: true, New: newXTimeSyncMap},
		{Name: "golimiter", PerKey: true, Denies: true, New: newGoLimiter},
		{Name: "throttled", PerKey: true, Denies: true, New: newThrottled},
		{Name: "ulule", PerKey: true, Denies: true, New: newUlule},
		{Name: "juju", Denies: true, New: newJuju},
		{Name: "uber", New: newUber},
	}
}

// ByName returns the implementations with the given names, in that order.
func ByName(names ...string) []Impl {
	all := append(append(Floodgates(), append(Variants(), tscImpl())...), Peers()...)
	out := make([]Impl, 0, len(names))
	for _, n := range names {
		found := false
		for _, i := range all {
			if i.Name == n {
				out = append(out, i)
				found = true
				break
			}
		}
		if !found {
			panic("bench: no implementation named " + n)
		}
	}
	return out
}

// singleKey rejects the options a one-limit peer cannot honour.
func singleKey(o Options) error {
	if o.IdleTTL > 0 || o.Global != nil || o.MaxKeys > 0 {
		return errUnsupported
	}
	return nil
}

// Floor is no limiter at all: it reads the key's bytes and answers true.
// On the key-set scenarios it measures the harness itself (picking a key,
// touching its string), so that what each limiter adds can be read off as
// the difference. It is not a peer and has no ratio in the summary.
var Floor = Impl{Name: "floor", PerKey: true, New: func(Options) (Limiter, func(), error) {
	return floor{}, func() {}, nil
}}

type floor struct{}

func (floor) Allow(key string) bool { return len(key) > 0 && key[len(key)-1] != 0 }

// FloorCAS is the least any limiter that keeps a word per key can do: it
// hashes the key (hash/maphash) to one word of a table as large as
// floodgate's at 1M keys (36 MB) and CASes it, with no identity check,
// no probing and no clock. At 1M keys the word is a cache miss that
// depends on the key's own: its figure is the floor of the key-set
// scenarios under one miss per lookup. It is not a limiter.
var FloorCAS = Impl{Name: "floor-cas", PerKey: true, New: func(Options) (Limiter, func(), error) {
	return &floorCAS{words: make([]atomic.Uint64, 36<<20/8), seed: maphash.MakeSeed()}, func() {}, nil
}}

type floorCAS struct {
	words []atomic.Uint64
	seed  maphash.Seed
}

func (f *floorCAS) Allow(key string) bool {
	w := &f.words[maphash.String(f.seed, key)%uint64(len(f.words))]
	v := w.Load()
	w.CompareAndSwap(v, v+1)
	return true
}

// FloorCASClock is FloorCAS with a read of the monotonic clock on every
// call, as a limiter on floodgate.SystemClock makes: the least such a
// limiter can do. The read is time.Since, Go's monotonic clock, whose
// ordered counter read waits for the loads before it; its figure beside
// FloorCAS's shows what that wait costs when every call misses.
var FloorCASClock = Impl{Name: "floor-cas-clock", PerKey: true, New: func(Options) (Limiter, func(), error) {
	return &floorCASClock{floorCAS{words: make([]atomic.Uint64, 36<<20/8), seed: maphash.MakeSeed()}, time.Now()}, func() {}, nil
}}

type floorCASClock struct {
	floorCAS
	base time.Time
}

func (f *floorCASClock) Allow(key string) bool {
	now := uint64(time.Since(f.base))
	w := &f.words[maphash.String(f.seed, key)%uint64(len(f.words))]
	v := w.Load()
	w.CompareAndSwap(v, max(v, now)+1)
	return true
}

// --- golang.org/x/time/rate ---

func xtimeLimiter(r Rate) *rate.Limiter {
	return rate.NewLimiter(rate.Limit(float64(r.Limit)/r.Period.Seconds()), int(r.Limit))
}

type xtimeSingle struct{ l *rate.Limiter }

func (x xtimeSingle) Allow(string) bool { return x.l.Allow() }

func newXTime(o Options) (Limiter, func(), error) {
	if err := singleKey(o); err != nil {
		return nil, nil, err
	}
	return xtimeSingle{xtimeLimiter(o.Rate)}, func() {}, nil
}

// xtimeSyncMap is the pattern most services write around x/time/rate: a
// sync.Map of *rate.Limiter, each made on a key's first request. A global
// cap is a second rate.Limiter asked after the key's; the key's token is
// not given back when the cap refuses (that would take Reserve and Cancel,
// which few callers write).
type xtimeSyncMap struct {
	m      sync.Map
	rate   Rate
	global *rate.Limiter
}

func (x *xtimeSyncMap) Allow(key string) bool {
	v, ok := x.m.Load(key)
	if !ok {
		v, _ = x.m.LoadOrStore(key, xtimeLimiter(x.rate))
	}
	if !v.(*rate.Limiter).Allow() {
		return false
	}
	return x.global == nil || x.global.Allow()
}

func newXTimeSyncMap(o Options) (Limiter, func(), error) {
	if o.IdleTTL > 0 || o.MaxKeys > 0 {
		return nil, nil, errUnsupported // a sync.Map of limiters has no eviction
	}
	x := &xtimeSyncMap{rate: o.Rate}
	if o.Global != nil {
		x.global = xtimeLimiter(*o.Global)
	}
	return x, func() {}, nil
}

// --- github.com/sethvargo/go-limiter ---

type goLimiter struct{ s, global limiter.Store }

func (g goLimiter) Allow(key string) bool {
	_, _, _, ok, err := g.s.Take(context.Background(), key)
	if !ok || err != nil {
		return false
	}
	if g.global == nil {
		return true
	}
	_, _, _, ok, err = g.global.Take(context.Background(), "global")
	return ok && err == nil
}

func newGoLimiter(o Options) (Limiter, func(), error) {
	if o.MaxKeys > 0 {
		return nil, nil, errUnsupported // its memorystore has no bound on keys
	}
	cfg := &memorystore.Config{Tokens: uint64(o.Rate.Limit), Interval: o.Rate.Period}
	if o.IdleTTL > 0 {
		cfg.SweepInterval, cfg.SweepMinTTL = o.IdleTTL/2, o.IdleTTL
	}
	s, err := memorystore.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	g := goLimiter{s: s}
	if o.Global != nil {
		if g.global, err = memorystore.New(&memorystore.Config{Tokens: uint64(o.Global.Limit), Interval: o.Global.Period}); err != nil {
			return nil, nil, err
		}
	}
	return g, func() {
		s.Close(context.Background())
		if g.global != nil {
			g.global.Close(context.Background())
		}
	}, nil
}

// --- github.com/throttled/throttled/v2 ---

type throttledGCRA struct{ l, global *throttled.GCRARateLimiterCtx }

func (t throttledGCRA) Allow(key string) bool {
	limited, _, err := t.l.RateLimitCtx(context.Background(), key, 1)
	if limited || err != nil {
		return false
	}
	if t.global == nil {
		return true
	}
	limited, _, err = t.global.RateLimitCtx(context.Background(), "global", 1)
	return !limited && err == nil
}

// throttledMaxKeys bounds the memstore when keys must be evicted: it then
// keeps the most recently used keys in an LRU list.
const throttledMaxKeys = 1 << 16

func throttledLimiter(r Rate, maxKeys int) (*throttled.GCRARateLimiterCtx, error) {
	st, err := memstore.NewCtx(maxKeys)
	if err != nil {
		return nil, err
	}
	l, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
		MaxRate:  throttled.PerDuration(int(r.Limit), r.Period),
		MaxBurst: int(r.Limit) - 1, // throttled admits MaxBurst+1 at once
	})
	if err != nil {
		return nil, err
	}
	// By default a call that loses its CAS 10 times in a row returns an
	// error instead of a decision, which goroutines contending on one key
	// meet within a second. A user who met that error would raise the
	// limit, so the adapter does: every call ends in a decision.
	l.SetMaxCASAttemptsLimit(1 << 20)
	return l, nil
}

// newThrottled uses an unbounded memstore (maxKeys 0: a map of atomic
// words under a RWMutex), the leanest of its stores, unless idle keys must
// go or keys are bounded: then the LRU-bounded one, which is how throttled
// evicts.
func newThrottled(o Options) (Limiter, func(), error) {
	maxKeys := 0
	switch {
	case o.MaxKeys > 0:
		maxKeys = o.MaxKeys
	case o.IdleTTL > 0:
		maxKeys = throttledMaxKeys
	}
	l, err := throttledLimiter(o.Rate, maxKeys)
	if err != nil {
		return nil, nil, err
	}
	t := throttledGCRA{l: l}
	if o.Global != nil {
		if t.global, err = throttledLimiter(*o.Global, 0); err != nil {
			return nil, nil, err
		}
	}
	return t, func() {}, nil
}

// --- github.com/ulule/limiter/v3 ---

type ululeLimiter struct{ l *ulule.Limiter }

func (u ululeLimiter) Allow(key string) bool {
	c, err := u.l.Get(context.Background(), key)
	return err == nil && !c.Reached
}

func newUlule(o Options) (Limiter, func(), error) {
	if o.Global != nil || o.MaxKeys > 0 {
		return nil, nil, errUnsupported
	}
	opts := ulule.StoreOptions{Prefix: ulule.DefaultPrefix, CleanUpInterval: ulule.DefaultCleanUpInterval}
	if o.IdleTTL > 0 {
		opts.CleanUpInterval = o.IdleTTL
	}
	st := ululememory.NewStoreWithOptions(opts)
	return ululeLimiter{ulule.New(st, ulule.Rate{Period: o.Rate.Period, Limit: o.Rate.Limit})}, func() {}, nil
}

// --- github.com/juju/ratelimit ---

type jujuBucket struct{ b *ratelimit.Bucket }

func (j jujuBucket) Allow(string) bool { return j.b.TakeAvailable(1) == 1 }

func newJuju(o Options) (Limiter, func(), error) {
	if err := singleKey(o); err != nil {
		return nil, nil, err
	}
	return jujuBucket{ratelimit.NewBucketWithRate(float64(o.Rate.Limit)/o.Rate.Period.Seconds(), o.Rate.Limit)}, func() {}, nil
}

// --- go.uber.org/ratelimit ---

// uberLimiter calls Take, which waits until the next request may pass and
// never refuses. With Plenty (one request per nanosecond) no call ever has
// to wait, so what is measured is its bookkeeping, not its sleeping.
type uberLimiter struct{ l uber.Limiter }

func (u uberLimiter) Allow(string) bool { u.l.Take(); return true }

func newUber(o Options) (Limiter, func(), error) {
	if err := singleKey(o); err != nil {
		return nil, nil, err
	}
	if o.Rate.Period/time.Duration(o.Rate.Limit) > time.Microsecond {
		return nil, nil, errUnsupported // it would sleep: only waits, never refuses
	}
	return uberLimiter{uber.New(int(o.Rate.Limit), uber.Per(o.Rate.Period))}, func() {}, nil
}
