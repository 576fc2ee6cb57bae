package floodgate

import (
	"time"

	"github.com/floodgate-go/floodgate/internal/bucket"
)

// The global cap (Config.Global) is one bucket.Bucket over all keys
// together, asked after the key's own state. When it refuses, the key's
// grant is given back, so that the key is not punished twice. Its bucket
// retires only to move its time origin; a request that meets a retired
// one installs the successor and asks again.

// refusedByGlobal takes one unit from the global cap, if there is one, and
// reports whether the cap refused it: the caller then refunds the key's own
// grant. The check for a cap inlines into the request; the cap itself is a
// call.
func (l *Limiter) refusedByGlobal(now int64) bool {
	g := l.global.Load()
	return g != nil && l.refusedBy(g, now)
}

// refusedBy is refusedByGlobal's work on the cap g, out of line so that
// the check before it inlines.
func (l *Limiter) refusedBy(g *bucket.Bucket, now int64) bool {
	allowed, live := g.Take(now, 1)
	for !live {
		g = l.nextGlobal(g, now)
		allowed, live = g.Take(now, 1)
	}
	if !allowed {
		l.countDenial()
	}
	return !allowed
}

// allowGlobal asks the global cap g for n units at now, following its
// successors, and returns its Decision and the bucket that answered.
// A refusal is counted, with Config.Stats.
func (l *Limiter) allowGlobal(g *bucket.Bucket, now, n int64) (bucket.Decision, *bucket.Bucket) {
	d, live := g.AllowN(now, n)
	for !live {
		g = l.nextGlobal(g, now)
		d, live = g.AllowN(now, n)
	}
	if !d.Allowed {
		l.countDenial()
	}
	return d, g
}

// nextGlobal replaces a retired global bucket (it retires only to move its
// time origin) with its successor.
func (l *Limiter) nextGlobal(g *bucket.Bucket, now int64) *bucket.Bucket {
	l.global.CompareAndSwap(g, g.Successor(now))
	return l.global.Load()
}

// reserveGlobal reserves n of the global cap.
func (l *Limiter) reserveGlobal(g *bucket.Bucket, now int64, limit time.Duration, r *reservation) (time.Duration, bool) {
	for {
		wait, tat, ok, live := g.ReserveN(now, r.n, limit)
		if live {
			if ok {
				r.g, r.gtat = g, tat
			}
			return wait, ok
		}
		g = l.nextGlobal(g, now)
	}
}

// returnGlobal gives the global cap g back n units that a request took at
// now and a later check refused, following its successors.
func (l *Limiter) returnGlobal(g *bucket.Bucket, now, n int64) {
	for !g.Refund(n) {
		g = l.nextGlobal(g, now)
	}
}
