package storekit

import (
	"fmt"

	"github.com/floodgate-go/floodgate/internal/bucket"
	"github.com/floodgate-go/floodgate/internal/shardlog"
	"github.com/floodgate-go/floodgate/internal/window"
)

// Each algorithm's steps, on its mutex twin: the state is loaded into a
// pooled twin (a twin's mutex makes it escape: a pool keeps the steps
// from allocating) (a new one, made at now, for a key never seen;
// converted to the Machine's rule, for one written under another), the
// twin's method answers, following the line of successors past a state
// that retired itself (a bucket or a window moving its origin, as the
// Limiter follows it), and the twin's state is written back if the step
// changed it.

// finish writes the state of a step that changed it, with the header.
func (m *Machine) finish(s *step, o op, moved bool, r result, dst []byte, appendState func([]byte) ([]byte, error)) (result, []byte) {
	if r.err != nil {
		r.err = fmt.Errorf("floodgate: %w", r.err)
		return r, nil
	}
	if !changed(s, o, moved, &r) {
		return r, nil
	}
	next, err := appendState(m.header(dst))
	if err != nil {
		return result{err: errNoState}, nil
	}
	return r, next
}

func (m *Machine) runBucket(s *step, now int64, o op, n int64, dst []byte) (result, []byte) {
	pooled, _ := m.buckets.Get().(*bucket.MutexBucket)
	if pooled == nil {
		pooled = new(bucket.MutexBucket)
	}
	defer m.buckets.Put(pooled)
	b := pooled
	switch {
	case s.fresh:
		b.Open(m.bp, now)
	case s.foreign:
		var p bucket.Params
		if err := m.foreignParams(s, &p, nil, nil); err != nil {
			return result{err: err}, nil
		}
		if err := b.LoadState(p, s.body); err != nil {
			return result{err: corrupt(err)}, nil
		}
		if o != opFresh {
			b = b.ConvertTo(now, m.bp)
		}
	default:
		if err := b.LoadState(m.bp, s.body); err != nil {
			return result{err: corrupt(err)}, nil
		}
	}
	if o == opFresh {
		return result{at: b.FreshAt()}, nil
	}
	moved := false
	if o == opRefund && n > 0 && !s.fresh && !s.foreign {
		for !b.Refund(n) {
			b = b.Successor(now)
		}
		moved = true
	}
	var r result
	for {
		var live bool
		switch o {
		case opTake:
			r.d, live = b.AllowN(now, n)
			r.at = now
		case opCharge:
			r.d, live, r.err = b.ChargeN(now, n)
		default:
			r.d, live = b.Peek(now)
		}
		if live {
			break
		}
		b, moved = b.Successor(now), true
	}
	return m.finish(s, o, moved, r, dst, b.AppendState)
}

func (m *Machine) runLeaky(s *step, now int64, o op, n int64, dst []byte) (result, []byte) {
	pooled, _ := m.meters.Get().(*bucket.LeakyMutex)
	if pooled == nil {
		pooled = new(bucket.LeakyMutex)
	}
	defer m.meters.Put(pooled)
	b := pooled
	switch {
	case s.fresh:
		b.Open(m.bp, now)
	case s.foreign:
		var p bucket.Params
		if err := m.foreignParams(s, &p, nil, nil); err != nil {
			return result{err: err}, nil
		}
		if err := b.LoadState(p, s.body); err != nil {
			return result{err: corrupt(err)}, nil
		}
		if o != opFresh {
			b = b.ConvertTo(now, m.bp)
		}
	default:
		if err := b.LoadState(m.bp, s.body); err != nil {
			return result{err: corrupt(err)}, nil
		}
	}
	if o == opFresh {
		return result{at: b.FreshAt()}, nil
	}
	moved := false
	if o == opRefund && n > 0 && !s.fresh && !s.foreign {
		for !b.Refund(n) {
			b = b.Successor(now)
		}
		moved = true
	}
	var r result
	for {
		var live bool
		switch o {
		case opTake:
			r.d, live = b.AllowN(now, n)
			r.at = now
		case opCharge:
			r.d, live, r.err = b.ChargeN(now, n)
		default:
			r.d, live = b.Peek(now)
		}
		if live {
			break
		}
		b, moved = b.Successor(now), true
	}
	return m.finish(s, o, moved, r, dst, b.AppendState)
}

func (m *Machine) runWindow(s *step, now int64, o op, n, at int64, dst []byte) (result, []byte) {
	pooled, _ := m.windows.Get().(*window.MutexWindow)
	if pooled == nil {
		pooled = new(window.MutexWindow)
	}
	defer m.windows.Put(pooled)
	w := pooled
	switch {
	case s.fresh:
		w.Open(m.wp, now)
	case s.foreign:
		var p window.Params
		if err := m.foreignParams(s, nil, &p, nil); err != nil {
			return result{err: err}, nil
		}
		if err := w.LoadState(p, s.body); err != nil {
			return result{err: corrupt(err)}, nil
		}
		if o != opFresh {
			w = w.ConvertTo(now, m.wp)
		}
	default:
		if err := w.LoadState(m.wp, s.body); err != nil {
			return result{err: corrupt(err)}, nil
		}
	}
	if o == opFresh {
		return result{at: w.FreshAt()}, nil
	}
	moved := false
	if o == opRefund && n > 0 && !s.fresh && !s.foreign {
		for !w.Refund(at, n) {
			w = w.Successor(at)
		}
		moved = true
	}
	var r result
	for {
		var live bool
		switch o {
		case opTake:
			r.d, live = w.AllowN(now, n)
			r.at = now
		case opCharge:
			r.d, live, r.err = w.ChargeN(now, n)
		default:
			r.d, live = w.Peek(now)
		}
		if live {
			break
		}
		w, moved = w.Successor(now), true
	}
	return m.finish(s, o, moved, r, dst, w.AppendState)
}

func (m *Machine) runLog(s *step, now int64, o op, n, at int64, dst []byte) (result, []byte) {
	pooled, _ := m.logs.Get().(*shardlog.MutexLog)
	if pooled == nil {
		pooled = new(shardlog.MutexLog)
	}
	defer m.logs.Put(pooled)
	lg := pooled
	switch {
	case s.fresh:
		// The running cost begins at the instant the state is made, so
		// that a grant of a state the backend forgot names no entry of
		// the one made after it.
		lg.Open(m.lp, now, uint64(now))
	case s.foreign:
		var p shardlog.Params
		if err := m.foreignParams(s, nil, nil, &p); err != nil {
			return result{err: err}, nil
		}
		if err := lg.LoadState(p, s.body); err != nil {
			return result{err: corrupt(err)}, nil
		}
		if o != opFresh {
			lg = lg.ConvertKeeping(now, m.lp)
		}
	default:
		if err := lg.LoadState(m.lp, s.body); err != nil {
			return result{err: corrupt(err)}, nil
		}
	}
	if o == opFresh {
		return result{at: lg.FreshAt()}, nil
	}
	moved := false
	if o == opRefund && n > 0 && !s.fresh && !s.foreign {
		moved = lg.RefundCum(uint64(at), n)
	}
	var r result
	for {
		var live bool
		switch o {
		case opTake:
			r.d, live = lg.AllowN(now, n)
			if r.d.Allowed {
				r.at = int64(lg.Cum())
			}
		case opCharge:
			r.d, live, r.err = lg.ChargeN(now, n)
		default:
			r.d, live = lg.Peek(now)
		}
		if live {
			break
		}
		lg, moved = lg.Successor(now), true
	}
	return m.finish(s, o, moved, r, dst, lg.AppendState)
}
