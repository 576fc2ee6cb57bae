package redislimit

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/redis/go-redis/v9"
)

//go:embed gcra.lua
var gcraSource string

//go:embed window.lua
var windowSource string

//go:embed log.lua
var logSource string

// argsSource reads and checks the arguments, in the one layout every
// script shares (see argN): newScript puts it where a script says
// "--[[args]]".
//
//go:embed args.lua
var argsSource string

// historySource is the rule's history and the conversion of a key written
// under another rule, the same in every script: newScript puts it where a
// script says "--[[history]]", after its own convertAt and emptyAt.
//
//go:embed history.lua
var historySource string

// script is a Lua script and its SHA-1, the name EVALSHA knows it by.
type script struct {
	src, sha string
}

var (
	gcraScript   = newScript(gcraSource)
	windowScript = newScript(windowSource)
	logScript    = newScript(logSource)
)

// newScript is the script of source src, with the shared arguments and
// history in their places.
func newScript(src string) *script {
	for _, part := range []struct{ mark, src string }{{"--[[args]]", argsSource}, {"--[[history]]", historySource}} {
		if strings.Count(src, part.mark) != 1 {
			panic("redislimit: a script has no single place for " + part.mark)
		}
		src = strings.Replace(src, part.mark, part.src, 1)
	}
	return &script{src: src, sha: sha1hex(src)}
}

func sha1hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// The scripts' arguments: KEYS[1] is the client's key, and ARGV has one
// layout in the three scripts, each field at the index named here (the
// scripts' own comments say what each kind makes of them). A call's own
// fields come first; the rule's, the same for every call under it, after;
// then the rule's history, in triples.
const (
	argN        = 1 + iota // the cost; 0 for a return or a lease alone
	argDry                 // 1 for a peek, which writes nothing; 2 a forced charge
	argWant                // lease mode: the units wanted beyond n
	argGive                // lease mode: the unspent units returned
	argGK                  // lease mode: where the returned units were charged
	argNow                 // the call's instant, µs of Redis's clock, or nowTIME
	argKind                // the algorithm: a scriptKind
	argInterval            // µs per token (the buckets), or the window
	argCapacity            // the burst (the buckets), or the limit per window
	argMargin              // ms added to every key's TTL
	argParam               // the log's hold, µs; 0 for the other kinds
	argHistory             // the first of the history's triples, if any
)

// nowTIME is the now argument that has a script read Redis's own clock,
// with the TIME command. It is the only one production sends.
const nowTIME = -1

// scriptKind is the algorithm a script decides by, its ARGV[argKind]. The
// scripts name the same values BUCKET, FIXED_WINDOW, SLIDING_COUNTER and
// SLIDING_LOG.
type scriptKind int64

const (
	kindBucket         scriptKind = iota // token_bucket and leaky_bucket: GCRA
	kindFixedWindow                      // fixed_window
	kindSlidingCounter                   // sliding_counter
	kindLog                              // sliding_log
)

// scriptNow is the now argument of a call made at this moment: nowTIME in
// production, where the scripts read Redis's clock; with a test's
// redisClock, its reading in µs, which the scripts then take for Redis's
// clock. Everything that needs Redis's now as the scripts see it asks here.
func (s *Store) scriptNow() int64 {
	if s.redisClock == nil {
		return nowTIME
	}
	return s.redisClock.Now() / 1000
}

// eval sends args (EVALSHA of the script src) by process, and again as
// EVAL with the whole script if Redis has lost it (NOSCRIPT: it ran
// nothing).
func (s *Store) eval(ctx context.Context, process func(context.Context, redis.Cmder) error, args []any, src string) (*redis.Cmd, error) {
	cmd := redis.NewCmd(ctx, args...)
	err := process(ctx, cmd)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		s.loads.Add(1)
		args[0], args[1] = "eval", src
		cmd = redis.NewCmd(ctx, args...)
		err = process(ctx, cmd)
	}
	return cmd, err
}

// args are the EVALSHA arguments of call c on the Redis key rkey, under
// its rule c.rs: ARGV in the scripts' layout (see argN), from the call's
// own fields and the rule's, which rs.argv holds boxed, and the rule's
// history.
func (p *policy) args(rkey string, c call) []any {
	rs := c.rs
	if rs.pruneAt != 0 {
		if t := p.s.redisNow(); t >= rs.pruneAt {
			p.prune(rs, t) // the next calls carry less; this one, what it has
		}
	}
	args := make([]any, 3+argHistory, 3+argHistory+len(rs.hist))
	args[0], args[1], args[2] = "evalsha", p.script.sha, 1
	argv := args[3:] // argv[i] is ARGV[i]; argv[0], KEYS[1]
	copy(argv, rs.argv[:])
	argv[0] = rkey
	argv[argN], argv[argDry], argv[argWant], argv[argGive], argv[argGK] = c.n, dryArg(c), c.want, c.give, c.gk
	if now := p.s.scriptNow(); now != nowTIME {
		argv[argNow] = now // a test's clock; rs.argv holds nowTIME, boxed
	}
	return append(args, rs.hist...)
}

// shortArgs are the EVALSHA arguments of call c on rkey in the scripts'
// short form (see args.lua): n, kind, interval and capacity alone, for a
// plain request (no peek, no lease) on Redis's clock, under a rule with no
// history, the default margin and no param (every kind but the log), and
// dry 2 after them for a forced charge. It returns nil for any other
// call, which args encodes whole.
func (p *policy) shortArgs(rkey string, c call) []any {
	if !p.plain(c) {
		return nil
	}
	rs := c.rs
	if c.force {
		return []any{"evalsha", p.script.sha, 1, rkey, c.n, rs.argv[argKind], rs.argv[argInterval], rs.argv[argCapacity], dryArg(c)}
	}
	return []any{"evalsha", p.script.sha, 1, rkey, c.n, rs.argv[argKind], rs.argv[argInterval], rs.argv[argCapacity]}
}

// plain reports whether call c goes in the scripts' short form (see
// shortArgs).
func (p *policy) plain(c call) bool {
	rs := c.rs
	return c.n >= 1 && !c.dry && c.want == 0 && c.give == 0 && len(rs.hist) == 0 && rs.pruneAt == 0 &&
		p.s.margin == ttlMargin && rs.hold == 0 && p.s.redisClock == nil
}

// readReply reads the script's answer: {allowed, remaining, retry_after,
// reset_after, extra, horizon, k}, the waits in µs, -1 for a wait too long
// to represent.
func readReply(cmd *redis.Cmd, rs *rules) (reply, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return reply{}, err
	}
	return decode(v, rs)
}

// decode is reply's, from the script's values v: a remaining below 0 is
// what the key owes, an allowed of -1 a forced charge past its bound.
func decode(v []int64, rs *rules) (reply, error) {
	if len(v) != 7 {
		return reply{}, fmt.Errorf("redislimit: the script answered %d values, not 7", len(v))
	}
	return reply{d: floodgate.Decision{Allowed: v[0] == 1, Limit: rs.capacity, Remaining: max(0, v[1]), Owed: max(0, -v[1]),
		RetryAfter: fromMicros(v[2]), ResetAfter: fromMicros(v[3])}, extra: v[4], horizon: v[5], k: v[6], bound: v[0] == -1, redis: true, rs: rs}, nil
}

// dryArg is ARGV[2] of call c: 1 for a peek, 2 for a forced charge.
func dryArg(c call) int64 {
	switch {
	case c.force:
		return 2
	case c.dry:
		return 1
	}
	return 0
}

func fromMicros(us int64) time.Duration {
	if us < 0 || us > int64(floodgate.Never/time.Microsecond) {
		return floodgate.Never
	}
	return time.Duration(us) * time.Microsecond
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// noRetry marks a command that go-redis must not send twice: a script that
// timed out or lost its connection may have charged the request already.
// (MOVED and ASK redirections, which Redis sends instead of running the
// command, are still followed.)
type noRetry struct{ redis.Cmder }

// NoRetry tells go-redis not to retry the command.
func (noRetry) NoRetry() bool { return true }
