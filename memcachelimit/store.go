package memcachelimit

import (
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/storekit"
)

// Store keeps a set of policies on memcached, all through one engine: it
// is the floodgate.Store and floodgate.Settler that httplimit, grpclimit
// and Envoy's rate-limit service (package rls) take, so that every
// replica of a service shares one limit per client and policy. Make one
// per memcached client with NewStore, and Close it when done.
//
// The engine is the Store's: one circuit breaker, one set of striped
// locks that keeps this process from racing itself on a key, the groups
// in which the requests waiting on one key are decided together (see
// the package's doc), and one FailLocal store. A policy is its name and its rule (a storekit.Machine),
// and holds no goroutine, timer or channel.
//
// It is not a floodgate.SlotStore: SlotPolicy refuses, and says why.
type Store struct {
	c       *memcache.Client
	set     settings
	breaker breaker
	seed    maphash.Seed
	stripes [numStripes]sync.Mutex // a key's steps in this process, one at a time

	gmu       sync.Mutex        // gathering's
	gathering map[string]*group // the requests waiting for each key's next round (see decideGrouped)

	local   atomic.Pointer[floodgate.LocalStore] // FailLocal's policies, made at the first fallback
	localMu sync.Mutex

	results                                         [numResults]atomic.Int64
	calls, errs, timeouts, keyErrs, otherErrs       atomic.Int64
	conflicts, fallbacks, opens, abandoned, rolledB atomic.Int64

	mu     sync.Mutex
	live   map[string]*policy
	closed bool

	// beforeWrite, set only by tests, runs after a request was decided
	// on the states read and before its writes: a seam to race it.
	beforeWrite func()
	// beforeStore, set only by tests, runs before each write of a state
	// that was read (a cas), with its key: a seam to change the key
	// between the read and the write.
	beforeStore func(key string)
}

// numStripes is the number of the Store's key locks.
const numStripes = 1024

// NewStore returns a Store on c, whose policies share cfg. Nothing is
// sent to memcached before the first decision.
func NewStore(c *memcache.Client, cfg Config) (*Store, error) {
	set, err := readConfig(c, cfg)
	if err != nil {
		return nil, err
	}
	s := &Store{c: c, set: set, seed: maphash.MakeSeed(), live: map[string]*policy{}, gathering: map[string]*group{}}
	s.breaker.after, s.breaker.every = set.breakAfter, set.probeEvery
	s.breaker.openUntil.Store(closed)
	return s, nil
}

// ruled is a policy's rule in force: its Machine, its capacity, and its
// generation, which a Hold records so that a Settle under a later rule
// gives nothing back (stricter, never looser).
type ruled struct {
	m        *storekit.Machine
	rule     floodgate.Rule
	capacity int64
	gen      int64
}

// CheckRule reports whether Policy would take algorithm and rule, and a
// policy's SetRule would take rule: storekit.NewMachine's check,
// floodgate.New's for the built-in algorithms.
func (s *Store) CheckRule(algorithm string, rule floodgate.Rule) error {
	_, err := newMachine(algorithm, rule)
	return err
}

// Policy returns a new policy named name, algorithm ("" is token_bucket)
// applied to rule per client. It is an error to give the name of a live
// policy of the Store, what CheckRule refuses, or to call it after
// Close. A policy made again with a name finds its clients' state in
// memcached as the last one left it (if memcached kept it).
func (s *Store) Policy(name, algorithm string, rule floodgate.Rule) (floodgate.StorePolicy, error) {
	if algorithm == "" {
		algorithm = floodgate.TokenBucket
	}
	m, err := newMachine(algorithm, rule)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("memcachelimit: Policy after Close")
	}
	if s.live[name] != nil {
		return nil, fmt.Errorf("memcachelimit: a live policy of the Store is named %q already", name)
	}
	p := &policy{s: s, name: name, alg: algorithm, head: keyHead(s.set.prefix, algorithm, name)}
	p.cur.Store(&ruled{m: m, rule: rule, capacity: rule.Capacity(), gen: 1})
	s.live[name] = p
	return p, nil
}

// errSlots is SlotPolicy's error.
var errSlots = errors.New("memcachelimit: in-flight slots need a store that keeps what it is given: " +
	"memcached may evict an item under memory pressure, and a restart empties it without notice, " +
	"so a key's count of held slots could be lost while its holders still run, and the others would pass the limit; " +
	"keep in-flight limits on Redis (redislimit) or in process (inflight)")

// SlotPolicy refuses: memcached cannot hold in-flight slots exactly (the
// error says why). Keep them on Redis, with redislimit, or in process,
// with package inflight.
func (s *Store) SlotPolicy(name string, limit int) (floodgate.SlotPolicy, error) {
	return nil, errSlots
}

// Close frees every live policy's name, and the FailLocal limiters.
// It sends nothing to memcached, and leaves the client open: close it
// after. It is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	ps := make([]*policy, 0, len(s.live))
	for _, p := range s.live {
		ps = append(ps, p)
	}
	s.mu.Unlock()
	for _, p := range ps {
		_ = p.Close()
	}
	s.localMu.Lock()
	if l := s.local.Load(); l != nil {
		l.Close()
	}
	s.localMu.Unlock()
	return nil
}

// Stats returns the Store's counts so far, over every policy it made.
func (s *Store) Stats() Stats {
	return Stats{Calls: s.calls.Load(), Errors: s.errs.Load(), Timeouts: s.timeouts.Load(), KeyErrors: s.keyErrs.Load(),
		CASConflicts: s.conflicts.Load(), Fallbacks: s.fallbacks.Load(), Opens: s.opens.Load(),
		Abandoned: s.abandoned.Load(), RolledBack: s.rolledB.Load()}
}

// result is what decided a request, as AppendCounts counts it.
type result uint8

const (
	resAllowed result = iota
	resDenied
	resFailOpen
	resFailClosed
	resFailLocal
	resFailError
	resAbandoned
	numResults
)

// resultLabels are the results' labels, as package counts names them.
var resultLabels = [numResults]string{"allowed", "denied", "fail_open", "fail_closed", "fail_local", "fail_error", "abandoned"}

// AppendCounts appends the Store's counts (see package counts), with
// Route and Policy "": its decisions by result, its round trips, their
// failures by kind, and the breaker.
func (s *Store) AppendCounts(dst []counts.Sample) []counts.Sample {
	for r, label := range resultLabels {
		dst = append(dst, counts.Sample{Metric: counts.Requests, Label: label, Value: s.results[r].Load()})
	}
	open := int64(0)
	if s.breaker.openUntil.Load() != closed {
		open = 1
	}
	return append(dst,
		counts.Sample{Metric: counts.StoreCalls, Value: s.calls.Load()},
		counts.Sample{Metric: counts.StoreErrors, Label: "timeout", Value: s.timeouts.Load()},
		counts.Sample{Metric: counts.StoreErrors, Label: "key", Value: s.keyErrs.Load()},
		counts.Sample{Metric: counts.StoreErrors, Label: "other", Value: s.otherErrs.Load()},
		counts.Sample{Metric: counts.StoreBreakerOpen, Value: open},
		counts.Sample{Metric: counts.StoreBreakerOpens, Value: s.opens.Load()})
}

// localStore is FailLocal's Store in process, made at the first
// fallback.
func (s *Store) localStore() *floodgate.LocalStore {
	if l := s.local.Load(); l != nil {
		return l
	}
	s.localMu.Lock()
	defer s.localMu.Unlock()
	if l := s.local.Load(); l != nil {
		return l
	}
	l := floodgate.NewLocalStore(floodgate.LocalStoreConfig{Clock: s.set.localClock, MaxKeys: 1 << 16, IdleTTL: floodgate.Never})
	s.local.Store(l)
	return l
}
