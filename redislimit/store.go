package redislimit

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/internal/plan"
	"github.com/floodgate-go/floodgate/internal/tally"
	"github.com/redis/go-redis/v9"
)

// Store keeps a middleware's policies on Redis: it is the floodgate.Store
// that httplimit and grpclimit take in their Config, so that every
// replica of a service shares one limit per client and policy.
//
// Each policy is a Limiter of its own, made with the Store's Config and
// the policy's algorithm and rule, so every setting of Config means for
// each policy what it means for a Limiter: Timeout, FailureMode (FailLocal
// with the policy's own rule), the breaker, Lease. A policy's keys are
// "<Prefix>:<policy>:<algorithm>:{<client>}", where <policy> is 16 hex
// digits of a hash of the name the middleware gives it (its route, tier
// and name), and <client> the 32 of the client's hash: the braces put
// every policy's key of one client in one Redis Cluster slot. A key takes
// 168 bytes for a bucket or a window (MEMORY USAGE; a log's, 16 more than
// a Limiter's log key), and expires as a Limiter's does: a client that
// rotates its address costs Redis that much per address and policy, for
// as long as the rule would remember it.
//
// A request is decided by all of its route's policies in one round trip:
// with one policy, by that policy's script; with several, by one script
// over the client's keys that runs each policy's own script dry, then
// charges them all only if they all admit, at one instant of Redis's
// clock. A refusal charges nothing, at no moment (Redis runs a script
// whole, and no other replica sees its keys in between), and costs Redis
// one run of each policy's script; an admission of P policies costs 2P-1
// runs, every one but the last dry-run first, in the same round trip. In
// lease mode a request whose every policy holds a lease for the client is
// decided in process, with no round trip, and charged all or nothing
// there (a unit one policy took for a refused request goes back to its
// lease); any other is decided by that one script, and the policies that
// could not serve it ask for a lease ahead, so that the client's next
// requests find one.
type Store struct {
	client  redis.UniversalClient
	cfg     Config
	prefix  string
	multi   *script
	results *tally.Counts         // the multi-policy decisions, by result
	local   *floodgate.LocalStore // FailLocal's policies in process

	mu      sync.Mutex
	live    map[string]*storePolicy // the live policies, by name
	retired Stats                   // what closed policies counted
	done    [numResults]int64
}

// NewStore returns a Store on client, whose policies share cfg. Algorithm,
// Rule and Local must be unset: each policy brings its own algorithm and
// rule (and FailLocal applies that rule in process). Every other field is
// validated as New validates it.
func NewStore(client redis.UniversalClient, cfg Config) (*Store, error) {
	switch {
	case cfg.Algorithm != "":
		return nil, fmt.Errorf("redislimit: NewStore: Algorithm is %q, and each policy brings its own: leave it empty", cfg.Algorithm)
	case cfg.Rule != floodgate.Rule{}:
		return nil, fmt.Errorf("redislimit: NewStore: Rule is %+v, and each policy brings its own: leave it zero", cfg.Rule)
	case cfg.Local != nil:
		return nil, errors.New("redislimit: NewStore: Local is set; FailLocal applies each policy's own rule in process: leave it nil")
	}
	probe := cfg
	probe.Rule, probe.HashTag = floodgate.Rule{Limit: 1, Period: time.Second}, nil
	l, err := New(client, probe)
	if err != nil {
		return nil, err
	}
	l.Close()
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = "floodgate"
	}
	s := &Store{client: client, cfg: cfg, prefix: prefix, multi: multiScript,
		results: tally.New(int(numResults)), live: map[string]*storePolicy{}}
	if cfg.FailureMode == FailLocal {
		s.local = floodgate.NewLocalStore(floodgate.LocalStoreConfig{Clock: cfg.Clock, MaxKeys: orDefault(cfg.LocalMaxKeys, defaultLocalKeys), IdleTTL: -1})
	}
	return s, nil
}

// Policy returns a new policy named name, algorithm applied to rule per
// client (a floodgate.StorePolicy: a Limiter). It is an error to give the
// name of a live policy of the Store, or what New refuses.
func (s *Store) Policy(name, algorithm string, rule floodgate.Rule) (floodgate.StorePolicy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live[name] != nil {
		return nil, fmt.Errorf("redislimit: a live policy of the Store is named %q already", name)
	}
	cfg := s.cfg
	cfg.Algorithm, cfg.Rule, cfg.HashTag = algorithm, rule, nil
	sum := sha256.Sum256([]byte(name))
	cfg.Prefix = s.prefix + ":" + hex.EncodeToString(sum[:8])
	l, err := New(s.client, cfg)
	if err != nil {
		return nil, err
	}
	l.tagged, l.tag = true, s.cfg.HashTag
	if err := s.twinOf(l, name, algorithm, rule); err != nil {
		l.Close()
		return nil, err
	}
	p := &storePolicy{Limiter: l, store: s, name: name}
	s.live[name] = p
	return p, nil
}

// Check reports whether Policy would take algorithm and rule, without
// making a policy: what New refuses (a rule the algorithm cannot hold
// exactly on Redis, a Lease that cannot save round trips under it) is
// refused here with the same message. A service that loads many rules
// checks them all before it uses any.
func (s *Store) Check(algorithm string, rule floodgate.Rule) error {
	cfg := s.cfg
	cfg.Algorithm, cfg.Rule, cfg.HashTag = algorithm, rule, nil
	l, err := New(s.client, cfg)
	if err != nil {
		return err
	}
	return l.Close()
}

// storePolicy is a Limiter that a Store made.
type storePolicy struct {
	*Limiter
	store *Store
	name  string
	once  sync.Once
}

// twinOf gives l, a Store's policy named name, its FailLocal limiter on
// the Store's LocalStore, under rule.
func (s *Store) twinOf(l *Limiter, name, algorithm string, rule floodgate.Rule) error {
	if s.local == nil {
		return nil
	}
	twin, err := s.local.Policy(name, algorithm, rule)
	if err != nil {
		return fmt.Errorf("redislimit: Local: %w", err)
	}
	l.twin, l.local = twin, s.local.Limiter(twin)
	return nil
}

// AppendCounts appends nothing: a policy's requests are its middleware's
// counts, and what reaching Redis cost, leases included, the Store's (see
// Store.AppendCounts); its clients' keys are in Redis, where they expire.
func (p *storePolicy) AppendCounts(dst []counts.Sample) []counts.Sample { return dst }

// Close returns the policy's unspent leases to Redis, within Timeout, and
// frees its name in the Store, whose counts keep what it counted.
func (p *storePolicy) Close() error {
	err := p.Limiter.Close()
	p.once.Do(func() {
		if p.twin != nil {
			p.twin.Close()
		}
		s := p.store
		st := p.Stats()
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.live, p.name)
		s.retired = addStats(s.retired, st)
		for r := range s.done {
			s.done[r] += p.requests.Value(r)
		}
	})
	return err
}

// addStats is a and b, field by field.
func addStats(a, b Stats) Stats {
	return Stats{Calls: a.Calls + b.Calls, Errors: a.Errors + b.Errors, Timeouts: a.Timeouts + b.Timeouts,
		Loads: a.Loads + b.Loads, Fallbacks: a.Fallbacks + b.Fallbacks, Opens: a.Opens + b.Opens,
		KeyErrors: a.KeyErrors + b.KeyErrors, Abandoned: a.Abandoned + b.Abandoned,
		Leased: a.Leased + b.Leased, Returned: a.Returned + b.Returned, Lapsed: a.Lapsed + b.Lapsed,
		Refills: a.Refills + b.Refills, Renewals: a.Renewals + b.Renewals, Reloads: a.Reloads + b.Reloads}
}

// maxPolicies is the most asks one Decide takes.
const maxPolicies = floodgate.MaxPolicies

// Peek returns what one request for key would be answered now (see
// Limiter.Peek).
func (p *storePolicy) Peek(ctx context.Context, key string) (floodgate.Decision, error) {
	return p.Limiter.Peek(ctx, strings.Clone(key))
}

// Decide decides asks together, all or nothing, as floodgate.Store's
// Decide says, in at most one round trip (see Store): each ask with a
// key and a cost of its own, as Envoy's rate-limit service decides a
// request's descriptors.
//
// Several asks go to Redis in one script, which runs each ask's policy
// dry and charges them all only if they all admit, at one instant of
// Redis's clock: a refusal charges nothing, at no moment. On Redis
// Cluster their keys must then share a slot: give the Store a HashTag
// under which they do (a request whose keys do not fails with Redis's
// CROSSSLOT error, answered by the FailureMode). In lease mode, a
// request whose every ask's policy holds a lease for the ask's key is
// decided from the leases, all or nothing, with no round trip; any other
// goes to the one script, and the policies that held none take one
// ahead.
func (s *Store) Decide(ctx context.Context, asks []floodgate.Ask, each []floodgate.Decision) (floodgate.Decision, int, error) {
	refusal := floodgate.Decision{RetryAfter: floodgate.Never}
	if len(asks) > maxPolicies {
		return refusal, 0, fmt.Errorf("redislimit: Decide takes 1 to %d asks, got %d", maxPolicies, len(asks))
	}
	var lbuf [maxPolicies]*Limiter
	for i, a := range asks {
		sp, ok := a.Policy.(*storePolicy)
		if !ok || sp.store != s {
			return refusal, 0, fmt.Errorf("redislimit: Decide: ask %d's policy is not one of this Store's", i)
		}
		lbuf[i] = sp.Limiter
	}
	if s.cfg.Lease.Max > 0 {
		// Lease mode keeps the keys it holds leases for: its own copies,
		// never the caller's bytes.
		var own [maxPolicies]floodgate.Ask
		for i, a := range asks {
			own[i] = a
			own[i].Key = strings.Clone(a.Key)
		}
		asks = own[:len(asks)]
	}
	var pl plan.Plan
	err := pl.Prepare(len(asks),
		func(i, j int) bool { return lbuf[i] == lbuf[j] && asks[i].Key == asks[j].Key },
		func(i int) bool { return asks[i].Shadow },
		func(i int) int64 { return asks[i].N },
		func(i int) int64 { return lbuf[i].rs().capacity })
	if err != nil {
		return refusal, 0, fmt.Errorf("redislimit: Decide: %w", err)
	}
	var dec [maxPolicies]floodgate.Decision
	all := dec[:len(asks)]
	refused := pl.Refused
	if refused >= 0 {
		for _, i := range pl.Live[:pl.NLive] {
			if all[i], err = lbuf[i].Peek(ctx, asks[i].Key); err != nil {
				return refusal, 0, err
			}
		}
	} else {
		var ls [maxPolicies]*Limiter
		var keys [maxPolicies]string
		var ns [maxPolicies]int64
		var sh [maxPolicies]bool
		var live [maxPolicies]floodgate.Decision
		var at [maxPolicies]int8 // the ask each decides
		m := 0
		for _, i := range pl.Live[:pl.NLive] {
			if pl.Shadow[i] && pl.ShadowsRefused {
				// A shadow refused before: the shadows charge nothing.
				if all[i], err = lbuf[i].Peek(ctx, asks[i].Key); err != nil {
					return refusal, 0, err
				}
				continue
			}
			ls[m], keys[m], ns[m], sh[m], at[m] = lbuf[i], asks[i].Key, pl.Cost[i], pl.Shadow[i], i
			m++
		}
		r := -1
		switch m {
		case 0:
		case 1:
			live[0], err = ls[0].AllowN(ctx, keys[0], clampCost(ns[0]))
			if !live[0].Allowed {
				r = 0
			}
		default:
			var res result
			r, res, err = s.decideMany(ctx, ls[:m], keys[:m], ns[:m], sh[:m], live[:m])
			s.results.Inc(int(res))
			if r >= 0 && sh[r] {
				// The shadows were not charged: what each would answer.
				for k := range m {
					if sh[k] {
						live[k] = asLook(live[k], ns[k])
					}
				}
			} else if r >= 0 {
				for k := range m {
					if k != r {
						live[k] = asLook(live[k], ns[k])
					}
				}
			}
		}
		if err != nil {
			return floodgate.Decision{Limit: lbuf[0].rs().capacity}, 0, err
		}
		for k := range m {
			all[at[k]] = live[k]
		}
		if r >= 0 {
			for k, i := range pl.Live[:pl.NLive] {
				if i == at[r] {
					r = k
					break
				}
			}
		}
		refused = pl.Refusal(r)
	}
	for i := range all {
		if f := int(pl.Of[i]); f != i {
			all[i] = all[f]
		} else if pl.Bad[i] {
			all[i] = floodgate.Decision{Limit: lbuf[i].rs().capacity, RetryAfter: floodgate.Never}
		}
	}
	copy(each, all)
	v := plan.Verdict(len(all), refused, func(i int) bool { return asks[i].Shadow },
		func(i int) int64 { return all[i].Remaining }, func(i int) time.Duration { return all[i].ResetAfter })
	return all[v], refused, nil
}

// asLook turns the answer of an ask of cost n that was not charged (a
// dry run, or units taken and given back) into what a look (one
// request) says: exact when the cost would pass; a refusal with none
// left when it would not.
func asLook(d floodgate.Decision, n int64) floodgate.Decision {
	if !d.Allowed {
		return floodgate.Decision{Limit: d.Limit, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter}
	}
	d.Remaining += n - 1
	return d
}

// clampCost is n as AllowN's int: a cost beyond int's range is above any
// capacity too, and refused as such.
func clampCost(n int64) int {
	if int64(int(n)) != n {
		return -1
	}
	return int(n)
}

// decideMany decides several policies' asks together, all or nothing
// (see DecideEach): from their leases when each holds one, else by the
// multi-policy script, or by the FailureMode. An ask that no script can
// admit (a cost below 1 or above its policy's capacity) is refused
// before any round trip: an enforced one refuses the request, charging
// nothing; a shadow one is refused alone, and the others are decided
// without it, so that it never costs an enforced policy its charge.
func (s *Store) decideMany(ctx context.Context, ls []*Limiter, keys []string, ns []int64, shadow []bool, all []floodgate.Decision) (int, result, error) {
	isShadow := func(i int) bool { return shadow != nil && shadow[i] }
	var keep [maxPolicies]int
	k, impossible := 0, -1
	for i, l := range ls {
		c := l.rs().capacity
		if ns[i] >= 1 && ns[i] <= c {
			keep[k] = i
			k++
			continue
		}
		if !isShadow(i) {
			for j := range all {
				all[j] = floodgate.Decision{Limit: ls[j].rs().capacity}
			}
			all[i].RetryAfter = floodgate.Never
			return i, resDenied, nil
		}
		all[i] = floodgate.Decision{Limit: c, RetryAfter: floodgate.Never}
		if impossible < 0 {
			impossible = i
		}
	}
	if impossible >= 0 {
		if k == 0 {
			return impossible, decided(true), nil
		}
		var lb [maxPolicies]*Limiter
		var kb [maxPolicies]string
		var nb [maxPolicies]int64
		var sb [maxPolicies]bool
		var db [maxPolicies]floodgate.Decision
		for j, i := range keep[:k] {
			lb[j], kb[j], nb[j], sb[j] = ls[i], keys[i], ns[i], isShadow(i)
		}
		r, res, err := s.decideMany(ctx, lb[:k], kb[:k], nb[:k], sb[:k], db[:k])
		for j, i := range keep[:k] {
			all[i] = db[j]
		}
		switch {
		case r >= 0 && !sb[r]:
			return keep[r], res, err // refused by an enforced policy
		case r >= 0:
			return min(keep[r], impossible), res, err
		case res == resAbandoned:
			return 0, res, err
		}
		return impossible, res, err
	}
	var need uint16 // the policies whose leases could not answer
	if ls[0].lease != nil {
		refused, ok, missed := s.fromLeases(ls, keys, ns, shadow, all)
		if ok {
			return refused, decided(refused < 0 || isShadow(refused)), nil
		}
		need = missed
	}
	l0 := ls[0] // its breaker and counts stand for the round trip's
	var refused int
	o, callerErr := l0.guarded(ctx, l0.timeout, func() (err error) {
		refused, err = s.runEach(ctx, ls, keys, ns, shadow, all)
		return err
	})
	switch o {
	case tripAnswered:
		if l0.lease != nil {
			s.askLeases(ls, keys, need)
		}
		return refused, decided(refused < 0 || isShadow(refused)), nil
	case tripAbandoned:
		return s.abandon(ls, all), resAbandoned, callerErr
	}
	refused, res := s.fallback(ls, keys, ns, isShadow, all)
	return refused, res, nil
}

// abandon answers a request whose caller gave up before Redis did: a
// denial by the first policy, charged by none (see Limiter.AllowN).
func (s *Store) abandon(ls []*Limiter, all []floodgate.Decision) int {
	for i, l := range ls {
		all[i] = floodgate.Decision{Limit: l.rs().capacity}
	}
	ls[0].abandoned.Add(1)
	return 0
}

// fallback is the FailureMode's answer for several policies' asks, all
// or nothing as the script's: FailOpen admits, FailClosed refuses (by
// the first enforced policy), and FailLocal decides by the policies'
// in-process limiters: the enforced asks together, then, if they admit,
// the shadow asks together (a shadow's refusal charges no other shadow).
func (s *Store) fallback(ls []*Limiter, keys []string, ns []int64, isShadow func(int) bool, all []floodgate.Decision) (int, result) {
	ls[0].fallbacks.Add(1)
	if refused, res, ok := openOrClosed(ls, ns, isShadow, all); ok {
		return refused, res
	}
	var abuf [maxPolicies]floodgate.Ask
	for i, l := range ls {
		abuf[i] = floodgate.Ask{Policy: l.twin, Key: keys[i], N: ns[i], Shadow: isShadow(i)}
	}
	_, refused, _ := s.local.Decide(context.Background(), abuf[:len(ls)], all)
	return refused, resFailLocal
}

// openOrClosed is FailOpen's answer for several policies (every one
// admits, charging nothing) or FailClosed's (the first enforced one
// refuses), with ns[i] policy i's cost; ok is false for FailLocal, whose
// answer the in-process limiters give.
func openOrClosed(ls []*Limiter, ns []int64, isShadow func(int) bool, all []floodgate.Decision) (refused int, res result, ok bool) {
	l0 := ls[0]
	switch l0.mode {
	case FailOpen:
		for i, l := range ls {
			c := l.rs().capacity
			all[i] = floodgate.Decision{Allowed: true, Limit: c, Remaining: c - ns[i]}
		}
		return -1, resFailOpen, true
	case FailClosed:
		for i := range ls {
			if !isShadow(i) {
				refused = i
				break
			}
		}
		for i, l := range ls {
			all[i] = floodgate.Decision{Limit: l.rs().capacity, RetryAfter: time.Duration(l0.breaker.every)}
		}
		return refused, resFailClosed, true
	}
	return 0, 0, false
}

//go:embed multi.lua
var multiSource string

// multiScript is every kind's script as a function of (KEYS, ARGV), and
// then multi.lua, which calls them.
var multiScript = func() *script {
	var b strings.Builder
	for _, k := range []struct {
		name string
		s    *script
	}{{"gcra", gcraScript}, {"window", windowScript}, {"log", logScript}} {
		fmt.Fprintf(&b, "local function %s(KEYS, ARGV)\n%s\nend\n", k.name, k.s.src)
	}
	b.WriteString(multiSource)
	src := b.String()
	return &script{src: src, sha: sha1hex(src)}
}()

// runEach is the multi-policy round trip, with a key and a cost for each
// policy, within the first policy's Timeout, in a batch with the first
// policy's calls in flight (see batcher).
func (s *Store) runEach(ctx context.Context, ls []*Limiter, keys []string, ns []int64, shadow []bool, all []floodgate.Decision) (int, error) {
	l0 := ls[0]
	mayEnd := ctx.Done() != nil
	ctx, cancel := l0.budget.with(ctx, l0.timeout)
	defer cancel()
	var rss [maxPolicies]*rules
	args := make([]any, 3, 3+len(ls)+2+len(ls)*(1+argHistory))
	args[0], args[1], args[2] = "evalsha", s.multi.sha, len(ls)
	hash := ""
	for i, l := range ls {
		if l.tag != nil {
			args = append(args, l.Key(keys[i]))
			continue
		}
		if i == 0 || keys[i] != keys[i-1] || hash == "" {
			hash = keyHash(keys[i])
		}
		args = append(args, l.keyHead+"{"+hash+"}")
	}
	flags := make([]byte, len(ls))
	for i := range ls {
		flags[i] = '0'
		if shadow != nil && shadow[i] {
			flags[i] = '1'
		}
	}
	args = append(args, l0.scriptNow(), string(flags))
	short := true
	for i, l := range ls {
		rss[i] = l.rs()
		short = short && l.plain(call{n: ns[i], rs: rss[i]})
	}
	if short {
		// The short form: four arguments a policy instead of twelve, and
		// the script's fast path for windows (see multi.lua).
		args = append(args, "s")
		for i := range ls {
			rs := rss[i]
			args = append(args, ns[i], rs.argv[argKind], rs.argv[argInterval], rs.argv[argCapacity])
		}
	} else {
		for i, l := range ls {
			a := l.args("", call{n: ns[i], rs: rss[i]})[4:] // ARGV, after evalsha, its SHA, 1 and KEYS[1]
			args = append(args, len(a))
			args = append(args, a...)
		}
	}
	v, err := l0.batch.do(ctx, mayEnd, args, s.multi.src)
	if err != nil {
		return 0, err
	}
	if len(v) != 1+7*len(ls) || v[0] < -1 || v[0] >= int64(len(ls)) {
		return 0, fmt.Errorf("redislimit: the multi-policy script answered %d values, not %d", len(v), 1+7*len(ls))
	}
	for i := range ls {
		r := v[1+7*i : 8+7*i]
		all[i] = floodgate.Decision{Allowed: r[0] == 1, Limit: rss[i].capacity, Remaining: r[1],
			RetryAfter: fromMicros(r[2]), ResetAfter: fromMicros(r[3])}
	}
	return int(v[0]), nil
}

// keyHash is the 32 hex digits of key's SHA-256 that name its state in
// Redis (see Limiter.Key).
func keyHash(key string) string {
	var h [32]byte
	hashInto(&h, key)
	return string(h[:])
}

// hashInto writes key's hash (see keyHash) into h.
func hashInto(h *[32]byte, key string) {
	sum := sha256.Sum256([]byte(key))
	hex.Encode(h[:], sum[:16])
}

// AppendCounts appends the Store's counts (see package counts), with
// Route and Policy "", as a Limiter's AppendCounts does (see there), over
// every policy it made, closed ones included: its requests by how they
// were decided (by Redis or a lease, by the FailureMode, or abandoned),
// its round trips, their failures by kind, the breakers (open while any
// policy's is), and in lease mode the units leased, returned and lapsed.
func (s *Store) AppendCounts(dst []counts.Sample) []counts.Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var req [numResults]int64
	for r := range req {
		req[r] = s.done[r] + s.results.Value(r)
	}
	st := s.retired
	open := int64(0)
	for _, p := range s.live {
		st = addStats(st, p.Stats())
		for r := range req {
			req[r] += p.requests.Value(r)
		}
		if p.breaker.openUntil.Load() != closed {
			open = 1
		}
	}
	for r, label := range resultLabels {
		dst = append(dst, counts.Sample{Metric: counts.Requests, Label: label, Value: req[r]})
	}
	dst = append(dst,
		counts.Sample{Metric: counts.StoreCalls, Value: st.Calls},
		counts.Sample{Metric: counts.StoreErrors, Label: counts.ErrorTimeout, Value: st.Timeouts},
		counts.Sample{Metric: counts.StoreErrors, Label: counts.ErrorKey, Value: st.KeyErrors},
		counts.Sample{Metric: counts.StoreErrors, Label: counts.ErrorOther, Value: st.Errors - st.Timeouts - st.KeyErrors},
		counts.Sample{Metric: counts.StoreBreakerOpen, Value: open},
		counts.Sample{Metric: counts.StoreBreakerOpens, Value: st.Opens})
	if s.cfg.Lease.Max > 0 {
		dst = append(dst,
			counts.Sample{Metric: counts.StoreLeased, Value: st.Leased},
			counts.Sample{Metric: counts.StoreReturned, Value: st.Returned},
			counts.Sample{Metric: counts.StoreLapsed, Value: st.Lapsed})
	}
	return dst
}

// fromLeases decides a request from the policies' leases for their keys,
// with no round trip, when each policy can answer from its own: units of
// its lease, or a denial it holds for the key. It charges all or
// nothing, as the script does: units taken for a request that another
// policy refuses go back to the lease they came from (Redis counted them
// leased, and still does). ok is false when some policy cannot answer
// without Redis; then nothing is charged, and need marks (bit i for
// policy i) the policies that could not, which askLeases then renews.
func (s *Store) fromLeases(ls []*Limiter, keys []string, ns []int64, shadow []bool, all []floodgate.Decision) (refused int, ok bool, need uint16) {
	var taken [maxPolicies]*grant
	isShadow := func(i int) bool { return shadow != nil && shadow[i] }
	giveBack := func(keep func(int) bool) {
		for i, g := range taken[:len(ls)] {
			if g != nil && !keep(i) {
				ls[i].putBack(keys[i], g, ns[i])
				taken[i] = nil
			}
		}
	}
	// miss gives back what was taken, and marks policy i and each after
	// it that could not answer either.
	miss := func(i int) (int, bool, uint16) {
		giveBack(func(int) bool { return false })
		need := uint16(1) << i
		for j := i + 1; j < len(ls); j++ {
			if !ls[j].couldServe(keys[j], ns[j]) {
				need |= 1 << j
			}
		}
		return 0, false, need
	}
	enforced, sh := -1, -1
	for i, l := range ls {
		now := l.leaseNow()
		st, found := l.lease.states.Load(keys[i])
		if !found {
			return miss(i)
		}
		if g, rest, ok := l.take(keys[i], st, ns[i], now); ok {
			taken[i] = g
			all[i] = l.fromLease(g, rest, now)
			continue
		}
		d, ok := l.cachedDenial(st, ns[i], now)
		if !ok {
			return miss(i)
		}
		all[i] = d
		if isShadow(i) {
			if sh < 0 {
				sh = i
			}
		} else if enforced < 0 {
			enforced = i
		}
	}
	switch {
	case enforced >= 0:
		giveBack(func(int) bool { return false })
		return enforced, true, 0
	case sh >= 0:
		giveBack(func(i int) bool { return !isShadow(i) })
		return sh, true, 0
	}
	return -1, true, 0
}

// couldServe reports whether key's lease, or its batch taken ahead, holds
// n units it could spend now, or a denial that answers n: a look, which
// takes nothing.
func (l *Limiter) couldServe(key string, n int64) bool {
	st, ok := l.lease.states.Load(key)
	if !ok {
		return false
	}
	now := l.leaseNow()
	for _, g := range []*grant{st.g.Load(), st.next.Load()} {
		if g != nil && l.lease.usable(g, g.units.Load(), now) >= n {
			return true
		}
	}
	_, ok = l.cachedDenial(st, n, now)
	return ok
}

// askLeases has each policy that need marks (bit i for policy i) take a
// lease for its key ahead, after a request that went to Redis because it
// held none that could answer: the key's next requests then find one.
// The others' leases answered, and are renewed as they run low.
func (s *Store) askLeases(ls []*Limiter, keys []string, need uint16) {
	for i, l := range ls {
		if need&(1<<i) == 0 {
			continue
		}
		key := keys[i]
		lz := l.lease
		if lz.closed.Load() {
			continue
		}
		st, ok := lz.states.Load(key)
		if !ok {
			if lz.size.Add(1) > lz.bound {
				lz.size.Add(-1)
				continue
			}
			var loaded bool
			if st, loaded = lz.states.LoadOrStore(key, &leaseState{}); loaded {
				lz.size.Add(-1)
			}
		}
		now := l.leaseNow()
		st.lastUsed.Store(now)
		if nx := st.next.Load(); nx != nil {
			if lz.usable(nx, nx.units.Load(), now) > 0 {
				continue
			}
			// The batch taken ahead can serve nothing: a window's batch
			// taken near its end, which ended with it. It goes back, and
			// the key asks for one that serves.
			if st.next.CompareAndSwap(nx, nil) {
				l.retire(key, nx, now)
			}
		}
		if g := st.g.Load(); g != nil && !g.asked.CompareAndSwap(false, true) {
			// Its renewal was asked for already. But a lease that can serve
			// nothing is not renewed otherwise: a request of one policy
			// would take a batch in its own round trip (a refill), and this
			// one went to the script. So it is asked for again, once.
			if lz.usable(g, g.units.Load(), now) > 0 || !g.reasked.CompareAndSwap(false, true) {
				continue
			}
		}
		if lz.inline {
			l.renewAhead([]string{key})
			continue
		}
		select {
		case lz.renew <- key:
		default: // the sweeper is busy: the next miss asks again
		}
	}
}
