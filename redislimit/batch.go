package redislimit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/redis/go-redis/v9"
)

// batcher sends the script calls in flight at once on a Store, of every
// policy and key, as one pipeline: one write and one read on each side
// for the lot, where a call apiece would cost each its own (go-redis
// sends each command on a pooled connection of its own, and Redis reads
// one command per read). It has no timer and no goroutine that outlives
// its work: a caller that finds fewer than maxInflight batches in flight
// leads one, taking everything queued; the others wait for their reply.
// A leader that finds calls queued once its batch is answered hands
// them, as the next batch, to one of their own callers, so that no caller
// waits for more than its own batch and the one before it. A caller whose
// context can end (a request's) has a new goroutine lead instead, which
// it need not wait for, and which sends the queued batches itself until
// none is left. A lone caller is a batch of one, sent as a plain command.
//
// Every call has a deadline, its Timeout (or a refill's budget) from
// when it was asked; a batch is sent under the earliest of its calls'
// deadlines, with the values of its first caller's context (a trace
// span reaches go-redis's hooks), but never under a caller's
// cancellation: one caller's leaving must not fail the others' calls. So
// no call waits past its own deadline, queued and sent, whoever sends
// it. A caller whose context ends first returns the context's error: its
// call is not sent if it was still queued; if it was sent, and Redis
// charged it, the charge is given back (see refund). The batch's failure
// (a broken connection, the deadline) is each of its calls'.
type batcher struct {
	s *Store // whose client and counts (Calls, Loads) the batches use

	mu       sync.Mutex
	queue    []*slot
	inflight int // batches being sent, at most maxInflight
}

const (
	// maxInflight is how many batches may be in flight at once: with one,
	// the queue would wait whole round trips; with more, batches shrink
	// toward a call apiece.
	maxInflight = 2
	// maxBatch bounds a batch, so that a leader's caller does not wait on
	// a huge write.
	maxBatch = 128
)

// A slot's states. A caller abandons only a pending slot; a leader answers
// a pending one, and hands the next batch to a pending one (leading).
const (
	slotPending int32 = iota
	slotLeading
	slotDone
	slotAbandoned
)

// slot is one call in a batch: its arguments, its deadline, its caller's
// context (for its values), what to give back if its caller leaves after
// Redis charged it, its reply, and the channel on which its caller learns
// that the reply is in (or that it leads lead).
type slot struct {
	args     []any
	src      string // the script whole, for EVAL when Redis has lost it
	deadline time.Time
	ctx      context.Context
	refund   refund
	val      []int64
	err      error
	lead     []*slot  // a batch its caller is to send
	one      [1]*slot // a batch of this slot alone, with no slice to allocate
	state    atomic.Int32
	ch       chan struct{}
}

// refund is what a call charges, should its caller leave before the
// reply: the policies of its keys (one, or a multi-policy script's), the
// rules it was sent under, and which of them were shadows. The keys and
// the costs are in the call's arguments, and what Redis charged in its
// reply (see Store.refund).
type refund struct {
	n      int // policies; 0 for a call that charges nothing (a dry run, a return)
	multi  bool
	ps     [floodgate.MaxPolicies]*policy
	rss    [floodgate.MaxPolicies]*rules
	shadow [floodgate.MaxPolicies]bool
	check  [floodgate.MaxPolicies]bool // a check (see runMany), which charges nothing
}

var slots = sync.Pool{New: func() any { return &slot{ch: make(chan struct{}, 1)} }}

// free returns s to the pool, once nothing refers to it.
func (s *slot) free() {
	s.args, s.src, s.ctx, s.val, s.err, s.lead = nil, "", nil, nil, nil, nil
	s.refund.n = 0
	slots.Put(s)
}

// do sends args, an EVALSHA of the script src, in a batch, and returns the
// reply's integers, or ctx's error if ctx ends first. The call has until
// deadline; rf says what it charges (nil for nothing). A caller whose
// context cannot end leads a batch itself, in its own goroutine, at no
// cost of a goroutine or a wake-up; one whose context can end has a
// goroutine lead it, so as to leave when its context ends.
func (b *batcher) do(ctx context.Context, args []any, src string, deadline time.Time, rf *refund) ([]int64, error) {
	mayEnd := ctx.Done() != nil
	s := slots.Get().(*slot)
	s.args, s.src, s.deadline, s.ctx = args, src, deadline, ctx
	if rf != nil {
		s.refund = *rf
	}
	s.state.Store(slotPending)
	b.mu.Lock()
	b.queue = append(b.queue, s)
	if b.inflight < maxInflight {
		b.inflight++
		batch := b.take()
		b.mu.Unlock()
		b.start(s, mayEnd, batch)
	} else {
		b.mu.Unlock()
	}
	done := ctx.Done()
	for {
		select {
		case <-s.ch:
		case <-done:
			if s.state.CompareAndSwap(slotPending, slotAbandoned) {
				return nil, ctx.Err() // the leader frees s
			}
			<-s.ch // answered, or handed a batch: it cannot be abandoned
		}
		if batch := s.lead; batch != nil {
			s.lead = nil
			s.state.Store(slotPending) // s is in batch
			b.start(s, mayEnd, batch)
			continue
		}
		val, err := s.val, s.err
		s.free()
		return val, err
	}
}

// start has batch sent for the caller of s: in the caller's goroutine if
// its context cannot end, or else in a new goroutine, so that the caller
// may leave when its context ends, while the batch runs out its deadline
// for the others.
func (b *batcher) start(s *slot, mayEnd bool, batch []*slot) {
	if mayEnd {
		go b.lead(batch, true)
		return
	}
	b.lead(batch, false)
}

// busy reports whether a batch is in flight, or a call queued.
func (b *batcher) busy() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inflight > 0 || len(b.queue) > 0
}

// take removes the next batch from the queue; b.mu is held.
func (b *batcher) take() []*slot {
	n := min(len(b.queue), maxBatch)
	var batch []*slot
	if s := b.queue[0]; n == 1 {
		s.one[0] = s
		batch = s.one[:]
	} else {
		batch = make([]*slot, n)
		copy(batch, b.queue)
	}
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return batch
}

// lead sends batch, then the calls queued meanwhile: in a goroutine of its
// own (alone), until none are; in a caller's, it hands them to one of
// their callers, or sends them itself if every one of them has gone.
func (b *batcher) lead(batch []*slot, alone bool) {
	for {
		b.send(batch)
		if batch = b.next(alone); batch == nil {
			return
		}
	}
}

// next takes the next batch for a leader that has sent its own: nil when
// none is queued (the leader is done), or when it went to one of its own
// callers, whom a leader in a caller's goroutine hands it to. A batch
// whose callers have all gone is dropped, unsent.
func (b *batcher) next(alone bool) []*slot {
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.inflight--
			b.mu.Unlock()
			return nil
		}
		batch := b.take()
		b.mu.Unlock()
		if alone {
			return batch
		}
		for _, s := range batch {
			if s.state.CompareAndSwap(slotPending, slotLeading) {
				s.lead = batch
				s.ch <- struct{}{}
				return nil
			}
		}
		for _, s := range batch {
			s.free() // abandoned, every one, before it was sent
		}
	}
}

// send is one round trip for batch, under its earliest deadline and its
// first caller's values, and a second for the calls whose script Redis
// had lost (NOSCRIPT: they ran nothing), sent whole; then it answers each
// call's caller, and has what Redis charged for a caller that left given
// back.
func (b *batcher) send(batch []*slot) {
	live := batch[:0]
	for _, s := range batch {
		if s.state.Load() == slotAbandoned {
			s.free() // its caller left before it was sent: it runs nowhere
		} else {
			live = append(live, s)
		}
	}
	if batch = live; len(batch) == 0 {
		return
	}
	st := b.s
	st.calls.Add(1)
	deadline := batch[0].deadline
	for _, s := range batch[1:] {
		if s.deadline.Before(deadline) {
			deadline = s.deadline
		}
	}
	ctx, cancel := st.budget.with(batch[0].ctx, deadline)
	defer cancel()
	var one [1]*redis.IntSliceCmd
	cmds := one[:]
	if len(batch) > 1 {
		cmds = make([]*redis.IntSliceCmd, len(batch))
	}
	b.exec(ctx, batch, cmds)
	var lost []*slot
	var lostAt []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			s := batch[i]
			s.args[0], s.args[1] = "eval", s.src
			lost, lostAt = append(lost, s), append(lostAt, i)
		}
	}
	if len(lost) > 0 {
		st.loads.Add(int64(len(lost)))
		again := make([]*redis.IntSliceCmd, len(lost))
		b.exec(ctx, lost, again)
		for j, i := range lostAt {
			cmds[i] = again[j]
		}
	}
	for i, s := range batch {
		s.val, s.err = cmds[i].Val(), cmds[i].Err()
		if s.state.CompareAndSwap(slotPending, slotDone) {
			s.ch <- struct{}{}
			continue
		}
		// Abandoned while in flight: its caller is gone.
		if s.err == nil && s.refund.n > 0 {
			st.refund(s.args, s.refund, s.val)
		}
		s.free()
	}
}

// exec sends batch's commands into cmds: one as a plain command, more as a
// pipeline, each marked noRetry.
func (b *batcher) exec(ctx context.Context, batch []*slot, cmds []*redis.IntSliceCmd) {
	for i, s := range batch {
		cmds[i] = redis.NewIntSliceCmd(ctx, s.args...)
	}
	if len(cmds) == 1 {
		_ = b.s.client.Process(ctx, noRetry{cmds[0]})
		return
	}
	pipe := b.s.client.Pipeline()
	for _, cmd := range cmds {
		_ = pipe.Process(ctx, noRetry{cmd})
	}
	_, _ = pipe.Exec(ctx) // each command holds its own error
}
