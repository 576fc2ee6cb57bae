package floodgate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/internal/plan"
	"github.com/floodgate-go/floodgate/internal/sweeper"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// LocalStoreConfig configures a LocalStore. The zero value is the
// middlewares' defaults.
type LocalStoreConfig struct {
	// Clock is every policy's clock; nil means SystemClock().
	Clock Clock
	// MaxKeys bounds each policy's keys, as Config.MaxKeys does: 0,
	// the default, is a bound that keeps each policy within 64 MiB
	// (1,048,576 keys of a bucket or a window, or of an in-flight
	// policy; fewer of a sliding log, which keeps an entry per request
	// in its window, and never fewer than 1,024), so that a flood of
	// new ids cannot grow memory without bound. Unbounded holds every
	// key. Negative is an error from every Policy and SlotPolicy.
	MaxKeys int
	// IdleTTL is how long a key's state must have been what a new key's
	// would be before the Store forgets it, as Config.IdleTTL: 0, the
	// default, is one minute, so that the states of ids a client
	// rotates go; Never keeps them. Any value keeps every limit exact
	// (a forgotten state was a new one). One goroutine sweeps every
	// policy, twice an IdleTTL, until Close or until the Store is
	// collected. Negative is an error from every Policy and
	// SlotPolicy.
	IdleTTL time.Duration
}

// defaultIdleTTL is Config.IdleTTL's default, and LocalStoreConfig's.
const defaultIdleTTL = time.Minute

// The default bound on a Limiter's keys (Config.MaxKeys 0):
// what its states may hold, and what a key of the bound costs at most
// (measured by the middlewares' heap tests): a state inline in the
// table, or held as an object (the sliding log's, beside 16 bytes per
// entry it keeps), each with its share of the table and 8 bytes of
// sketch (16 once a key that owes has been evicted).
const (
	defaultMemory  = 64 << 20
	inlineKeyBytes = 64
	objectKeyBytes = 512
	logEntryBytes  = 16
)

// defaultMaxKeys is the bound on the keys of a Limiter of the algorithm
// name, whose states live as k says, and of rule, that keeps them within
// defaultMemory.
func defaultMaxKeys(name string, k kind, rule Rule) int {
	per := inlineKeyBytes
	switch {
	case name == SlidingLog || name == testhook.SlidingLogMutex:
		per = objectKeyBytes + logEntryBytes*int(min(rule.Limit, defaultMemory))
	case k == objects:
		per = objectKeyBytes
	}
	return max(1024, defaultMemory/per)
}

// defaultSlotKeys is the bound on an in-flight policy's keys
// (inflight.Config.MaxKeys 0): a word per key in the table, 64 bytes
// at most with its share of the table, as a bucket's.
const defaultSlotKeys = defaultMemory / inlineKeyBytes

// LocalStore is the Store that keeps its policies' state in this
// process, each policy on a Limiter of its own: the middlewares' and
// Envoy's rate-limit service's Store when none is given. It is exact
// on one replica, and decides a request of several asks in
// nanoseconds, with no lock: each ask takes from its key's state at
// once, and an ask refused gives back what the asks before it took (see
// Limits), so that between a grant and its refund a concurrent request
// may find less, never more. A sliding log's refund is inexact (see
// Limits): a request of a log and other algorithms is exact when the
// log's ask comes last.
//
// Make one with NewLocalStore and Close it when done; it is safe for
// concurrent use.
type LocalStore struct {
	clock   Clock
	maxKeys int
	ttl     time.Duration

	mu    sync.Mutex
	live  map[string]*localPolicy
	slots map[string]*localSlots // in-flight policies (see SlotPolicy)

	stop  chan struct{}
	swept <-chan struct{}
	once  sync.Once

	twins bool // an algorithm may name a mutex twin: set only by tests
}

// NewLocalStore returns a LocalStore configured by cfg (see
// LocalStoreConfig), which holds nothing until its first policy: with
// an IdleTTL other than Never, one goroutine that Close stops. The
// goroutine holds the Store weakly: a Store dropped without Close is
// collected, and the goroutine ends.
func NewLocalStore(cfg LocalStoreConfig) *LocalStore {
	s := &LocalStore{clock: cfg.Clock, maxKeys: cfg.MaxKeys, ttl: cmp.Or(cfg.IdleTTL, defaultIdleTTL), live: map[string]*localPolicy{}}
	if s.ttl > 0 && s.ttl != Never {
		s.stop = make(chan struct{})
		t := time.NewTicker(max(s.ttl/2, time.Millisecond))
		s.swept = sweeper.Start(s, t.C, t, s.stop, (*LocalStore).sweepNow)
	}
	return s
}

// sweepNow forgets the keys of every live policy that have been idle for
// the Store's IdleTTL, each at its clock's now.
func (s *LocalStore) sweepNow() {
	for _, p := range s.policies() {
		if now := p.l.now(); now >= math.MinInt64+int64(s.ttl) {
			p.l.evictIdleAt(now - int64(s.ttl))
		}
	}
	s.mu.Lock()
	slots := make([]*localSlots, 0, len(s.slots))
	for _, p := range s.slots {
		slots = append(slots, p)
	}
	s.mu.Unlock()
	for _, p := range slots {
		p.l.Sweep() // a key that held nothing for two sweeps: an IdleTTL
	}
}

// policies returns the live policies.
func (s *LocalStore) policies() []*localPolicy {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := make([]*localPolicy, 0, len(s.live))
	for _, p := range s.live {
		ps = append(ps, p)
	}
	return ps
}

// Close stops the Store's sweep of idle keys. Its policies go on
// deciding after it; only idle keys are no longer forgotten. It is
// idempotent.
func (s *LocalStore) Close() error {
	s.once.Do(func() {
		if s.stop != nil {
			close(s.stop)
			<-s.swept
		}
	})
	return nil
}

// config is the Limiter of a policy of algorithm and rule.
func (s *LocalStore) config(algorithm string, rule Rule) (Config, error) {
	if err := s.check(); err != nil {
		return Config{}, err
	}
	algorithm = cmp.Or(algorithm, TokenBucket)
	if s.maxKeys != 0 && s.maxKeys != Unbounded {
		if f, err := lookup(algorithm, s.twins); err == nil {
			if alg, err := build(algorithm, f, rule); err == nil {
				if _, ok := alg.(builtin); !ok {
					return Config{}, errUnboundable(algorithm) // for CheckRule too
				}
			}
		}
	}
	// The Store sweeps its policies itself: their Limiters have none.
	return Config{Algorithm: algorithm, Rule: rule, Clock: s.clock, MaxKeys: s.maxKeys, IdleTTL: Never, twins: s.twins}, nil
}

// check refuses a LocalStoreConfig with a negative MaxKeys or IdleTTL.
func (s *LocalStore) check() error {
	if s.maxKeys < 0 {
		return fmt.Errorf("floodgate: LocalStoreConfig.MaxKeys must be 0 (the default bound), positive or Unbounded, got %d", s.maxKeys)
	}
	if s.ttl < 0 {
		return fmt.Errorf("floodgate: LocalStoreConfig.IdleTTL must be 0 (a minute), positive or Never, got %v", s.ttl)
	}
	return nil
}

// slotKeys is the bound on the keys of the Store's in-flight policies:
// 0 for none.
func (s *LocalStore) slotKeys() (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	switch s.maxKeys {
	case 0:
		return defaultSlotKeys, nil
	case Unbounded:
		return 0, nil
	}
	return s.maxKeys, nil
}

// CheckRule reports whether Policy would take algorithm and rule: what
// New takes (see the function CheckRule).
func (s *LocalStore) CheckRule(algorithm string, rule Rule) error {
	if _, err := s.config(algorithm, rule); err != nil {
		return err
	}
	return CheckRule(algorithm, rule)
}

// Policy returns a new policy named name: a Limiter of algorithm and
// rule, with the Store's Clock, MaxKeys and IdleTTL. It is an error to
// give the name of a live policy of the Store, or what New refuses.
func (s *LocalStore) Policy(name, algorithm string, rule Rule) (StorePolicy, error) {
	cfg, err := s.config(algorithm, rule)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live[name] != nil || s.slots[name] != nil {
		return nil, fmt.Errorf("floodgate: a live policy of the Store is named %q already", name)
	}
	l, err := New(cfg)
	if err != nil {
		return nil, err
	}
	p := &localPolicy{store: s, name: name, l: l}
	s.live[name] = p
	return p, nil
}

// Limiter returns the Limiter that holds p's state, or nil if p is not a
// policy of this Store: for what a Store does not do, such as Reset or
// Wait.
func (s *LocalStore) Limiter(p StorePolicy) *Limiter {
	if lp, ok := p.(*localPolicy); ok && lp.store == s {
		return lp.l
	}
	return nil
}

// AppendCounts appends nothing: a LocalStore's counts are its
// policies' (their keys and evictions), which their middleware reports.
func (s *LocalStore) AppendCounts(dst []counts.Sample) []counts.Sample { return dst }

// localPolicy is a LocalStore's policy: a Limiter.
type localPolicy struct {
	store *LocalStore
	name  string
	l     *Limiter
	once  sync.Once
}

// Peek is the Limiter's Peek.
func (p *localPolicy) Peek(_ context.Context, key string) (Decision, error) {
	return p.l.Peek(key), nil
}

// SetRule is the Limiter's SetRule.
func (p *localPolicy) SetRule(r Rule) error { return p.l.SetRule(r) }

// AppendCounts appends the policy's keys, their bound and its evictions.
func (p *localPolicy) AppendCounts(dst []counts.Sample) []counts.Sample { return p.l.AppendCounts(dst) }

// Close frees the policy's name in its Store; its clients' state goes
// with it.
func (p *localPolicy) Close() error {
	p.once.Do(func() {
		s := p.store
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.live[p.name] == p {
			delete(s.live, p.name)
		}
	})
	return p.l.Close()
}

// errNotMine is the error of an ask whose policy another Store made.
var errNotMine = errors.New("floodgate: Decide: an ask's policy is not one of this Store's")

// Decide decides asks together, all or nothing, as Store's Decide says,
// in process: it never waits, and so never returns ctx's error.
func (s *LocalStore) Decide(_ context.Context, asks []Ask, each []Decision) (Decision, int, error) {
	return s.decide(asks, each, nil)
}

// decide is Decide, which writes to took, if not nil, what each ask
// that charged the request took (nothing for the others: zero grants).
func (s *LocalStore) decide(asks []Ask, each []Decision, took *[MaxPolicies]grant) (Decision, int, error) {
	var ls [MaxPolicies]*Limiter
	if len(asks) > MaxPolicies {
		return Decision{RetryAfter: Never}, 0, fmt.Errorf("floodgate: Decide takes 1 to %d asks, got %d", MaxPolicies, len(asks))
	}
	for i := range asks {
		p, ok := asks[i].Policy.(*localPolicy)
		if !ok || p.store != s {
			return Decision{RetryAfter: Never}, 0, errNotMine
		}
		ls[i] = p.l
	}
	if len(asks) == 1 && len(each) > 0 {
		// One ask, whose answer goes to each: it is the request's.
		a := &asks[0]
		var out *grant
		if took != nil {
			out = &took[0]
		}
		ls[0].allowAt(a.Key, ls[0].now(), a.N, out, &each[0])
		if each[0].Allowed {
			return each[0], -1, nil
		}
		return each[0], 0, nil
	}
	var p plan.Plan
	err := p.Prepare(len(asks),
		func(i, j int) bool { return ls[i] == ls[j] && asks[i].Key == asks[j].Key },
		func(i int) bool { return asks[i].Shadow },
		func(i int) int64 { return asks[i].N },
		func(i int) int64 { return ls[i].rules.Load().capacity })
	if err != nil {
		return Decision{RetryAfter: Never}, 0, fmt.Errorf("floodgate: Decide: %w", err)
	}
	var buf [MaxPolicies]Decision
	var taken [MaxPolicies]grant
	all := buf[:len(asks)]
	refused := p.Refused
	if refused >= 0 {
		for _, i := range p.Live[:p.NLive] {
			all[i] = ls[i].Peek(asks[i].Key)
		}
	} else {
		refused = p.Refusal(decideIn(ls[:len(asks)], "", 0, all, &taken, &p, asks))
	}
	for i := range all {
		if f := int(p.Of[i]); f != i {
			all[i] = all[f]
		} else if p.Bad[i] {
			all[i] = Decision{Limit: ls[i].rules.Load().capacity, RetryAfter: Never}
		}
	}
	if took != nil && (refused < 0 || asks[refused].Shadow) {
		for i := range asks {
			if refused < 0 || !asks[i].Shadow {
				took[i] = taken[i] // charged: see Store's Decide
			}
		}
	}
	copy(each, all)
	v := plan.Verdict(len(all), refused, func(i int) bool { return asks[i].Shadow },
		func(i int) int64 { return all[i].Remaining }, func(i int) time.Duration { return all[i].ResetAfter })
	return all[v], refused, nil
}
