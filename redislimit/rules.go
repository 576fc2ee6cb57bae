package redislimit

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/redis/go-redis/v9"
)

// rules is one rule in force, in every form a call needs. The policy holds
// the current one and SetRule replaces it whole; a call reads it once, so
// that its arguments, its reply's Limit and a lease it takes are all of one
// rule. A rules is never changed once published (but for tests' box).
type rules struct {
	rule     floodgate.Rule
	interval int64 // µs per token (buckets) or per window (windows, log)
	capacity int64
	hold     int64 // the log: µs for which a lease is stamped ahead; 0 for the other kinds
	step     int64 // lease mode, the buckets: ns per unit; 0 otherwise
	target   int64 // lease mode: ns a batch is sized to last
	// argv is the rule's part of the scripts' arguments, indexed as ARGV
	// (argKind on, and argNow's nowTIME), boxed once, not per call.
	argv [argHistory]any
	// history is what the rule changed from, oldest first, and hist its
	// arguments to the scripts, boxed; pruneAt (µs of Redis's clock, as
	// Store.redisNow reads it) is when its oldest change may go, 0
	// without a history.
	history []change
	hist    []any
	pruneAt int64
	// gen counts the changes since New: a lease's batch is of the rule of
	// its gen, and a SetRule that changes nothing in Redis keeps it.
	gen int64
}

// change is a rule that was in force until end (µs of Redis's clock), and
// expires, when every key written under it before end has gone from Redis.
// interval 0 is a history cut short: the rules before end are not known.
type change struct {
	interval, capacity, end, expires int64
}

// maxHistory bounds the changes a call carries: beyond it, the oldest are
// cut short (their keys are read as holding nothing at the cut), so that
// a storm of SetRule calls cannot make every call's arguments grow.
const maxHistory = 16

// parseRule validates r for algorithm name as New does, and returns the
// script and kind that decide it, with its step in µs.
func parseRule(name string, r floodgate.Rule) (s *script, kind scriptKind, interval int64, err error) {
	if err := floodgate.CheckRule(name, r); err != nil {
		return nil, 0, 0, fmt.Errorf("redislimit: %w", err)
	}
	capacity := r.Capacity()
	switch name {
	case floodgate.TokenBucket, floodgate.LeakyBucket:
		interval, err := micros(ceilDiv(int64(r.Period), r.Limit), "Period/Limit")
		if err != nil {
			return nil, 0, 0, err
		}
		if capacity > maxTau/interval {
			return nil, 0, 0, fmt.Errorf("redislimit: a burst of %d at %dµs per token is beyond the script's range (2^50 µs)", capacity, interval)
		}
		return gcraScript, kindBucket, interval, nil
	case floodgate.FixedWindow, floodgate.SlidingCounter:
		period, err := micros(int64(r.Period), "Period")
		if err != nil {
			return nil, 0, 0, err
		}
		kind := kindFixedWindow
		if name == floodgate.SlidingCounter {
			kind = kindSlidingCounter
			if r.Limit > maxSlidingProduct/period {
				return nil, 0, 0, fmt.Errorf("redislimit: sliding_counter needs Limit × Period ≤ 2^52 µs to stay exact; %d × %dµs is beyond it", r.Limit, period)
			}
		}
		return windowScript, kind, period, nil
	case floodgate.SlidingLog:
		period, err := micros(int64(r.Period), "Period")
		if err != nil {
			return nil, 0, 0, err
		}
		switch {
		case period > maxLogPeriod:
			return nil, 0, 0, fmt.Errorf("redislimit: sliding_log needs Period ≤ 2^50 µs to stay exact; %dµs is beyond it", period)
		case r.Limit > maxLogLimit:
			return nil, 0, 0, fmt.Errorf("redislimit: sliding_log needs Limit ≤ 2^31 to stay exact; %d is beyond it", r.Limit)
		}
		return logScript, kindLog, period, nil
	}
	return nil, 0, 0, fmt.Errorf("redislimit: algorithm %q has no Redis form (supported: %s, %s, %s, %s, %s)",
		name, floodgate.TokenBucket, floodgate.LeakyBucket, floodgate.FixedWindow, floodgate.SlidingCounter, floodgate.SlidingLog)
}

// newRules is rule r, of step interval µs, as p's calls need it, with
// history h, whose arguments to the scripts, boxed, are hist (three a
// change: interval, capacity, end). A change's boxes never change, so
// that each new rules shares those of the changes it carries over, and
// boxes only its new ones.
func (p *policy) newRules(r floodgate.Rule, interval int64, h []change, hist []any, gen int64) *rules {
	rs := &rules{rule: r, interval: interval, capacity: r.Capacity(), history: h, hist: hist, gen: gen}
	if p.kind == kindLog {
		rs.hold = interval // how far ahead a lease is stamped; without leases, only in range
	}
	if ls := p.s.lease; ls != nil {
		rs.target = ls.ttl / 2
		switch p.kind {
		case kindBucket:
			rs.step = interval * 1000
		case kindLog:
			// A batch is one entry stamped hold ahead, and spendable for
			// hold from when its call was sent: 100 ms (or the batch's
			// target time, TTL/2, if shorter), within a window. Redis counts
			// the entry from its grant until a window after its stamp, so a
			// longer hold would keep unspent units from the other replicas
			// the longer (with a hold of a whole window, four replicas at a
			// limit got 68% of it).
			rs.hold = max(1, min(ceilDiv(min(int64(logHold), rs.target), 1000), interval))
			rs.target = rs.hold * 1000 // a batch is sized to last its hold
		}
	}
	if len(h) > 0 {
		rs.pruneAt = h[0].expires
	}
	p.box(rs)
	return rs
}

// box boxes rs's arguments to the scripts; tests call it again after
// changing the margin or the hold.
func (p *policy) box(rs *rules) {
	rs.argv = [argHistory]any{}
	rs.argv[argNow] = int64(nowTIME)
	rs.argv[argKind] = int64(p.kind)
	rs.argv[argInterval] = rs.interval
	rs.argv[argCapacity] = rs.capacity
	rs.argv[argMargin] = p.s.margin
	rs.argv[argParam] = rs.hold
}

// SetRule changes the policy's rule: see Limiter.SetRule, which is the
// one policy's of a Limiter.
func (p *policy) SetRule(r floodgate.Rule) error {
	sc, _, interval, err := parseRule(p.alg, r)
	if err != nil {
		return err
	}
	if sc != p.script {
		return fmt.Errorf("redislimit: rule %+v would change the algorithm's script", r) // parseRule keeps the algorithm: cannot happen
	}
	if ls := p.s.lease; ls != nil {
		if err := ls.check(p.kind, r.Capacity(), interval); err != nil {
			return err
		}
	}
	p.setMu.Lock()
	defer p.setMu.Unlock()
	if t := p.twin.Load(); t != nil && p.localRule == nil {
		if err := t.pol.SetRule(r); err != nil {
			return fmt.Errorf("redislimit: Local: %w", err)
		}
	}
	cur := p.rs()
	if interval == cur.interval && r.Capacity() == cur.capacity {
		p.cur.Store(p.newRules(r, interval, cur.history, cur.hist, cur.gen))
		return nil
	}
	at := p.s.changeInstant()
	kept, keptHist := cur.history, cur.hist
	if len(kept) > 0 {
		at = max(at, kept[len(kept)-1].end) // changes keep their order on the clock
	}
	last := change{interval: cur.interval, capacity: cur.capacity, end: at, expires: at + p.ttlMax(cur)}
	var head []change
	if len(kept)+1 > maxHistory {
		// The oldest are cut short: one change of no known rule, which
		// lasts as long as the longest of theirs.
		cut := len(kept) + 2 - maxHistory
		c := change{end: kept[cut-1].end}
		for _, o := range kept[:cut] {
			c.expires = max(c.expires, o.expires)
		}
		head, kept, keptHist = []change{c}, kept[cut:], keptHist[3*cut:]
	}
	h := make([]change, 0, len(head)+len(kept)+1)
	h = append(append(append(h, head...), kept...), last)
	hist := make([]any, 0, 3*len(h))
	for _, c := range head {
		hist = append(hist, c.interval, c.capacity, c.end)
	}
	hist = append(append(hist, keptHist...), last.interval, last.capacity, last.end)
	// A new gen: every batch and cached denial of the old rule is spent
	// or answered no more (see take and cachedDenial).
	p.cur.Store(p.newRules(r, interval, h, hist, cur.gen+1))
	return nil
}

// ttlMax is the longest a key written under rs lives in Redis, µs: its
// TTL's longest, plus a second for the rounding and the clocks.
func (p *policy) ttlMax(rs *rules) int64 {
	life := 2 * rs.interval // the sliding counter: two windows; the log: a window after a stamp at most a window ahead
	if p.kind == kindBucket {
		life = rs.interval * rs.capacity
	}
	return life + (p.s.margin+1000)*1000
}

// offsetFresh is how long a difference of the two clocks read from
// Redis's TIME serves changeInstant before it asks again.
const offsetFresh = time.Second

// changeInstant is the instant of a change, on Redis's clock: this
// machine's, and the difference that Redis's TIME gave, asked again
// (within Timeout) when the last was read more than offsetFresh ago; if
// Redis does not answer, the last difference known. (With a test's
// clock, that clock's now.)
func (s *Store) changeInstant() int64 {
	if now := s.scriptNow(); now != nowTIME {
		return now
	}
	if at := s.offsetAt.Load(); at != 0 && time.Since(time.Unix(0, at)) < offsetFresh {
		return s.redisNow()
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.set.timeout)
	defer cancel()
	before := time.Now()
	cmd := redis.NewTimeCmd(ctx, "time")
	if err := s.client.Process(ctx, noRetry{cmd}); err == nil {
		t := cmd.Val()
		// The server read its clock between the call and its answer: the
		// midpoint's offset is off by at most half the round trip.
		mid := before.Add(time.Since(before) / 2)
		s.offset.Store(t.UnixMicro() - mid.UnixMicro())
		s.offsetAt.Store(mid.UnixNano())
		return t.UnixMicro()
	}
	return s.redisNow()
}

// redisNow is Redis's clock now as this machine sees it, µs. (With a
// test's clock, that clock's now.)
func (s *Store) redisNow() int64 {
	if now := s.scriptNow(); now != nowTIME {
		return now
	}
	return time.Now().UnixMicro() + s.offset.Load()
}

// prune drops from rs's history the changes whose keys have all expired
// by now (Redis's clock, µs, as redisNow reads it), if it is still the
// rule in force. Calls find it due (rs.pruneAt) and call it; a rule that
// lost the race is left as it is.
func (p *policy) prune(rs *rules, now int64) {
	if now < rs.pruneAt || !p.setMu.TryLock() {
		return
	}
	defer p.setMu.Unlock()
	if p.rs() != rs {
		return
	}
	h, hist := rs.history, rs.hist
	for len(h) > 0 && h[0].expires <= now {
		h, hist = h[1:], hist[3:]
	}
	if len(h) == 0 {
		h, hist = nil, nil
	}
	p.cur.Store(p.newRules(rs.rule, rs.interval, append([]change(nil), h...), hist, rs.gen))
}
