// Package outage lets the Store calls of one request share what they
// learned of the Store's backend. Once one of them found it unreachable
// (a round trip that failed or ran out of its Timeout, or a circuit
// breaker that is open), the request's later calls are answered by the
// Store's failure mode at once, with no round trip: a request of several
// calls (a decision, then the checks looked at after it; a charge after
// a refusal; a settlement's two round trips) waits on a backend that does
// not answer once, not once per call.
//
// A caller that makes several Store calls for one request marks its
// context with With; a Store reads the mark with From.
package outage

import (
	"context"
	"sync/atomic"
)

// Mark is one request's record that its Store's backend did not answer
// one of its calls. Its methods take a nil Mark (no request marked), for
// which Down is false and SetDown does nothing.
type Mark struct{ down atomic.Bool }

// Down reports whether a call of the request found the backend
// unreachable.
func (m *Mark) Down() bool { return m != nil && m.down.Load() }

// SetDown records that a call of the request found the backend
// unreachable.
func (m *Mark) SetDown() {
	if m != nil {
		m.down.Store(true)
	}
}

type markKey struct{}

// markCtx carries a Mark: one allocation for the context and the mark.
type markCtx struct {
	context.Context
	m Mark
}

// Value is the Mark for markKey, and the parent's value for any other key.
func (c *markCtx) Value(key any) any {
	if key == (markKey{}) {
		return &c.m
	}
	return c.Context.Value(key)
}

// With returns ctx with a new Mark, or ctx itself if it carries one.
func With(ctx context.Context) context.Context {
	if From(ctx) != nil {
		return ctx
	}
	return &markCtx{Context: ctx}
}

// From returns ctx's Mark, or nil.
func From(ctx context.Context) *Mark {
	m, _ := ctx.Value(markKey{}).(*Mark)
	return m
}
