package redislimit

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// batcher sends the script calls in flight at once on one Limiter as one
// pipeline: one write and one read on each side for the lot, where a call
// apiece would cost each its own (go-redis sends each command on a pooled
// connection of its own, and Redis reads one command per read). It has no
// timer and no goroutine that outlives its work: a caller that finds fewer
// than maxInflight batches in flight leads one, taking everything queued;
// the others wait for their reply. A leader that finds calls queued once
// its batch is answered hands them, as the next batch, to one of their own
// callers, so that no caller waits for more than its own batch and the one
// before it. A caller whose context can end (a request's) leads in a new
// goroutine instead, which it need not wait for, and which sends the
// queued batches itself until none is left. A lone caller is a batch of
// one, sent as a plain command.
//
// A batch of several calls runs under the Limiter's Timeout, never under a
// caller's context: one caller's deadline must not fail the others' calls.
// A batch of one runs under its caller's context, as it would unbatched. A caller whose
// context ends first returns the context's error, and its call may still
// run, as a call whose deadline ends mid-round-trip may. The batch's
// failure (a broken connection, the Timeout) is each of its calls'.
type batcher struct {
	l *Limiter // whose client, Timeout and counts (Calls, Loads) the batches use

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

// slot is one call in a batch: its arguments, its reply, and the channel
// on which its caller learns that the reply is in (or that it leads lead).
type slot struct {
	args  []any
	src   string // the script whole, for EVAL when Redis has lost it
	val   []int64
	err   error
	lead  []*slot  // a batch its caller is to send
	one   [1]*slot // a batch of this slot alone, with no slice to allocate
	state atomic.Int32
	ch    chan struct{}
}

var slots = sync.Pool{New: func() any { return &slot{ch: make(chan struct{}, 1)} }}

// free returns s to the pool, once nothing refers to it.
func (s *slot) free() {
	s.args, s.src, s.val, s.err, s.lead = nil, "", nil, nil, nil
	slots.Put(s)
}

// do sends args, an EVALSHA of the script src, in a batch, and returns the
// reply's integers, or ctx's error if ctx ends first. mayEnd says whether
// the caller's own context can end (ctx adds the budget to it): a caller
// whose context cannot end leads a batch itself, in its own goroutine, at
// no cost of a goroutine or a wake-up; one whose context can end has a
// goroutine lead it, so as to leave when its context ends, as a follower.
func (b *batcher) do(ctx context.Context, mayEnd bool, args []any, src string) ([]int64, error) {
	s := slots.Get().(*slot)
	s.args, s.src = args, src
	s.state.Store(slotPending)
	b.mu.Lock()
	b.queue = append(b.queue, s)
	if b.inflight < maxInflight {
		b.inflight++
		batch := b.take()
		b.mu.Unlock()
		b.start(ctx, s, mayEnd, batch)
	} else {
		b.mu.Unlock()
	}
	for {
		select {
		case <-s.ch:
		case <-ctx.Done():
			if s.state.CompareAndSwap(slotPending, slotAbandoned) {
				return nil, ctx.Err() // the leader frees s
			}
			<-s.ch // answered, or handed a batch: it cannot be abandoned
		}
		if batch := s.lead; batch != nil {
			s.lead = nil
			s.state.Store(slotPending) // s is in batch
			b.start(ctx, s, mayEnd, batch)
			continue
		}
		val, err := s.val, s.err
		s.free()
		return val, err
	}
}

// start has batch sent for the caller of s, whose context is ctx: a batch
// of s alone in the caller's goroutine and under its context, as a call
// without batching would be (the caller's context governs its own call
// alone); another in the caller's goroutine if its context cannot end, or
// else in a new goroutine, so that the caller may leave when its context
// ends, while the batch runs out its Timeout for the others.
func (b *batcher) start(ctx context.Context, s *slot, mayEnd bool, batch []*slot) {
	switch {
	case len(batch) == 1 && batch[0] == s:
		b.lead(ctx, true, batch, false)
	case mayEnd:
		go b.lead(context.Background(), false, batch, true)
	default:
		b.lead(context.Background(), false, batch, false)
	}
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
//
// The first batch is sent under ctx if own (a batch of its caller's call
// alone), and every batch else under the Limiter's Timeout.
func (b *batcher) lead(ctx context.Context, own bool, batch []*slot, alone bool) {
	for {
		b.send(ctx, own, batch)
		own = false
		if batch = b.next(alone); batch == nil {
			return
		}
	}
}

// next takes the next batch for a leader that has sent its own: nil when
// none is queued (the leader is done), or when it went to one of its own
// callers, whom a leader in a caller's goroutine hands it to. A batch whose
// callers have all gone is dropped, unsent.
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
			s.free() // abandoned, every one
		}
	}
}

// send is one round trip for batch, under ctx if own (else under the
// Limiter's Timeout), and a second for the calls whose script Redis had
// lost (NOSCRIPT: they ran nothing), sent whole; then it answers each
// call's caller.
func (b *batcher) send(ctx context.Context, own bool, batch []*slot) {
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
	l := b.l
	l.calls.Add(1)
	if !own {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), l.timeout)
		defer cancel()
	}
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
		l.loads.Add(int64(len(lost)))
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
		} else {
			s.free() // abandoned: its caller is gone
		}
	}
}

// exec sends batch's commands into cmds: one as a plain command, more as a
// pipeline, each marked noRetry.
func (b *batcher) exec(ctx context.Context, batch []*slot, cmds []*redis.IntSliceCmd) {
	for i, s := range batch {
		cmds[i] = redis.NewIntSliceCmd(ctx, s.args...)
	}
	if len(cmds) == 1 {
		_ = b.l.client.Process(ctx, noRetry{cmds[0]})
		return
	}
	pipe := b.l.client.Pipeline()
	for _, cmd := range cmds {
		_ = pipe.Process(ctx, noRetry{cmd})
	}
	_, _ = pipe.Exec(ctx) // each command holds its own error
}
