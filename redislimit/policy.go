package redislimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
)

// policy is one rule of a Store, applied per client: its algorithm, its
// rule in force and the history of its changes, and how its keys are
// named. It holds no goroutine, timer or channel: the Store's engine
// does its work.
type policy struct {
	s       *Store
	name    string
	alg     string
	script  *script
	kind    scriptKind
	keyHead string              // "<prefix>:<policy hash>:<algorithm>:", or a Limiter's "<prefix>:<algorithm>:"
	tagged  bool                // a Store's: the client's hash is a Cluster hash tag, in braces
	tag     func(string) string // with tagged: the part of the key that is the tag (Config.HashTag)
	cur     atomic.Pointer[rules]
	seed    uint64 // mixed into lease mode's keys, so that two policies' keys never meet

	setMu     sync.Mutex           // SetRule's, one at a time; and the twin's making
	localRule *floodgate.Rule      // FailLocal's rule, when not the policy's own (a Limiter's Config.Local)
	twin      atomic.Pointer[twin] // FailLocal's limiter, made at the first fallback

	states  atomic.Int64 // lease mode's keys of this policy held now
	flights atomic.Int64 // lease mode's round trips in flight for this policy's keys, which its Close waits for
	closed  atomic.Bool
	once    sync.Once
}

// rs is the rule in force.
func (p *policy) rs() *rules { return p.cur.Load() }

// Peek returns what one request for key would be answered now, and
// charges nothing: a dry run on Redis, which in lease mode counts this
// replica's unspent lease of the key as remaining too. In lease mode a key
// whose lease could serve the request, or that holds a denial, is
// answered from it, with no round trip, as the request would be; and a
// key of a bucket or a fixed or sliding window that holds neither takes
// its lease in the round trip that answers (the peeked unit is leased
// with the batch, not charged), so that the checks and requests after it
// find one: Envoy AI Gateway's checks come before the costs that would
// otherwise take it.
func (p *policy) Peek(ctx context.Context, key string) (floodgate.Decision, error) {
	if ls := p.s.lease; ls != nil {
		now, skew := p.s.leaseNow()
		rs := p.rs()
		st := p.state(key)
		if st != nil {
			if d, ok := p.peekLease(st, now, skew, rs); ok {
				return peeked(d), nil
			}
		}
		if p.kind != kindLog && !ls.closed.Load() && !p.closed.Load() {
			if st == nil {
				st = p.newState(key, p.s.hasher.ID(key))
			}
			if st != nil {
				st.lastUsed.Store(now)
				d, _, err := p.refill(ctx, key, st, 1, true)
				return d, err
			}
		}
	}
	r, err := p.decide(ctx, p.redisKey(key), key, call{n: 1, dry: true})
	ls := p.s.lease
	if ls == nil || err != nil {
		return r.d, err
	}
	if st := p.state(key); st != nil {
		now, skew := p.s.leaseNow()
		held := int64(0)
		rs := p.rs()
		for _, g := range []*grant{st.g.Load(), st.next.Load()} {
			if g != nil && g.gen == rs.gen {
				held += ls.usable(g, g.units.Load(), now, skew)
			}
		}
		// Redis's Remaining is after the peeked request; so is this.
		if held > 0 && r.d.Allowed {
			r.d.Remaining += held
		} else if held > 0 {
			r.d.Allowed, r.d.Remaining, r.d.RetryAfter = true, r.d.Remaining+held-1, 0
		}
	}
	return r.d, nil
}

// AppendCounts appends nothing: what a policy decided is its
// middleware's counts, and what reaching Redis cost, leases included,
// its Store's (see Store.AppendCounts); its clients' keys are in Redis,
// where they expire.
func (p *policy) AppendCounts(dst []counts.Sample) []counts.Sample { return dst }

// Close returns the policy's unspent leases to Redis, within Timeout,
// and frees its name in the Store; a policy made again with the name
// finds its clients' state in Redis as this one left it. It still
// decides after Close, each request by a round trip. The error says how
// many units could not go back.
func (p *policy) Close() error {
	var err error
	p.once.Do(func() {
		p.closed.Store(true)
		if ls := p.s.lease; ls != nil {
			err = ls.closePolicy(p)
		}
		s := p.s
		s.mu.Lock()
		if s.live[p.name] == p {
			delete(s.live, p.name)
		}
		s.mu.Unlock()
		p.setMu.Lock()
		if t := p.twin.Load(); t != nil {
			t.pol.Close()
		}
		p.setMu.Unlock()
	})
	return err
}

// twin is a policy's FailLocal limiter: its policy on the Store's
// LocalStore, and that policy's Limiter.
type twin struct {
	pol floodgate.StorePolicy
	lim *floodgate.Limiter
}

// local returns the policy's FailLocal limiter, on its FailLocal rule,
// made at the first fallback.
func (p *policy) local() (*twin, error) {
	if t := p.twin.Load(); t != nil {
		return t, nil
	}
	ls := p.s.localStore()
	p.setMu.Lock()
	defer p.setMu.Unlock()
	if t := p.twin.Load(); t != nil {
		return t, nil
	}
	rule := p.rs().rule
	if p.localRule != nil {
		rule = *p.localRule
	}
	pol, err := ls.Policy(strconv.FormatUint(p.seed, 16)+" "+p.name, p.alg, rule)
	if err != nil {
		return nil, fmt.Errorf("redislimit: Local: %w", err)
	}
	t := &twin{pol: pol, lim: ls.Limiter(pol)}
	p.twin.Store(t)
	return t, nil
}

// errNotMine is the error of an ask whose policy another Store made.
var errNotMine = errors.New("redislimit: Decide: an ask's policy is not one of this Store's")
