package redislimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

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

	renewals, renewedCmds atomic.Int64
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
	if m := hd.keys[h.rkey]; m != nil && m[h.member] == h {
		delete(m, h.member)
		hd.n--
		if len(m) == 0 {
			delete(hd.keys, h.rkey)
		}
	}
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
		if !hd.renew() {
			return
		}
	}
}

// renew renews every slot held now, in one pipeline: one command per key
// (its members together). It reports false, and marks the renewer
// stopped, when nothing is held.
func (hd *holding) renew() bool {
	hd.mu.Lock()
	if hd.n == 0 {
		hd.running = false
		hd.mu.Unlock()
		return false
	}
	s := hd.s
	now, ttl := s.scriptNow(), s.set.slotTTL.Microseconds()
	batch := make([][]any, 0, len(hd.keys))
	for rkey, m := range hd.keys {
		args := make([]any, 0, 9+len(m))
		args = append(args, "evalsha", slotsScript.sha, 1, rkey, slotRenew, now, ttl, 0)
		for member := range m {
			args = append(args, member)
		}
		batch = append(batch, args)
	}
	hd.mu.Unlock()
	hd.renewals.Add(1)
	hd.renewedCmds.Add(int64(len(batch)))
	if s.set.lease.Slots > 0 {
		// Slots ahead unused for a renewal period go back.
		now := s.slotNow()
		s.mu.Lock()
		ps := make([]*slotPolicy, 0, len(s.slotLive))
		for _, p := range s.slotLive {
			ps = append(ps, p)
		}
		s.mu.Unlock()
		for _, p := range ps {
			p.giveBack(now - int64(s.set.slotTTL/3))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.set.timeout)
	defer cancel()
	if err := s.pipelineEval(ctx, batch, slotsScript.src); err != nil && s.set.onError != nil {
		s.set.onError(fmt.Errorf("redislimit: renewing in-flight slots: %w", err))
	}
	return true
}

// pipelineEval sends every EVALSHA of batch in one pipeline, and those
// that Redis answered NOSCRIPT again as EVAL of src; the error is the
// first other failure.
func (s *Store) pipelineEval(ctx context.Context, batch [][]any, src string) error {
	for round := 0; round < 2 && len(batch) > 0; round++ {
		pipe := s.client.Pipeline()
		cmds := make([]*redis.Cmd, len(batch))
		for i, args := range batch {
			cmds[i] = redis.NewCmd(ctx, args...)
			pipe.Process(ctx, cmds[i])
		}
		pipe.Exec(ctx)
		s.calls.Add(1)
		var again [][]any
		for i, c := range cmds {
			err := c.Err()
			switch {
			case err == nil:
			case redis.HasErrorPrefix(err, "NOSCRIPT"):
				args := batch[i]
				args[0], args[1] = "eval", src
				again = append(again, args)
			default:
				return err
			}
		}
		if len(again) > 0 {
			s.loads.Add(1)
		}
		batch = again
	}
	return nil
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
