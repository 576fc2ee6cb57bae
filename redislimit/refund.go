package redislimit

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// giveBack is units that a call took from key rkey of policy p, going
// back to Redis under the rule of gen, to where k says they were charged
// (see call's gk): a lease's unspent units, or a request's whose caller
// left (a refund).
type giveBack struct {
	p     *policy
	rkey  string
	units int64
	k     int64
	gen   int64
}

// backOf is what goes back of units charged to rkey of p by a call whose
// script answered vals (its seven values), under rs: to the slots that
// ended at the TAT the call left (the buckets), to the window it charged
// (the windows), or to the entry it stamped (the log).
func backOf(p *policy, rkey string, units int64, vals []int64, rs *rules) giveBack {
	return giveBack{p: p, rkey: rkey, units: units, k: chargedAt(p.kind, vals[6], vals[5]), gen: rs.gen}
}

// chargedAt is where a call charged, from its reply's k and horizon, as
// a return's gk names it: the TAT it left (the buckets), its window (the
// windows), or its entry's stamp (the log, whose reply's k is the stamp
// plus the hold).
func chargedAt(kind scriptKind, k, horizon int64) int64 {
	switch kind {
	case kindBucket:
		return k + horizon
	case kindLog:
		return k - horizon
	}
	return k
}

// refund gives back, in a round trip of its own, what a call of args
// charged, which Redis answered with val after its caller had left (see
// Store.Decide): a call of one policy, its cost; the multi-policy
// script, each charged policy's; with what each leased beside it, which
// no caller is left to install.
func (s *Store) refund(args []any, rf refund, val []int64) {
	var back []giveBack
	switch {
	case !rf.multi:
		if len(val) != multiValues || val[0] != 1 {
			return // refused: nothing was charged
		}
		n, _ := args[4].(int64) // KEYS[1], then ARGV[1]: the cost, in both forms
		back = append(back, backOf(rf.ps[0], args[3].(string), n+val[4], val, rf.rss[0]))
	default:
		if len(val) != 1+multiValues*rf.n {
			return
		}
		refused := int(val[0])
		pos := 3 + rf.n + 2 // after evalsha, its SHA, the key count, the keys, now and the flags
		short := args[pos] == "s"
		pos++
		for i := range rf.n {
			var n int64
			if short {
				n, _ = args[pos+4*i].(int64)
			} else {
				c, _ := args[pos-1].(int)
				n, _ = args[pos].(int64)
				pos += 1 + c
			}
			if rf.check[i] || refused >= 0 && !(rf.shadow[refused] && !rf.shadow[i]) {
				continue // not charged
			}
			vals := val[1+multiValues*i : 1+multiValues*(i+1)]
			back = append(back, backOf(rf.ps[i], args[3+i].(string), n+vals[4], vals, rf.rss[i])) // the cost, and what it leased
		}
	}
	s.refundLater(back)
}

// refundLater gives back, in a round trip of its own within Timeout, in
// a goroutine that Close waits for, what back says (Stats.Refunded
// counts what went back).
func (s *Store) refundLater(back []giveBack) {
	if len(back) == 0 {
		return
	}
	s.refunds.Add(1)
	go func() {
		defer s.refunds.Done()
		ctx, cancel := context.WithTimeout(context.Background(), s.set.timeout)
		defer cancel()
		var units int64
		for _, b := range back {
			units += b.units
		}
		lost, _ := s.sendBack(ctx, back)
		s.refunded.Add(units - lost)
	}()
}

// sendBack returns back to Redis in pipelines, and says how many units
// could not go back, with the first error: those are lost, which
// under-admits. Units taken under a rule changed since go nowhere (the
// keys they were charged to are converted, or will be, and take no
// return): they count as lost.
func (s *Store) sendBack(ctx context.Context, back []giveBack) (int64, error) {
	var lost int64
	cs := make([]pipeCall, 0, len(back))
	for _, b := range back {
		if rs := b.p.rs(); b.gen != rs.gen {
			lost += b.units
			continue
		}
		cs = append(cs, pipeCall{p: b.p, rkey: b.rkey, c: call{give: b.units, gk: b.k, rs: b.p.rs()}})
	}
	err := s.pipelined(ctx, cs)
	for _, c := range cs {
		if c.err != nil {
			lost += c.c.give
		}
	}
	return lost, err
}

// pipeCall is one script call of a pipeline (see pipelined): policy p's
// call c on the Redis key rkey (of the client key, for its FailureMode),
// and what Redis answered.
type pipeCall struct {
	p         *policy
	rkey, key string
	c         call
	r         reply
	err       error
}

// pipelined sends cs to Redis in pipelines of 512, a round trip each,
// and fills each one's reply or error; it returns the first error, which
// it has reported (see Store.failed). The calls are not retried.
func (s *Store) pipelined(ctx context.Context, cs []pipeCall) error {
	var firstErr error
	for start := 0; start < len(cs); start += 512 {
		part := cs[start:min(len(cs), start+512)]
		pipe := s.client.Pipeline()
		cmds := make([]*redis.Cmd, len(part))
		for i := range part {
			c := &part[i]
			cmds[i] = redis.NewCmd(ctx, c.p.args(c.rkey, c.c)...)
			_ = pipe.Process(ctx, noRetry{cmds[i]})
		}
		s.calls.Add(1)
		_, _ = pipe.Exec(ctx)
		for i := range part {
			c := &part[i]
			cmd := cmds[i]
			err := cmd.Err()
			if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
				cmd, err = s.eval(ctx, func(ctx context.Context, cmd redis.Cmder) error {
					return s.client.Process(ctx, noRetry{cmd})
				}, cmd.Args(), c.p.script.src)
			}
			if err == nil {
				c.r, err = readReply(cmd, c.c.rs)
			}
			c.err = err
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}
	}
	if firstErr != nil {
		s.failed(firstErr)
	}
	return firstErr
}
