package redislimit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/internal/countinfo"
	"github.com/floodgate-go/floodgate/internal/flat"
	"github.com/floodgate-go/floodgate/internal/tally"
	"github.com/redis/go-redis/v9"
)

// Store keeps a set of policies on Redis, all through one engine: it is
// the floodgate.Store that httplimit, grpclimit and Envoy's rate-limit
// service (package rls) take, so that every replica of a service shares
// one limit per client and policy. Make one per Redis client with
// NewStore, and Close it when done.
//
// The engine is the Store's: one circuit breaker, one pipeline that
// sends the calls in flight at once of every policy and key together,
// one timer for the callers whose context cannot end, and in lease mode
// one bookkeeper, a goroutine that renews, returns and forgets every
// policy's leases by their deadlines. A policy is its rule and its
// scripts, and holds no goroutine, timer or channel: a policy that no
// request asks for costs a few hundred bytes and nothing else. Every
// setting of Config means for each policy what it means for a Limiter,
// which is a Store of one policy: Timeout, FailureMode (FailLocal with
// the policy's own rule), the breaker, Lease.
//
// A policy's keys are "<Prefix>:<policy>:<algorithm>:{<client>}", where
// <policy> is 16 hex digits of a hash of the name it was made with, and
// <client> the 32 of the client's hash: the braces put every policy's key
// of one client in one Redis Cluster slot (see Config.HashTag for keys of
// several clients). A key takes 168 bytes for a bucket or a window
// (MEMORY USAGE; a log's, 16 more than a Limiter's log key), and expires
// as a Limiter's does: a client that rotates its address costs Redis
// that much per address and policy, for as long as the rule would
// remember it.
//
// A request is decided by all of its asks in one round trip (see
// Decide): with one ask, by its policy's script; with several, by one
// script over their keys that runs each policy's own script dry, then
// charges them all only if they all admit, at one instant of Redis's
// clock. A refusal charges nothing, at no moment (Redis runs a script
// whole, and no other replica sees its keys in between), and costs Redis
// one run of each policy's script; an admission of P asks costs 2P-1
// runs, every one but the last dry-run first, in the same round trip. In
// lease mode a request whose every ask holds a lease for its key is
// decided in process, with no round trip, and charged all or nothing
// there (a unit one policy took for a refused request goes back to its
// lease); any other is decided by that one script, and the policies that
// could not serve it ask for a lease ahead, so that the client's next
// requests find one.
type Store struct {
	client  redis.UniversalClient
	set     settings
	breaker breaker
	batch   batcher
	budget  budgets
	lease   *leases                              // nil unless lease mode is on
	results *tally.Counts                        // the decisions, by result
	hasher  *flat.Hasher                         // lease mode's keys
	margin  int64                                // ms added to each key's TTL
	local   atomic.Pointer[floodgate.LocalStore] // FailLocal's policies in process, made at the first fallback
	localMu sync.Mutex

	// redisClock is nil in production, where the scripts read Redis's
	// clock (TIME) and lease mode this machine's own clocks. A test sets
	// it to have both take its now instead: the one place the choice is
	// made (see scriptNow and leaseNow).
	redisClock floodgate.Clock
	// wallClock, set only with redisClock, is the test's stand-in for a
	// clock that counts a suspended host's time, which lease mode checks
	// its batches against (see leaseNow).
	wallClock floodgate.Clock

	offset   atomic.Int64 // Redis's clock minus this machine's, µs, at the last TIME
	offsetAt atomic.Int64 // when that TIME was read (Unix ns of this machine); 0 before any

	calls, errs, timeouts, loads, fallbacks, opens, keyErrs, abandoned, refunded atomic.Int64
	otherErrs                                                                    atomic.Int64 // the errs neither timeouts nor keyErrs
	reloaded, reloads                                                            atomic.Int64 // the last cluster reload (clock ns), and their count

	// The in-flight policies' slots (see SlotPolicy): those this Store
	// holds, which it renews, and where their members' names come from.
	holding  holding
	slotBase time.Time // slotNow counts from here
	slotOnce sync.Once
	slotID   string
	slotSeq  atomic.Uint64

	mu         sync.Mutex
	live       map[string]*policy     // the live policies, by name
	slotLive   map[string]*slotPolicy // the live in-flight policies, by name
	standalone bool                   // a Limiter's: its one policy's keys carry no policy hash and no braces
	refunds    sync.WaitGroup         // refunds and slot releases in flight, which Close waits for
	closed     atomic.Bool
	closeOnce  sync.Once
	closeErr   error
}

// NewStore returns a Store on client, whose policies share cfg.
// Algorithm, Rule and Local must be unset: each policy brings its own
// algorithm and rule (and FailLocal applies that rule in process). Every
// other field is validated as New validates it. Nothing is sent to Redis
// before the first decision.
func NewStore(client redis.UniversalClient, cfg Config) (*Store, error) {
	switch {
	case cfg.Algorithm != "":
		return nil, fmt.Errorf("redislimit: NewStore: Algorithm is %q, and each policy brings its own: leave it empty", cfg.Algorithm)
	case cfg.Rule != floodgate.Rule{}:
		return nil, fmt.Errorf("redislimit: NewStore: Rule is %+v, and each policy brings its own: leave it zero", cfg.Rule)
	case cfg.Local != nil:
		return nil, errors.New("redislimit: NewStore: Local is set; FailLocal applies each policy's own rule in process: leave it nil")
	}
	set, err := readConfig(client, cfg)
	if err != nil {
		return nil, err
	}
	return newStore(client, set, false, nil), nil
}

// newStore is the Store of client and set; a Limiter's if standalone.
// setup, when not nil, runs before the bookkeeper starts: the tests' seam
// to put in their clocks.
func newStore(client redis.UniversalClient, set settings, standalone bool, setup func(*Store)) *Store {
	s := &Store{client: client, set: set, results: tally.New(int(numResults)), hasher: flat.NewHasher(),
		margin: ttlMargin, live: map[string]*policy{}, standalone: standalone}
	s.batch.s = s
	s.holding.s, s.holding.stop, s.slotBase = s, make(chan struct{}), time.Now()
	s.budget.d, s.budget.grain = set.timeout, set.timeout/8
	s.breaker.after, s.breaker.every = set.breakAfter, set.probeEvery
	s.breaker.openUntil.Store(closed)
	if set.lease.Max > 0 {
		s.lease = newLeases(s, set.lease)
	}
	if setup != nil {
		setup(s)
	}
	if s.lease != nil && !s.lease.inline {
		s.lease.running = true
		go s.lease.bookkeeper()
	}
	return s
}

// Policy returns a new policy named name, algorithm applied to rule per
// client. It is an error to give the name of a live policy of the Store,
// what New refuses for algorithm and rule (see CheckRule), or to call it
// after Close.
func (s *Store) Policy(name, algorithm string, rule floodgate.Rule) (floodgate.StorePolicy, error) {
	return s.newPolicy(name, algorithm, rule, nil)
}

// newPolicy is Policy, with localRule FailLocal's rule when it is not the
// policy's own (a Limiter's Config.Local).
func (s *Store) newPolicy(name, algorithm string, rule floodgate.Rule, localRule *floodgate.Rule) (*policy, error) {
	if algorithm == "" {
		algorithm = floodgate.TokenBucket
	}
	sc, kind, interval, err := parseRule(algorithm, rule)
	if err != nil {
		return nil, err
	}
	if s.lease != nil {
		if err := s.lease.check(kind, rule.Capacity(), interval); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil, errors.New("redislimit: Policy after Close")
	}
	if s.live[name] != nil || s.slotLive[name] != nil {
		return nil, fmt.Errorf("redislimit: a live policy of the Store is named %q already", name)
	}
	p := &policy{s: s, name: name, alg: algorithm, script: sc, kind: kind, localRule: localRule, seed: rand.Uint64()}
	if s.standalone {
		p.keyHead = s.set.prefix + ":" + algorithm + ":"
	} else {
		sum := sha256.Sum256([]byte(name))
		p.keyHead = s.set.prefix + ":" + hex.EncodeToString(sum[:8]) + ":" + algorithm + ":"
		p.tagged, p.tag = true, s.set.hashTag
	}
	p.cur.Store(p.newRules(rule, interval, nil, nil, 0))
	s.live[name] = p
	return p, nil
}

// CheckRule reports whether Policy would take algorithm and rule,
// without making a policy: what New refuses (a rule the algorithm cannot
// hold exactly on Redis, a Lease that cannot save round trips under it)
// is refused here with the same message. A service that loads many rules
// checks them all before it uses any.
func (s *Store) CheckRule(algorithm string, rule floodgate.Rule) error {
	if algorithm == "" {
		algorithm = floodgate.TokenBucket
	}
	_, kind, interval, err := parseRule(algorithm, rule)
	if err != nil {
		return err
	}
	if s.lease != nil {
		return s.lease.check(kind, rule.Capacity(), interval)
	}
	return nil
}

// Close closes every live policy, which returns their unspent leases to
// Redis (see Limiter.Close), stops the bookkeeper, and waits for the
// batches in flight and the refunds they ask (see Decide), each within
// Timeout. Then it sends
// nothing more, and the client may be closed. Its policies still decide
// after it, each request by a round trip. It is idempotent; the error
// says how many units could not go back.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed.Store(true)
		ps := make([]*policy, 0, len(s.live))
		for _, p := range s.live {
			ps = append(ps, p)
		}
		sps := make([]*slotPolicy, 0, len(s.slotLive))
		for _, p := range s.slotLive {
			sps = append(sps, p)
		}
		s.mu.Unlock()
		var errs []error
		if s.lease != nil {
			errs = append(errs, s.lease.close())
		}
		for _, p := range ps {
			errs = append(errs, p.Close())
		}
		for _, p := range sps {
			errs = append(errs, p.Close())
		}
		s.holding.close()
		// The batches in flight, whose callers may all have left, may yet
		// answer with a charge to refund: their refunds are waited for too.
		deadline := time.Now().Add(s.set.timeout)
		for s.batch.busy() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		waited := make(chan struct{})
		go func() {
			s.refunds.Wait()
			close(waited)
		}()
		timer := time.NewTimer(max(time.Until(deadline), 0) + s.set.timeout)
		select {
		case <-waited:
		case <-timer.C:
			errs = append(errs, fmt.Errorf("redislimit: refunds still running after Timeout (%v)", s.set.timeout))
		}
		timer.Stop()
		if l := s.local.Load(); l != nil {
			l.Close()
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// Stats returns the Store's counts so far, over every policy it made.
func (s *Store) Stats() Stats {
	st := Stats{
		Calls: s.calls.Load(), Errors: s.errs.Load(), Timeouts: s.timeouts.Load(), Loads: s.loads.Load(),
		Fallbacks: s.fallbacks.Load(), Opens: s.opens.Load(), KeyErrors: s.keyErrs.Load(), Abandoned: s.abandoned.Load(),
		Refunded: s.refunded.Load(), Reloads: s.reloads.Load(),
		SlotsHeld: int64(s.holding.held()), SlotRenewals: s.holding.renewals.Load(), SlotRenewCommands: s.holding.renewedCmds.Load(),
		SlotsLost: s.holding.lost.Load(),
	}
	if ls := s.lease; ls != nil {
		st.Leased, st.Returned, st.Lapsed = ls.leased.Load(), ls.returned.Load(), ls.lapsed.Load()
		st.Refills, st.Renewals = ls.refills.Load(), ls.renewals.Load()
	}
	return st
}

// AppendCounts appends the Store's counts (see package counts), with
// Route and Policy "": its decisions by result, its round trips, their
// failures by kind, the breaker, and in lease mode the units leased,
// returned and lapsed (see Limiter.AppendCounts).
func (s *Store) AppendCounts(dst []counts.Sample) []counts.Sample {
	for r, label := range resultLabels {
		dst = append(dst, counts.Sample{Metric: counts.Requests, Label: label, Value: s.results.Value(r)})
	}
	open := int64(0)
	if s.breaker.openUntil.Load() != closed {
		open = 1
	}
	dst = append(dst,
		counts.Sample{Metric: counts.StoreCalls, Value: s.calls.Load()},
		counts.Sample{Metric: counts.StoreErrors, Label: countinfo.ErrorTimeout, Value: s.timeouts.Load()},
		counts.Sample{Metric: counts.StoreErrors, Label: countinfo.ErrorKey, Value: s.keyErrs.Load()},
		counts.Sample{Metric: counts.StoreErrors, Label: countinfo.ErrorOther, Value: s.otherErrs.Load()},
		counts.Sample{Metric: counts.StoreBreakerOpen, Value: open},
		counts.Sample{Metric: counts.StoreBreakerOpens, Value: s.opens.Load()})
	if ls := s.lease; ls != nil {
		dst = append(dst,
			counts.Sample{Metric: counts.StoreLeased, Value: ls.leased.Load()},
			counts.Sample{Metric: counts.StoreReturned, Value: ls.returned.Load()},
			counts.Sample{Metric: counts.StoreLapsed, Value: ls.lapsed.Load()})
	}
	return dst
}

// localStore is FailLocal's Store in process, made at the first
// fallback, so that a Store whose Redis never fails holds none.
func (s *Store) localStore() *floodgate.LocalStore {
	if l := s.local.Load(); l != nil {
		return l
	}
	s.localMu.Lock()
	defer s.localMu.Unlock()
	if l := s.local.Load(); l != nil {
		return l
	}
	l := floodgate.NewLocalStore(floodgate.LocalStoreConfig{Clock: s.set.clock, MaxKeys: s.set.localMaxKeys, IdleTTL: floodgate.Never})
	s.local.Store(l)
	return l
}
