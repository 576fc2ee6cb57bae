package kitstore

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/storekit"
)

// slots is one in-flight policy: an inflight.Limiter.
type slots struct {
	s      *Store
	name   string
	l      *inflight.Limiter
	closed bool // under s.mu
}

// SlotPolicy returns a new in-flight policy named name, of limit slots
// a key.
func (s *Store) SlotPolicy(name string, limit int) (floodgate.SlotPolicy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.names[name]; ok {
		return nil, fmt.Errorf("kitstore: a live policy is named %q already", name)
	}
	l, err := inflight.New(inflight.Config{Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("kitstore: %w", err)
	}
	s.names[name] = struct{}{}
	return &slots{s: s, name: name, l: l}, nil
}

// held is a slot of an inflight.Limiter, handed out as a
// floodgate.Slot through storekit.HeldSlot.
type held struct{ s inflight.Slot }

func (h *held) Release() bool { return h.s.Release() }

// Acquire takes one slot of key if one is free.
func (p *slots) Acquire(ctx context.Context, key string) (floodgate.Slot, bool, error) {
	if err := ctx.Err(); err != nil {
		return floodgate.Slot{}, false, err
	}
	s, ok := p.l.TryAcquire(key)
	if !ok {
		return floodgate.Slot{}, false, nil
	}
	return storekit.HeldSlot(&held{s}), true, nil
}

func (p *slots) Limit() int                                       { return p.l.Limit() }
func (p *slots) SetLimit(limit int) error                         { return p.l.SetLimit(limit) }
func (p *slots) AppendCounts(dst []counts.Sample) []counts.Sample { return dst }

// Close frees the policy's name; its slots stay valid.
func (p *slots) Close() error {
	p.s.mu.Lock()
	if !p.closed {
		p.closed = true
		delete(p.s.names, p.name)
	}
	p.s.mu.Unlock()
	return p.l.Close()
}
