package redislimit

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/redis/go-redis/v9"
)

// rules is one rule in force, in every form a call needs. The Limiter holds
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
	// Limiter.redisNow reads it) is when its oldest change may go, 0
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
	if _, err := floodgate.New(floodgate.Config{Algorithm: name, Rule: r}); err != nil {
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

// newRules is rule r, of step interval µs, as l's calls need it, with
// history h.
func (l *Limiter) newRules(r floodgate.Rule, interval int64, h []change, gen int64) *rules {
	rs := &rules{rule: r, interval: interval, capacity: r.Capacity(), history: h, gen: gen}
	if l.kind == kindLog {
		rs.hold = interval // how far ahead a lease is stamped; without leases, only in range
	}
	if ls := l.lease; ls != nil {
		rs.target = ls.ttl / 2
		switch l.kind {
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
		rs.hist = make([]any, 0, 3*len(h))
		for _, c := range h {
			rs.hist = append(rs.hist, c.interval, c.capacity, c.end)
		}
		rs.pruneAt = h[0].expires
	}
	l.box(rs)
	return rs
}

// box boxes rs's arguments to the scripts; tests call it again after
// changing the margin or the hold.
func (l *Limiter) box(rs *rules) {
	rs.argv = [argHistory]any{}
	rs.argv[argNow] = int64(nowTIME)
	rs.argv[argKind] = int64(l.kind)
	rs.argv[argInterval] = rs.interval
	rs.argv[argCapacity] = rs.capacity
	rs.argv[argMargin] = l.margin
	rs.argv[argParam] = rs.hold
}

// rs is the rule in force.
func (l *Limiter) rs() *rules { return l.cur.Load() }

// SetRule makes r the rule of every key from now on, in Redis and, if
// Config.Local was nil, in the FailLocal limiter. It validates r as New
// does and returns New's error for a rule New would refuse (with the
// Limiter's algorithm); then nothing changes. It is safe to call at any
// time, from any goroutine, beside any other method; calls to SetRule are
// applied one at a time. A rule with the same step and capacity in
// microseconds as the one in force changes nothing in Redis.
//
// No key gains allowance from the change. At its instant T, each key holds
// at most min(what it held, the new capacity), and from then on it refills
// at the new rate; a key created after the change starts full under the
// new rule. What a key held, and holds after, is:
//
//   - token_bucket, leaky_bucket: its tokens at T, whole and the fraction
//     of one it is refilling; it holds min(tokens, new capacity), with the
//     fraction scaled to the new step (dropped when it cannot be exactly),
//     and refills at the new rate from there.
//   - fixed_window, sliding_counter: the largest cost a request at T could
//     take (0 if T lies in a window before the key's own). The key moves to
//     the new period's window of T, with min(held, new Limit) left in it
//     and no previous window's count.
//   - sliding_log: Limit minus the cost in the window where a request at T
//     is charged. The key holds one entry, stamped at T (or at its latest
//     entry, if later), of the cost that leaves it min(held, new Limit).
//
// T is Redis's clock when SetRule asks it (TIME, within Timeout); if
// Redis does not answer, it is this machine's clock, corrected by what
// the last answer said of the two clocks' difference. Redis holds each key
// with the rule it was written under and the instant it was written at,
// and the Limiter sends its calls the rules it changed from, with the
// instants of the changes, until every key written under them has expired
// (at most 16 changes; a key untouched across more holds nothing at the
// 16th from the latest). A key's first call after the change converts it,
// in the script, atomically: from the rule it was written under, at each
// change since, exactly as if it had been converted at the change.
//
// Across replicas: a replica converts a key written under a rule of its
// own history at that history's changes, and a key written by a replica
// that ran another rule (during a rollout, before or after its change) at
// the call's own instant, from whatever rule the key holds: a conversion
// never adds to what a key holds, and a key always refills at the rate of
// the rule it was last written under. So while replicas run different
// rules, a key's allowance never exceeds the largest of their capacities,
// it refills at most at the fastest of their rates (the windows, whose
// counts restart at each rule's boundaries: at most at the sum of their
// rates), and once every replica runs the new rule, every key holds at
// most what the contract says, less what the replicas that had not yet
// changed admitted after T.
//
// In lease mode, every batch this replica holds is dropped at the change
// (its units lapse, and count in Stats.Lapsed), cached denials are
// forgotten, and a return or renewal sent under the old rule does nothing
// to a key converted since: no unit leased under the old rule is spent
// after SetRule returns, but for requests that race it.
func (l *Limiter) SetRule(r floodgate.Rule) error {
	s, _, interval, err := parseRule(l.name, r)
	if err != nil {
		return err
	}
	if s != l.script {
		return fmt.Errorf("redislimit: rule %+v would change the algorithm's script", r) // parseRule keeps the algorithm: cannot happen
	}
	if l.lease != nil {
		if err := l.lease.check(l.kind, r.Capacity(), interval); err != nil {
			return err
		}
	}
	l.setMu.Lock()
	defer l.setMu.Unlock()
	if l.localFollows {
		if err := l.local.SetRule(r); err != nil {
			return fmt.Errorf("redislimit: Local: %w", err)
		}
	}
	cur := l.rs()
	if interval == cur.interval && r.Capacity() == cur.capacity {
		l.cur.Store(l.newRules(r, interval, cur.history, cur.gen))
		return nil
	}
	at := l.changeInstant()
	h := append([]change(nil), cur.history...)
	if len(h) > 0 {
		at = max(at, h[len(h)-1].end) // changes keep their order on the clock
	}
	h = append(h, change{interval: cur.interval, capacity: cur.capacity, end: at, expires: at + l.ttlMax(cur)})
	if len(h) > maxHistory {
		// The oldest are cut short: one change of no known rule, which
		// lasts as long as the longest of theirs.
		cut := len(h) - maxHistory + 1
		c := change{end: h[cut-1].end}
		for _, o := range h[:cut] {
			c.expires = max(c.expires, o.expires)
		}
		h = append([]change{c}, h[cut:]...)
	}
	l.cur.Store(l.newRules(r, interval, h, cur.gen+1))
	l.retireLeases()
	return nil
}

// ttlMax is the longest a key written under rs lives in Redis, µs: its
// TTL's longest, plus a second for the rounding and the clocks.
func (l *Limiter) ttlMax(rs *rules) int64 {
	life := 2 * rs.interval // the sliding counter: two windows; the log: a window after a stamp at most a window ahead
	if l.kind == kindBucket {
		life = rs.interval * rs.capacity
	}
	return life + (l.margin+1000)*1000
}

// changeInstant is the instant of a change, on Redis's clock: TIME,
// within Timeout; else this machine's clock and the last offset seen.
// (With a test's clock, that clock's now.)
func (l *Limiter) changeInstant() int64 {
	if now := l.scriptNow(); now != nowTIME {
		return now
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	before := time.Now()
	cmd := redis.NewTimeCmd(ctx, "time")
	if err := l.client.Process(ctx, noRetry{cmd}); err == nil {
		t := cmd.Val()
		// The server read its clock between the call and its answer: the
		// midpoint's offset is off by at most half the round trip.
		mid := before.Add(time.Since(before) / 2)
		l.offset.Store(t.UnixMicro() - mid.UnixMicro())
		return t.UnixMicro()
	}
	return l.redisNow()
}

// redisNow is Redis's clock now as this machine sees it, µs. (With a
// test's clock, that clock's now.)
func (l *Limiter) redisNow() int64 {
	if now := l.scriptNow(); now != nowTIME {
		return now
	}
	return time.Now().UnixMicro() + l.offset.Load()
}

// prune drops from rs's history the changes whose keys have all expired
// by now (Redis's clock, µs, as redisNow reads it), if it is still the
// rule in force. Calls find it due (rs.pruneAt) and call it; a rule that
// lost the race is left as it is.
func (l *Limiter) prune(rs *rules, now int64) {
	if now < rs.pruneAt || !l.setMu.TryLock() {
		return
	}
	defer l.setMu.Unlock()
	if l.rs() != rs {
		return
	}
	h := rs.history
	for len(h) > 0 && h[0].expires <= now {
		h = h[1:]
	}
	l.cur.Store(l.newRules(rs.rule, rs.interval, append([]change(nil), h...), rs.gen))
}

// retireLeases drops every batch this replica holds and every cached
// denial, after the rule changed: what a batch held was leased under the
// old rule, and is not spent under the new one. Its units lapse: giving
// them back would only find keys converted since, which take no return.
func (l *Limiter) retireLeases() {
	ls := l.lease
	if ls == nil {
		return
	}
	ls.states.Range(func(_ string, st *leaseState) bool {
		for _, p := range []*atomic.Pointer[grant]{&st.g, &st.next} {
			if g := p.Swap(nil); g != nil {
				ls.lapse(g)
			}
		}
		st.deniedUntil.Store(0)
		return true
	})
}
