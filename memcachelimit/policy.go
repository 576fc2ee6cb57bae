package memcachelimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
)

// policy is one rule of a Store, applied per client: its name, its
// algorithm, its rule in force, and how its keys are named. It holds no
// goroutine, timer or channel.
type policy struct {
	s    *Store
	name string
	alg  string
	head string // every key's start (see keyHead)
	cur  atomic.Pointer[ruled]

	setMu  sync.Mutex           // SetRule's, one at a time, and the twin's making
	twin   atomic.Pointer[twin] // FailLocal's limiter, made at the first fallback
	closed atomic.Bool
}

// key is the memcached key of client's state.
func (p *policy) key(client string) string { return itemKey(p.s.set.prefix, p.head, client) }

// Peek returns what one request for key would be answered now, and
// charges nothing: one get, and no write.
func (p *policy) Peek(ctx context.Context, key string) (floodgate.Decision, error) {
	return p.s.peek(ctx, p, key)
}

// SetRule changes the policy's rule while it serves: each key's state
// is converted to the new rule at its next step, on whichever replica
// takes it, keeping what the key used (see storekit.Machine), so no key
// gains allowance. Replicas whose rules differ for a while (a rolling
// deploy) convert a key back and forth, each conversion keeping what
// was used. The algorithm cannot change.
func (p *policy) SetRule(rule floodgate.Rule) error {
	m, err := newMachine(p.alg, rule)
	if err != nil {
		return err
	}
	p.setMu.Lock()
	defer p.setMu.Unlock()
	old := p.cur.Load()
	p.cur.Store(&ruled{m: m, rule: rule, capacity: rule.Capacity(), gen: old.gen + 1})
	if t := p.twin.Load(); t != nil {
		if err := t.pol.SetRule(rule); err != nil {
			return fmt.Errorf("memcachelimit: FailLocal's limiter: %w", err)
		}
	}
	return nil
}

// AppendCounts appends nothing: what a policy decided is its
// middleware's counts, and what reaching memcached cost its Store's.
func (p *policy) AppendCounts(dst []counts.Sample) []counts.Sample { return dst }

// Close frees the policy's name in the Store; its clients' state stays
// in memcached until it expires. It still decides after Close.
func (p *policy) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	s := p.s
	s.mu.Lock()
	if s.live[p.name] == p {
		delete(s.live, p.name)
	}
	s.mu.Unlock()
	p.setMu.Lock()
	if t := p.twin.Load(); t != nil {
		_ = t.pol.Close()
	}
	p.setMu.Unlock()
	return nil
}

// twin is a policy's FailLocal limiter: its policy on the Store's
// LocalStore, and that policy's Limiter.
type twin struct {
	pol floodgate.StorePolicy
	lim *floodgate.Limiter
}

// local returns the policy's FailLocal limiter, made at the first
// fallback.
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
	pol, err := ls.Policy(fmt.Sprintf("%p %s", p, p.name), p.alg, p.cur.Load().rule)
	if err != nil {
		return nil, fmt.Errorf("memcachelimit: FailLocal: %w", err)
	}
	t := &twin{pol: pol, lim: ls.Limiter(pol)}
	p.twin.Store(t)
	return t, nil
}
