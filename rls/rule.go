package rls

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/rls/internal/config"
)

// rule is one rule's policy and counts. It outlives a reload that keeps
// the rule at its place with the same algorithm.
type rule struct {
	pol   floodgate.StorePolicy // nil for a rule that admits nothing (requests_per_unit 0)
	limit *config.Limit         // as last configured
	pbLim *pb.RateLimitResponse_RateLimit
	unit  int64 // the window in seconds
	fixed bool  // a fixed window: duration_until_reset is the window's end, as envoyproxy/ratelimit says it
	stats ruleStats
	// detailed holds the series by the requests' values of a rule with
	// detailed_metric; nil for the others.
	detailed *detailed

	// A limit override's (see Server.overrideFor): the latest clock
	// reading of a request that used it, the requests using it now, and
	// whether it has left the table.
	used  atomic.Int64
	users atomic.Int64
	dead  atomic.Bool
}

// override is a per-descriptor limit override's rule.
type override struct {
	rpu  uint32
	unit config.Unit
}

// newRule is the rule of l, without its policy.
func newRule(l *config.Limit, maxDetailed int) *rule {
	r := &rule{limit: l, pbLim: pbLimit(l), unit: int64(l.Unit.Duration() / time.Second), fixed: l.Algorithm == floodgate.FixedWindow}
	r.stats.init()
	if l.Detailed {
		r.detailed = newDetailed(maxDetailed)
	}
	return r
}

// reconfigured returns r under its new configuration nl: the same
// policy and counts.
func (r *rule) reconfigured(nl *config.Limit, maxDetailed int) *rule {
	n := &rule{pol: r.pol, limit: nl, pbLim: pbLimit(nl), unit: int64(nl.Unit.Duration() / time.Second), fixed: nl.Algorithm == floodgate.FixedWindow}
	n.stats.share(&r.stats)
	if nl.Detailed {
		n.detailed = r.detailed
		if n.detailed == nil {
			n.detailed = newDetailed(maxDetailed)
		}
	}
	return n
}

// zero reports whether r admits nothing (requests_per_unit 0).
func (r *rule) zero() bool { return r.pol == nil }

// close releases r's policy: on Redis, its leases go back.
func (r *rule) close() error {
	if r.pol == nil {
		return nil
	}
	return r.pol.Close()
}

// build makes r's policy on the Store, named name.
func (s *Server) build(r *rule, name string) error {
	l := r.limit
	if l.RequestsPerUnit == 0 {
		return nil
	}
	p, err := s.store.Policy(name, l.Algorithm, ruleOf(l))
	r.pol = p
	return err
}

// policyName is the Store's name for a rule: its place in the tree.
func policyName(l *config.Limit) string {
	domain, levels := l.Path()
	return fmt.Sprintf("rule %q %q", domain, levels)
}

// ruleOf is l's floodgate rule.
func ruleOf(l *config.Limit) floodgate.Rule {
	return floodgate.Rule{Limit: int64(l.RequestsPerUnit), Period: l.Unit.Duration(), Burst: l.Burst}
}

func pbLimit(l *config.Limit) *pb.RateLimitResponse_RateLimit {
	return &pb.RateLimitResponse_RateLimit{Name: l.Name, RequestsPerUnit: l.RequestsPerUnit, Unit: pb.RateLimitResponse_RateLimit_Unit(l.Unit)}
}

// ruleFor returns snap's rule for l, making its policy on first use,
// under the Server's lock: a reload must not replace the snapshot
// between the making and the keeping, or the policy would be lost with
// it.
func (s *Server) ruleFor(snap *snapshot, l *config.Limit) (*rule, error) {
	if r := snap.rules[l.Index].Load(); r != nil {
		return r, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := snap.rules[l.Index].Load(); r != nil {
		return r, nil
	}
	if s.closed {
		return nil, errors.New("rls: the Server is closed")
	}
	// A snapshot that SetConfig has replaced hands no new rule over: one
	// made now would be lost with it. The request uses the current one.
	if cur := s.snap.Load(); cur != snap {
		if nl := cur.cfg.Same(l); nl != nil && !nl.Unlimited {
			if r := cur.rules[nl.Index].Load(); r != nil {
				return r, nil
			}
			snap, l = cur, nl
		}
	}
	r := newRule(l, s.opts.MaxDetailed)
	if err := s.build(r, policyName(l)); err != nil {
		return nil, err
	}
	snap.rules[l.Index].Store(r)
	return r, nil
}

// overrideFor returns the rule of a per-descriptor limit override, in
// use by the caller until it calls release, at now (the Server's
// clock): found with no lock; made, when new, in the table's place or
// in that of an override whose window has ended. It returns nil, and no
// error, when the table is full of overrides whose windows still run.
func (s *Server) overrideFor(rpu uint32, u config.Unit, now int64) (*rule, error) {
	o := override{rpu, u}
	for {
		r, ok := s.overrides.Load(o)
		if !ok {
			var err error
			if r, err = s.newOverride(o); r == nil {
				return nil, err
			}
		}
		r.users.Add(1)
		if r.dead.Load() { // recycled meanwhile: find or make its successor
			r.users.Add(-1)
			continue
		}
		for {
			u := r.used.Load()
			if u >= now || r.used.CompareAndSwap(u, now) {
				break
			}
		}
		return r, nil
	}
}

// release ends a request's use of an override's rule.
func (r *rule) release() { r.users.Add(-1) }

// newOverride makes o's rule, in the table's place or, when the table
// is full, in that of the overrides whose windows have ended (a fixed
// window's keys then hold what new ones would: none gains allowance
// from the new rule). It returns nil, and no error, when the table is
// full and none has ended.
func (s *Server) newOverride(o override) (*rule, error) {
	s.ovMu.Lock()
	defer s.ovMu.Unlock()
	if r, ok := s.overrides.Load(o); ok {
		return r, nil
	}
	if s.ovCount.Load() >= int64(s.opts.MaxOverrides) {
		s.recycleOverrides(s.clock.Now())
		if s.ovCount.Load() >= int64(s.opts.MaxOverrides) {
			return nil, nil
		}
	}
	l := &config.Limit{Key: "override", RequestsPerUnit: o.rpu, Unit: o.unit, Algorithm: floodgate.FixedWindow}
	r := newRule(l, s.opts.MaxDetailed)
	if err := s.build(r, fmt.Sprintf("override %d/%s", o.rpu, o.unit)); err != nil {
		return nil, fmt.Errorf("rls: %w", err)
	}
	s.overrides.Store(o, r)
	s.ovCount.Add(1)
	return r, nil
}

// recycleOverrides drops, at now, every override whose last request's
// window has ended and that no request uses; s.ovMu is held. A request
// that takes an override marks it used before it checks that it is not
// dead, and this marks it dead before it checks that no request uses
// it: one of the two sees the other.
func (s *Server) recycleOverrides(now int64) {
	s.overrides.Range(func(o override, r *rule) bool {
		period := int64(o.unit.Duration())
		if now/period <= r.used.Load()/period {
			return true // its window runs
		}
		r.dead.Store(true)
		if r.users.Load() != 0 {
			r.dead.Store(false)
			return true
		}
		s.overrides.Delete(o)
		s.ovCount.Add(-1)
		r.close()
		return true
	})
}
