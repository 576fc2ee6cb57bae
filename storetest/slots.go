package storetest

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/inflight"
)

// slots runs SlotStore's obligations, if the Store is a SlotStore.
func (r *runner) slots(t *testing.T) {
	e := r.newEnv(t)
	if _, ok := e.s.(floodgate.SlotStore); !ok {
		t.Skipf("the Store (%T) is not a floodgate.SlotStore", e.s)
	}
	r.run(t, "AtMostLimit", r.slotsAtMost)
	r.run(t, "Release", r.slotsRelease)
	r.run(t, "Replicas", r.slotsReplicas)
	r.run(t, "Concurrent", r.slotsConcurrent)
	r.run(t, "ContextDone", r.slotsContext)
	r.run(t, "SetLimit", r.slotsSetLimit)
	r.run(t, "Limits", r.slotsLimits)
	r.run(t, "Close", r.slotsClose)
}

// slotPolicy makes an in-flight policy of s named name, closed when the
// subtest ends.
func (e *env) slotPolicy(s floodgate.Store, name string, limit int) floodgate.SlotPolicy {
	e.t.Helper()
	p, err := s.(floodgate.SlotStore).SlotPolicy(name, limit)
	if err != nil {
		e.t.Fatalf("SlotPolicy(%q, %d): %v", name, limit, err)
	}
	e.t.Cleanup(func() { _ = p.Close() })
	return p
}

// acquire is Acquire with a live ctx, failing the subtest on an error or
// on an answer other than want.
func (e *env) acquire(p floodgate.SlotPolicy, key string, want bool) floodgate.Slot {
	e.t.Helper()
	s, ok, err := p.Acquire(e.ctx, key)
	switch {
	case err != nil:
		e.t.Fatalf("Acquire(%q): %v", key, err)
	case ok != want:
		e.t.Fatalf("Acquire(%q): %v, want %v", key, ok, want)
	case !ok && !s.IsZero():
		e.t.Fatalf("Acquire(%q): refused with a Slot that is not zero", key)
	}
	return s
}

// slotsAtMost: at most the limit of a key's slots are held at once, and
// keys share nothing.
func (r *runner) slotsAtMost(t *testing.T) {
	e := r.newEnv(t)
	p := e.slotPolicy(e.s, e.name(), 3)
	if p.Limit() != 3 {
		t.Errorf("Limit() = %d, want 3", p.Limit())
	}
	for range 3 {
		e.acquire(p, "k", true)
	}
	e.acquire(p, "k", false)
	e.acquire(p, "other", true)
}

// slotsRelease: Release gives the slot back once, whichever copy of it
// is released; the zero Slot holds nothing.
func (r *runner) slotsRelease(t *testing.T) {
	e := r.newEnv(t)
	p := e.slotPolicy(e.s, e.name(), 2)
	a := e.acquire(p, "k", true)
	e.acquire(p, "k", true)
	e.acquire(p, "k", false)
	c := a
	if !a.Release() {
		t.Error("the first Release of a Slot: false")
	}
	if a.Release() || c.Release() {
		t.Error("a second Release of a Slot, or of its copy: true")
	}
	b := e.acquire(p, "k", true)
	e.acquire(p, "k", false)
	if !b.Release() {
		t.Error("the first Release of a Slot: false")
	}
	var zero floodgate.Slot
	if !zero.IsZero() || zero.Release() {
		t.Error("the zero Slot: not IsZero, or its Release true")
	}
	e.acquire(p, "k", true)
}

// slotsReplicas: the replicas together hold at most the limit.
func (r *runner) slotsReplicas(t *testing.T) {
	e := r.newEnv(t)
	b := e.replica()
	name := e.name()
	pa, pb := e.slotPolicy(e.s, name, 3), e.slotPolicy(b, name, 3)
	held := e.acquire(pa, "k", true)
	e.acquire(pa, "k", true)
	e.acquire(pb, "k", true)
	e.acquire(pb, "k", false)
	e.acquire(pa, "k", false)
	held.Release()
	e.acquire(pb, "k", true)
	e.acquire(pa, "k", false)
}

// slotsConcurrent: goroutines on every replica take and give back slots
// of one key at once: never more than the limit held, and every slot
// back at the end.
func (r *runner) slotsConcurrent(t *testing.T) {
	e := r.newEnv(t)
	const limit = 3
	stores := e.stores()
	name := e.name()
	ps := make([]floodgate.SlotPolicy, len(stores))
	for i, s := range stores {
		ps[i] = e.slotPolicy(s, name, limit)
	}
	var held, most, taken atomic.Int64
	flood(t, stores, func(_ floodgate.Store, g, _ int) error {
		s, ok, err := ps[g/goroutines].Acquire(e.ctx, "k")
		if err != nil || !ok {
			return err
		}
		taken.Add(1)
		n := held.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		held.Add(-1)
		if !s.Release() {
			return errors.New("the first Release of a Slot: false")
		}
		return nil
	})
	if most.Load() > limit {
		t.Errorf("%d slots held at once, beyond the limit of %d", most.Load(), limit)
	}
	if taken.Load() == 0 {
		t.Error("no goroutine took a slot")
	}
	for range limit {
		e.acquire(ps[0], "k", true)
	}
	e.acquire(ps[len(ps)-1], "k", false)
}

// slotsContext: an Acquire whose ctx ended before the call holds no
// slot: ctx's error, or, by a Store that does not wait, the answer a
// live ctx gets.
func (r *runner) slotsContext(t *testing.T) {
	e := r.newEnv(t)
	p := e.slotPolicy(e.s, e.name(), 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s, ok, err := p.Acquire(ctx, "k")
	switch {
	case err != nil:
		if !errors.Is(err, context.Canceled) || ok || !s.IsZero() {
			t.Fatalf("Acquire with a ctx that ended: %v, %v; want ctx's error and no slot", ok, err)
		}
		e.acquire(p, "k", true)
	case ok:
		e.acquire(p, "k", false)
	default:
		t.Fatal("Acquire of a free slot with a ctx that ended: refused with no error; want ctx's error, or the slot")
	}
}

// slotsSetLimit: a key above a lowered limit keeps its slots, and takes
// no new one until it is below; SetLimit refuses a limit out of range
// and changes nothing then.
func (r *runner) slotsSetLimit(t *testing.T) {
	e := r.newEnv(t)
	p := e.slotPolicy(e.s, e.name(), 3)
	held := []floodgate.Slot{e.acquire(p, "k", true), e.acquire(p, "k", true), e.acquire(p, "k", true)}
	for _, bad := range badLimits() {
		if err := p.SetLimit(bad); err == nil {
			t.Errorf("SetLimit(%d): no error", bad)
		}
	}
	if p.Limit() != 3 {
		t.Errorf("Limit() after SetLimits in error: %d, want 3", p.Limit())
	}
	if err := p.SetLimit(2); err != nil {
		t.Fatal(err)
	}
	if p.Limit() != 2 {
		t.Errorf("Limit() = %d, want 2", p.Limit())
	}
	e.acquire(p, "k", false)
	held[0].Release()
	e.acquire(p, "k", false)
	held[1].Release()
	e.acquire(p, "k", true)
	e.acquire(p, "k", false)
	if err := p.SetLimit(4); err != nil {
		t.Fatal(err)
	}
	e.acquire(p, "k", true)
	e.acquire(p, "k", true)
	e.acquire(p, "k", false)
}

// slotsLimits: SlotPolicy takes limits from 1 to inflight.MaxLimit.
func (r *runner) slotsLimits(t *testing.T) {
	e := r.newEnv(t)
	s := e.s.(floodgate.SlotStore)
	for _, limit := range badLimits() {
		if p, err := s.SlotPolicy(e.name(), limit); err == nil {
			_ = p.Close()
			t.Errorf("SlotPolicy with a limit of %d: no error", limit)
		}
	}
	for _, limit := range []int{1, inflight.MaxLimit} {
		p := e.slotPolicy(e.s, e.name(), limit)
		if p.Limit() != limit {
			t.Errorf("SlotPolicy with a limit of %d: Limit() = %d", limit, p.Limit())
		}
	}
}

// slotsClose: the slots of a closed policy stay valid: their Release
// gives them back.
func (r *runner) slotsClose(t *testing.T) {
	e := r.newEnv(t)
	name := e.name()
	p, err := e.s.(floodgate.SlotStore).SlotPolicy(name, 1)
	if err != nil {
		t.Fatal(err)
	}
	s := e.acquire(p, "k", true)
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !s.Release() {
		t.Error("the Release of a slot of a closed policy: false")
	}
	again := e.slotPolicy(e.s, name, 1)
	e.acquire(again, "k", true)
	e.acquire(again, "k", false)
}

// badLimits are in-flight limits that no policy takes: none, negative,
// and one past inflight.MaxLimit where an int can hold it (not on a
// 32-bit platform, whose largest int is the bound itself).
func badLimits() []int {
	bad := []int{0, -1, math.MinInt}
	if over := int64(inflight.MaxLimit) + 1; over <= math.MaxInt {
		bad = append(bad, int(over))
	}
	return bad
}
