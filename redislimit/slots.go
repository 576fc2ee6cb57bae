package redislimit

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/storekit"
)

// In-flight policies on Redis. A client's slots are one sorted set, its
// holders scored by when they expire (see slots.lua): an acquisition is
// one script that drops the expired holders and adds its own if fewer
// than the limit remain, a release one that removes it. The Store keeps
// the slots it holds in a table, and renews all of them every third of
// Config.SlotTTL, in one pipeline (one round trip per Redis node), so a
// living holder's slot never expires and a dead replica's do. The renewal
// says which members Redis still had: a slot it no longer had is dropped
// (see slots_renew.go), and lease mode serves a slot held ahead only
// while Redis is known to hold it (see slots_pool.go).

//go:embed slots.lua
var slotsSource string

var slotsScript = &script{src: slotsSource, sha: sha1hex(slotsSource)}

// The ops of slots.lua.
const (
	slotAcquire = 1
	slotRelease = 2
	slotRenew   = 3
)

// maxSlotsAhead bounds Lease.Slots.
const maxSlotsAhead = 64

// slotPolicy is a Store's in-flight policy.
type slotPolicy struct {
	s       *Store
	name    string
	keyHead string // "<Prefix>:<policy hash>:slots:"
	limit   atomic.Int64
	ahead   int      // Lease.Slots
	pools   sync.Map // lease mode: Redis key → *slotPool
	poolsMu sync.Mutex
	closed  bool // under poolsMu: Close has run, and no pool is made

	localOnce sync.Once
	local     atomic.Pointer[inflight.Limiter] // FailLocal's, made at the first fallback
}

// SlotPolicy returns an in-flight policy named name: at most limit slots
// of each client held at once across every replica on the Store's Redis,
// limit from 1 to inflight.MaxLimit. A slot is one member of its client's
// sorted set, with an expiry that the Store renews while it is held (see
// Config.SlotTTL): exact while the holders keep up their renewals. An
// acquisition is one round trip, and so is a release; with Lease.Slots,
// one served from the slots held ahead is none.
//
// Each renewal learns which of the Store's members Redis still has. When
// Redis loses them (FLUSHALL, a restart or a failover that lost the last
// writes, or members that expired while this replica was paused, which
// another may then take), the Store drops the slots it had: a slot held
// ahead is served only while a renewal or acquisition sent less than
// SlotTTL ago found it on Redis, and a slot that a renewal did not find
// is never served again. A request that holds a lost slot runs to its
// end (nothing can take a slot back from a handler), so after such a
// loss the replicas together may hold more than limit, but are back
// within it after at most one SlotTTL plus the longest request held, and
// stay there.
//
// When Redis cannot answer an acquisition, the FailureMode does:
// FailOpen admits it with a slot that holds nothing, FailClosed refuses
// it, FailError refuses it with its error (see FailError), and FailLocal
// decides it by an inflight.Limiter of limit in this
// process (each replica then allows limit on its own). A caller whose
// context ends before Redis answers is refused; a slot that Redis gave it
// meanwhile is released.
func (s *Store) SlotPolicy(name string, limit int) (floodgate.SlotPolicy, error) {
	if err := checkSlotLimit(limit); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil, errors.New("redislimit: SlotPolicy after Close")
	}
	if s.live[name] != nil || s.slotLive[name] != nil {
		return nil, fmt.Errorf("redislimit: slot policy %q: %w", name, floodgate.ErrSlotName)
	}
	sum := sha256.Sum256([]byte(name))
	p := &slotPolicy{s: s, name: name, keyHead: s.set.prefix + ":" + hex.EncodeToString(sum[:8]) + ":slots:", ahead: s.set.lease.Slots}
	p.limit.Store(int64(limit))
	if s.slotLive == nil {
		s.slotLive = map[string]*slotPolicy{}
	}
	s.slotLive[name] = p
	return p, nil
}

// checkSlotLimit refuses an in-flight limit out of range.
func checkSlotLimit(limit int) error {
	if limit < 1 || limit > inflight.MaxLimit {
		return fmt.Errorf("redislimit: an in-flight limit must be 1 to %d slots per client, got %d", inflight.MaxLimit, limit)
	}
	return nil
}

// key is the Redis key of client key's slots: braced, so that a Redis
// Cluster keeps the one key on one node, and with Config.HashTag as a
// rate policy's key.
func (p *slotPolicy) key(key string) string {
	return hashedKey(p.keyHead, key, true, p.s.set.hashTag)
}

// Limit returns the policy's limit.
func (p *slotPolicy) Limit() int { return int(p.limit.Load()) }

// SetLimit changes the limit: the next acquisitions count against it,
// on every replica once each has it. Holders above a lowered limit keep
// their slots until they release them.
func (p *slotPolicy) SetLimit(limit int) error {
	if err := checkSlotLimit(limit); err != nil {
		return err
	}
	p.limit.Store(int64(limit))
	if l := p.local.Load(); l != nil {
		l.SetLimit(limit)
	}
	return nil
}

// Acquire takes one of key's slots on Redis, if one is free: one round
// trip. See SlotPolicy.
func (p *slotPolicy) Acquire(ctx context.Context, key string) (floodgate.Slot, bool, error) {
	s := p.s
	rkey := p.key(key)
	var pool *slotPool
	if p.ahead > 0 {
		pool = p.pool(rkey) // nil once the policy is closed
		if h := pool.take(s); h != nil {
			if err := ctx.Err(); err != nil {
				if !pool.put(h, s) { // the pool filled, or went, meanwhile
					go h.Release()
				}
				return floodgate.Slot{}, false, err
			}
			s.results.Inc(int(resAllowed))
			return storekit.HeldSlot(&leasedSlot{h: h, pool: pool}), true, nil
		}
	}
	member := s.slotMember()
	// Redis holds what it grants until SlotTTL after it runs the script,
	// which is after this.
	sent, skew := s.slotNow()
	args := []any{"evalsha", slotsScript.sha, 1, rkey, slotAcquire, s.scriptNow(), s.set.slotTTL.Microseconds(), p.limit.Load(), member}
	if pool != nil {
		for range p.ahead {
			args = append(args, s.slotMember())
		}
	}
	var v []int64
	o, err := s.guarded(ctx, s.set.timeout, func() (err error) {
		v, err = s.batch.do(ctx, args, slotsScript.src, time.Now().Add(s.set.timeout), nil)
		if err == nil && len(v) != 2 {
			err = fmt.Errorf("redislimit: the slots script answered %v", v)
		}
		return err
	})
	switch o {
	case tripAnswered:
		if v[0] < 1 {
			s.results.Inc(int(resDenied))
			return floodgate.Slot{}, false, nil
		}
		s.results.Inc(int(resAllowed))
		h := &redisSlot{p: p, rkey: rkey, member: member}
		h.confirm(sent, skew)
		s.holding.add(h)
		if pool == nil {
			return storekit.HeldSlot(h), true, nil
		}
		p.park(pool, rkey, args[9:8+v[0]], sent, skew) // the slots ahead that Redis granted
		return storekit.HeldSlot(&leasedSlot{h: h, pool: pool}), true, nil
	case tripAbandoned:
		s.abandoned.Add(1)
		s.results.Inc(int(resAbandoned))
		// Redis may have run the script after the caller left: remove the
		// members, which removes nothing if they never got there.
		p.removeLater(rkey, args[8:]...)
		return floodgate.Slot{}, false, err
	}
	// So may a Redis that did not answer in time, when it comes back.
	// (Its script may also run after this removal, on another
	// connection: its members then hold slots, unrenewed, until they
	// expire, within SlotTTL.)
	p.removeLater(rkey, args[8:]...)
	s.fallbacks.Add(1)
	s.results.Inc(int(s.failResult()))
	switch s.set.mode {
	case FailOpen:
		return floodgate.Slot{}, true, nil
	case FailClosed:
		return floodgate.Slot{}, false, nil
	case FailError:
		return floodgate.Slot{}, false, s.unreachedErr(err)
	}
	p.localOnce.Do(func() {
		l, _ := inflight.New(inflight.Config{Limit: p.Limit(), MaxKeys: s.set.localMaxKeys, IdleTTL: floodgate.Never}) // the limit was checked
		p.local.Store(l)
	})
	ls, ok := p.local.Load().TryAcquire(key)
	if !ok {
		return floodgate.Slot{}, false, nil
	}
	return storekit.HeldSlot(ls), true, nil // FailLocal's limiter gave ls
}

// remove releases members of rkey on Redis, within Timeout, whatever the
// breaker says: a release that fails leaves the slots to expire.
func (p *slotPolicy) remove(rkey string, members ...any) {
	s := p.s
	ctx, cancel := context.WithTimeout(context.Background(), s.set.timeout)
	defer cancel()
	args := s.slotArgs(rkey, slotRelease, members)
	if _, err := s.batch.do(ctx, args, slotsScript.src, time.Now().Add(s.set.timeout), nil); err != nil && s.set.onError != nil {
		s.set.onError(err)
	}
}

// removeLater is remove in the background, which the Store's Close
// waits for.
func (p *slotPolicy) removeLater(rkey string, members ...any) {
	s := p.s
	s.refunds.Add(1)
	go func() {
		defer s.refunds.Done()
		p.remove(rkey, members...)
	}()
}

// AppendCounts appends nothing: a slot policy's decisions are the
// Store's counts, and the middleware keeps its gauge.
func (p *slotPolicy) AppendCounts(dst []counts.Sample) []counts.Sample { return dst }

// slotArgs is the EVALSHA of slots.lua's op on members of rkey (not an
// acquisition, which also sends the limit).
func (s *Store) slotArgs(rkey string, op int, members []any) []any {
	return append([]any{"evalsha", slotsScript.sha, 1, rkey, op, s.scriptNow(), s.set.slotTTL.Microseconds(), 0}, members...)
}

// Close takes the policy out of the Store. Its slots held stay valid, and
// renewed, until released; those held ahead go back to Redis, in one
// pipeline, and it holds none ahead from then on.
func (p *slotPolicy) Close() error {
	p.s.mu.Lock()
	if p.s.slotLive[p.name] == p {
		delete(p.s.slotLive, p.name)
	}
	p.s.mu.Unlock()
	if l := p.local.Load(); l != nil {
		l.Close()
	}
	p.poolsMu.Lock()
	p.closed = true
	p.poolsMu.Unlock()
	now, skew := p.s.slotNow()
	p.s.sendReleases(p.giveBack(math.MaxInt64, now, skew))
	return nil
}

// redisSlot is a slot held on Redis.
type redisSlot struct {
	p        *slotPolicy
	rkey     string
	member   string
	released atomic.Bool // given back, or dropped while held ahead: no longer held here
	lost     atomic.Bool // a renewal did not find it on Redis: never held ahead again

	// Redis holds the member at least until, in slot ns (see slotNow),
	// unless it loses it: SlotTTL less a µs after the sending of the
	// latest round trip that found it there. skew is the wall clock less
	// the monotonic one at that sending. See usable.
	until, skew atomic.Int64
	parkedAt    int64 // slot ns when it was last held ahead, under its pool's mu
}

// Release gives the slot back on Redis, once: it stops its renewals and
// removes its member, in one round trip (a release that fails leaves the
// slot to expire within SlotTTL), which the caller waits for unless the
// Store's breaker is open. A slot that Redis lost is only forgotten: its
// member is not there to remove.
func (h *redisSlot) Release() bool {
	if !h.released.CompareAndSwap(false, true) {
		return false
	}
	s := h.p.s
	s.holding.remove(h)
	switch {
	case h.lost.Load():
	case s.breaker.openUntil.Load() != closed:
		// Redis is failing: the release goes in the background, so that
		// a request waits on Redis's failure once, in its decision, not
		// again as it ends. (The member, no longer renewed, expires
		// within SlotTTL if it never gets there.)
		h.p.removeLater(h.rkey, h.member)
	default:
		h.p.remove(h.rkey, h.member)
	}
	return true
}

// slotMember returns a member name no other holder uses: the Store's
// random id and a count.
func (s *Store) slotMember() string {
	s.slotOnce.Do(func() { s.slotID = strconv.FormatUint(rand.Uint64(), 36) + ":" })
	return s.slotID + strconv.FormatUint(s.slotSeq.Add(1), 36)
}
