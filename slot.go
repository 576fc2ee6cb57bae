package floodgate

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/inflight"
)

// SlotStore is a Store that also holds in-flight limits: at most a
// number of requests of each key at once, counted while they run rather
// than when they arrive. The middlewares' in-flight policies need one;
// LocalStore is one (each policy an inflight.Limiter), and so is
// redislimit's Store, across replicas.
type SlotStore interface {
	Store

	// SlotPolicy returns a new in-flight policy: at most limit slots of
	// each key held at once, limit from 1 to inflight.MaxLimit. name
	// identifies the policy's keys within the Store, as Policy's name
	// does; it must not be the name of a live policy of either kind.
	SlotPolicy(name string, limit int) (SlotPolicy, error)
}

// SlotPolicy is one in-flight policy of a SlotStore.
type SlotPolicy interface {
	// Acquire takes one slot of key if one is free, and reports whether
	// it did; it never waits for one. The Slot must be released once,
	// when the request's work ends. The error is ctx's when the caller
	// gave up before the Store answered (no slot is then held), or what
	// kept the Store from answering, per its failure mode (see its
	// documentation); ok is then false.
	Acquire(ctx context.Context, key string) (s Slot, ok bool, err error)
	// Limit returns the policy's limit.
	Limit() int
	// SetLimit changes the limit while the policy serves (see
	// inflight.Limiter's SetLimit): a key above a lowered limit keeps
	// its slots, and takes no new one until it is below.
	SetLimit(limit int) error
	// AppendCounts appends the policy's own counts, with Route and Policy
	// "" (the middleware sets them).
	AppendCounts(dst []counts.Sample) []counts.Sample
	// Close releases what the policy holds in this process. Slots still
	// held stay valid: their Release gives them back.
	Close() error
}

// A Slot is one slot of an in-flight policy, held until Release. Copies
// of it are the same slot, released once: the first Release gives it
// back, and any later one, of it or of a copy, is a no-op. The zero Slot
// holds nothing. In process it is an inflight.Slot, and costs no
// allocation; a SlotStore elsewhere makes one with storekit.HeldSlot.
type Slot struct {
	local inflight.Slot
	held  slotHolder
}

// slotHolder is a slot that a SlotStore other than LocalStore holds (see
// storekit.SlotHolder): its Release gives the slot back once, and
// reports whether this call did.
type slotHolder = interface{ Release() bool }

// Release gives the slot back, and reports whether this call did: false
// for the zero Slot and for a slot released already.
func (s Slot) Release() bool {
	if s.held != nil {
		return s.held.Release()
	}
	return s.local.Release()
}

// IsZero reports whether s is the zero Slot, which holds nothing.
func (s Slot) IsZero() bool { return s == Slot{} }

// localSlots is a LocalStore's in-flight policy.
type localSlots struct {
	s       *LocalStore
	name    string
	l       *inflight.Limiter
	maxKeys int // l's Config.MaxKeys: 0 for none
}

// ErrSlotName is wrapped by SlotPolicy's error for a name that a live
// policy of the Store already has.
var ErrSlotName = errors.New("a live policy of the Store has this name")

// SlotPolicy returns an in-flight policy in this process: an
// inflight.Limiter of limit, with the Store's MaxKeys (0: 1,048,576 keys),
// swept by the Store's goroutine of its idle keys (a key that holds
// nothing, for two sweeps in a row).
func (s *LocalStore) SlotPolicy(name string, limit int) (SlotPolicy, error) {
	maxKeys, err := s.slotKeys()
	if err != nil {
		return nil, err
	}
	l, err := inflight.New(inflight.Config{Limit: limit, MaxKeys: cmp.Or(maxKeys, Unbounded), IdleTTL: Never})
	if err != nil {
		return nil, fmt.Errorf("floodgate: %w", err)
	}
	p := &localSlots{s: s, name: name, l: l, maxKeys: maxKeys}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live[name] != nil || s.slots[name] != nil {
		l.Close()
		return nil, fmt.Errorf("floodgate: slot policy %q: %w", name, ErrSlotName)
	}
	if s.slots == nil {
		s.slots = map[string]*localSlots{}
	}
	s.slots[name] = p
	return p, nil
}

// InFlight returns the inflight.Limiter of p, an in-flight policy of
// this Store, or nil for any other.
func (s *LocalStore) InFlight(p SlotPolicy) *inflight.Limiter {
	if lp, ok := p.(*localSlots); ok && lp.s == s {
		return lp.l
	}
	return nil
}

func (p *localSlots) Acquire(ctx context.Context, key string) (Slot, bool, error) {
	if err := ctx.Err(); err != nil {
		return Slot{}, false, err
	}
	s, ok := p.l.TryAcquire(key)
	return Slot{local: s}, ok, nil
}

func (p *localSlots) Limit() int               { return p.l.Limit() }
func (p *localSlots) SetLimit(limit int) error { return p.l.SetLimit(limit) }

// AppendCounts appends the policy's keys held now and their bound.
func (p *localSlots) AppendCounts(dst []counts.Sample) []counts.Sample {
	dst = append(dst, counts.Sample{Metric: counts.Keys, Value: int64(p.l.Len())})
	if p.maxKeys > 0 {
		dst = append(dst, counts.Sample{Metric: counts.KeysMax, Value: int64(p.maxKeys)})
	}
	return dst
}

// Close takes the policy out of the Store's sweep; its slots stay valid.
func (p *localSlots) Close() error {
	p.s.mu.Lock()
	if p.s.slots[p.name] == p {
		delete(p.s.slots, p.name)
	}
	p.s.mu.Unlock()
	return p.l.Close()
}
