package storetest

import (
	"errors"
	"testing"

	"github.com/floodgate-go/floodgate"
)

// outage: a Store that cannot reach its state answers by its failure
// mode, a Decision and no error, or a refusal with an error that wraps
// floodgate.ErrUnreached, for every call; once it reaches its state
// again, it decides on it: the replicas share one limit again.
func (r *runner) outage(t *testing.T) {
	if r.h.Outage == nil {
		t.Skip("the harness gives no Outage: the failure mode is not tested")
	}
	alg := r.algs[0]
	e := r.newEnv(t)
	stores := e.stores()
	pName, qName, slotName := e.name(), e.name(), e.name()
	ps := make([]floodgate.StorePolicy, len(stores))
	qs := make([]floodgate.StorePolicy, len(stores))
	holds := make([]*floodgate.Hold, len(stores))
	slots := make([]floodgate.Slot, len(stores))
	sps := make([]floodgate.SlotPolicy, len(stores))
	for i, s := range stores {
		ps[i], qs[i] = e.policyNamed(s, pName, alg, rule(5)), e.policyNamed(s, qName, alg, rule(5))
		// Reach the state first, so that what fails next is the state.
		if _, refused := e.decide(s, []floodgate.Ask{{Policy: ps[i], Key: "before", N: 1}}, nil); refused != -1 {
			t.Fatalf("a first request of 1 of 5: refused %d", refused)
		}
		if st, ok := s.(floodgate.Settler); ok {
			holds[i] = new(floodgate.Hold)
			if _, refused, err := st.Reserve(e.ctx, []floodgate.Ask{{Policy: ps[i], Key: "reserved", N: 1}}, nil, holds[i]); err != nil || refused != -1 {
				t.Fatalf("Reserve of 1 of 5: refused %d, %v", refused, err)
			}
		}
		if _, ok := s.(floodgate.SlotStore); ok {
			sps[i] = e.slotPolicy(s, slotName, 5)
			slots[i] = e.acquire(sps[i], "before", true)
		}
	}

	end := r.h.Outage(t)
	ended := false
	defer func() {
		if !ended {
			end()
		}
	}()
	failed := func(what string, err error) {
		t.Helper()
		if err != nil && !errors.Is(err, floodgate.ErrUnreached) {
			t.Errorf("%s with the state out of reach: %v; want a Decision and no error, or an error that wraps ErrUnreached", what, err)
		}
	}
	decided := func(what string, d floodgate.Decision, refused, n int, err error) {
		t.Helper()
		failed(what, err)
		switch {
		case err != nil && (d.Allowed || refused < 0 || refused >= n):
			t.Errorf("%s with the state out of reach: %+v, refused %d, %v; want a refusal with the error", what, d, refused, err)
		case err == nil && d.Allowed != (refused < 0):
			t.Errorf("%s with the state out of reach: %+v, refused %d", what, d, refused)
		}
	}
	for i, s := range stores {
		asks := []floodgate.Ask{{Policy: ps[i], Key: "down", N: 1}}
		d, refused, err := s.Decide(e.ctx, asks, nil)
		decided("Decide of one ask", d, refused, 1, err)
		asks = append(asks, floodgate.Ask{Policy: qs[i], Key: "down", N: 1})
		d, refused, err = s.Decide(e.ctx, asks, make([]floodgate.Decision, 2))
		decided("Decide of two asks", d, refused, 2, err)
		_, err = ps[i].Peek(e.ctx, "down")
		failed("Peek", err)
		if st, ok := s.(floodgate.Settler); ok {
			_, err = st.Charge(e.ctx, asks, nil)
			failed("Charge", err)
			var h floodgate.Hold
			d, refused, err = st.Reserve(e.ctx, asks, nil, &h)
			decided("Reserve", d, refused, 2, err)
			_, err = settle(e.ctx, st, []floodgate.Ask{{Policy: ps[i], Key: "reserved", N: 2}}, holds[i], nil)
			failed("Settle", err)
		}
		if sps[i] != nil {
			sl, ok, err := sps[i].Acquire(e.ctx, "down")
			failed("Acquire", err)
			if err != nil && (ok || !sl.IsZero()) {
				t.Errorf("Acquire with the state out of reach: %v with the error %v; want no slot", ok, err)
			}
			sl.Release()
			slots[i].Release()
		}
	}

	end()
	ended = true
	if got := e.drainAll(stores, ps, "after", 5); got != 5 {
		t.Errorf("after the outage, a new key of 5 admitted %d on %d replicas: want 5, decided on the state", got, len(stores))
	}
}
