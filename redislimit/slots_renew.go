package redislimit

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The renewals of the slots a Store holds. Every third of SlotTTL, one
// pipeline (one round trip per Redis node) gives back the slots held
// ahead that went unused for a third of SlotTTL or may no longer be
// served, and renews every other slot held: one command per client key,
// which answers for each member whether Redis still held it. A member
// that Redis no longer has (it lost its data, failed over to a replica
// that had not seen the member, or let it expire while this replica was
// paused, and then perhaps gave its place to another holder) is dropped:
// out of the renewals, out of its pool if it was held ahead, and, if a
// request holds it, never held ahead again, and released with no round
// trip. A renewal that fails (a timeout, a node down) confirms nothing
// and drops nothing: the slots held ahead are served until their last
// confirmation is SlotTTL old (see slots_pool.go), and the next renewal
// tries again.

// holding is the slots a Store holds on Redis, which its renewer renews:
// by Redis key, each key's members.
type holding struct {
	s       *Store
	mu      sync.Mutex
	keys    map[string]map[string]*redisSlot
	n       int
	running bool          // the renewer runs; it stops when nothing is held
	stop    chan struct{} // closed by Close
	done    chan struct{} // closed when the renewer has stopped

	// around, set only by tests (before the first slot is held), runs
	// each of the renewer's renewals in its place: the seam through which
	// a test pauses one replica's renewals.
	around func(renew func() bool)

	renewals, renewedCmds, lost atomic.Int64
}

// add records h for renewal, and starts the renewer if it is not running.
func (hd *holding) add(h *redisSlot) {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	if hd.keys == nil {
		hd.keys = map[string]map[string]*redisSlot{}
	}
	m := hd.keys[h.rkey]
	if m == nil {
		m = map[string]*redisSlot{}
		hd.keys[h.rkey] = m
	}
	m[h.member] = h
	hd.n++
	if !hd.running {
		select {
		case <-hd.stop:
			return // closed: what is held is no longer renewed
		default:
		}
		hd.running = true
		hd.done = make(chan struct{})
		go hd.renewer(hd.done)
	}
}

// remove takes h out of the renewals.
func (hd *holding) remove(h *redisSlot) {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	hd.removeLocked(h)
}

// removeLocked is remove under mu; it reports whether h was held.
func (hd *holding) removeLocked(h *redisSlot) bool {
	m := hd.keys[h.rkey]
	if m == nil || m[h.member] != h {
		return false
	}
	delete(m, h.member)
	hd.n--
	if len(m) == 0 {
		delete(hd.keys, h.rkey)
	}
	return true
}

// held returns the slots held now.
func (hd *holding) held() int {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	return hd.n
}

// renewer renews every slot held, every third of SlotTTL, until nothing
// is held or the Store closes.
func (hd *holding) renewer(done chan struct{}) {
	defer close(done)
	t := time.NewTicker(hd.s.set.slotTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-hd.stop:
			return
		case <-t.C:
		}
		if hd.around != nil {
			hd.around(hd.renew)
		} else {
			hd.renew()
		}
		hd.mu.Lock()
		if hd.n == 0 {
			hd.running = false
			hd.mu.Unlock()
			return
		}
		hd.mu.Unlock()
	}
}

// renew gives back the slots held ahead that are due (see giveBack) and
// renews every other slot held now, in one pipeline, and drops those that
// Redis no longer held. It reports whether it renewed any.
func (hd *holding) renew() bool {
	s := hd.s
	now, skew := s.slotNow()
	var batch [][]any
	if s.set.lease.Slots > 0 {
		// Slots ahead unused for a renewal period go back, and so do those
		// that may not be served (a renewal failed for SlotTTL).
		s.mu.Lock()
		ps := make([]*slotPolicy, 0, len(s.slotLive))
		for _, p := range s.slotLive {
			ps = append(ps, p)
		}
		s.mu.Unlock()
		for _, p := range ps {
			batch = append(batch, p.giveBack(now-int64(s.set.slotTTL/3), now, skew)...)
		}
	}
	back := len(batch)
	hd.mu.Lock()
	held := make([][]*redisSlot, 0, len(hd.keys))
	for rkey, m := range hd.keys {
		members := make([]any, 0, len(m))
		slots := make([]*redisSlot, 0, len(m))
		for member, h := range m {
			members = append(members, member)
			slots = append(slots, h)
		}
		batch = append(batch, s.slotArgs(rkey, slotRenew, members))
		held = append(held, slots)
	}
	hd.mu.Unlock()
	if len(batch) == 0 {
		return false
	}
	if len(held) > 0 {
		hd.renewals.Add(1)
		hd.renewedCmds.Add(int64(len(held)))
	}
	// Redis renews each member until SlotTTL after it runs the command,
	// which is after this.
	sent, skew := s.slotNow()
	ctx, cancel := context.WithTimeout(context.Background(), s.set.timeout)
	defer cancel()
	var failed error
	for i, c := range s.pipelineEval(ctx, batch, slotsScript.src) {
		if i < back {
			failed = firstErr(failed, c.Err())
			continue
		}
		slots := held[i-back]
		found, err := c.Int64Slice()
		if err == nil && len(found) != len(slots) {
			err = fmt.Errorf("redislimit: the slots script answered %d of %d members", len(found), len(slots))
		}
		if err != nil {
			failed = firstErr(failed, err)
			continue
		}
		var lost []*redisSlot
		for j, h := range slots {
			if found[j] == 1 {
				h.confirm(sent, skew)
			} else {
				lost = append(lost, h)
			}
		}
		if len(lost) > 0 {
			hd.lose(lost)
		}
	}
	if failed != nil && s.set.onError != nil {
		s.set.onError(fmt.Errorf("redislimit: renewing in-flight slots: %w", failed))
	}
	return len(held) > 0
}

// firstErr is the first of two errors that is not nil.
func firstErr(first, next error) error {
	if first != nil {
		return first
	}
	return next
}

// lose drops slots of one client key that Redis no longer held: none is
// renewed again, a parked one leaves its pool, and one that a request
// holds is never parked again and is released with no round trip (see
// redisSlot.Release). Lost counts those the Store still held.
func (hd *holding) lose(lost []*redisSlot) {
	for _, h := range lost {
		h.lost.Store(true)
	}
	hd.mu.Lock()
	for _, h := range lost {
		if hd.removeLocked(h) {
			hd.lost.Add(1)
		}
	}
	hd.mu.Unlock()
	p := lost[0].p
	if p.ahead == 0 {
		return
	}
	v, ok := p.pools.Load(lost[0].rkey)
	if !ok {
		return
	}
	sp := v.(*slotPool)
	sp.mu.Lock()
	sp.free = slices.DeleteFunc(sp.free, func(h *redisSlot) bool {
		if h.lost.Load() {
			h.released.Store(true)
			return true
		}
		return false
	})
	sp.mu.Unlock()
}

// pipelineEval sends every EVALSHA of batch in one pipeline (one round
// trip per Redis node), and those that Redis answered NOSCRIPT again as
// EVAL of src, and returns each command's last answer, in batch's order.
func (s *Store) pipelineEval(ctx context.Context, batch [][]any, src string) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(batch))
	todo := make([]int, len(batch))
	for i := range todo {
		todo[i] = i
	}
	for round := 0; round < 2 && len(todo) > 0; round++ {
		pipe := s.client.Pipeline()
		for _, i := range todo {
			cmds[i] = redis.NewCmd(ctx, batch[i]...)
			pipe.Process(ctx, cmds[i])
		}
		pipe.Exec(ctx)
		s.calls.Add(1)
		again := todo[:0]
		for _, i := range todo {
			if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
				batch[i][0], batch[i][1] = "eval", src
				again = append(again, i)
			}
		}
		if len(again) > 0 {
			s.loads.Add(1)
		}
		todo = again
	}
	return cmds
}

// close stops the renewer. Slots still held are no longer renewed:
// they expire within SlotTTL unless released first.
func (hd *holding) close() {
	hd.mu.Lock()
	select {
	case <-hd.stop:
	default:
		close(hd.stop)
	}
	done := hd.done
	running := hd.running
	hd.running = false
	hd.mu.Unlock()
	if running {
		<-done
	}
}
