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

// historySource is the rule's history and the conversion of a key written
// under another rule, the same in every script: newScript puts it where a
// script says "--[[history]]", after its own convertAt and emptyAt.
//
//go:embed history.lua
var historySource string

// script is a Lua script and its SHA-1, the name EVALSHA knows it by. at is
// its test form, which reads now from its last argument instead of Redis's
// clock.
type script struct {
	src, sha string
	at       *script
}

var (
	gcraScript   = newScript(gcraSource, 9)
	windowScript = newScript(windowSource, 10)
	logScript    = newScript(logSource, 10)
)

func newScript(src string, nowArg int) *script {
	if strings.Count(src, "--[[history]]") != 1 {
		panic("redislimit: a script has no place for the history")
	}
	src = strings.Replace(src, "--[[history]]", historySource, 1)
	s := &script{src: src, sha: sha1hex(src)}
	s.at = &script{src: testForm(src, nowArg)}
	s.at.sha = sha1hex(s.at.src)
	return s
}

func sha1hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// testForm replaces a script's reading of Redis's clock, the block between
// "do -- clock" and "end -- clock", with ARGV[nowArg], checked as every
// argument is; the history then begins after it. Only tests run it: the differential tests drive the script
// and the in-process algorithm through the same instants.
func testForm(src string, nowArg int) string {
	i := strings.Index(src, "do -- clock")
	j := strings.Index(src, "end -- clock")
	if i < 0 || j < i {
		panic("redislimit: a script has no clock block")
	}
	return src[:i] + fmt.Sprintf("now = tonumber(ARGV[%d])\nif not (now and now >= 0 and now <= 2^52 and now %% 1 == 0) then return redis.error_reply('floodgate: bad now') end\non = %d", nowArg, nowArg+1) + src[j+len("end -- clock"):]
}

// run is one call on Redis: EVALSHA, and EVAL when Redis has lost the
// script, within the budget.
func (l *Limiter) run(ctx context.Context, key string, c call, now int64) (reply, error) {
	ctx, cancel := context.WithTimeout(ctx, c.budget)
	defer cancel()
	cmd, err := l.eval(ctx, func(ctx context.Context, cmd redis.Cmder) error {
		return l.client.Process(ctx, noRetry{cmd})
	}, l.args(key, c, now))
	if err != nil {
		return reply{}, err
	}
	return l.reply(cmd, c.rs)
}

// eval sends args (EVALSHA) by process, and again as EVAL with the whole
// script if Redis has lost it (NOSCRIPT: it ran nothing).
func (l *Limiter) eval(ctx context.Context, process func(context.Context, redis.Cmder) error, args []any) (*redis.Cmd, error) {
	cmd := redis.NewCmd(ctx, args...)
	err := process(ctx, cmd)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		l.loads.Add(1)
		s := l.script
		if args[1] != s.sha {
			s = s.at
		}
		args[0], args[1] = "eval", s.src
		cmd = redis.NewCmd(ctx, args...)
		err = process(ctx, cmd)
	}
	return cmd, err
}

// args are the EVALSHA arguments of call c on key, under its rule c.rs:
// n, the step, the capacity, margin and dry; the windows' kind; want, give
// and gk; the log's hold; the test form's now; and the rule's history.
func (l *Limiter) args(key string, c call, now int64) []any {
	s, rs := l.script, c.rs
	if now >= 0 {
		s = s.at
	}
	if rs.pruneAt != 0 {
		if t := l.redisNow(); t >= rs.pruneAt {
			l.prune(rs, t) // the next calls carry less; this one, what it has
		}
	}
	args := make([]any, 0, 14+len(rs.hist))
	args = append(args, "evalsha", s.sha, 1, l.Key(key), c.n, rs.boxed[0], rs.boxed[1], rs.boxed[2], b2i(c.dry))
	if l.kind == 1 || l.kind == 2 {
		args = append(args, rs.boxed[3])
	}
	args = append(args, c.want, c.give, c.gk)
	if l.kind == kindLog {
		args = append(args, rs.boxed[3])
	}
	if now >= 0 {
		args = append(args, now)
	}
	return append(args, rs.hist...)
}

// reply reads the script's answer: {allowed, remaining, retry_after,
// reset_after, extra, horizon, k}, the waits in µs, -1 for a wait too long
// to represent.
func (l *Limiter) reply(cmd *redis.Cmd, rs *rules) (reply, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return reply{}, err
	}
	if len(v) != 7 {
		return reply{}, fmt.Errorf("redislimit: the script answered %d values, not 7", len(v))
	}
	return reply{d: floodgate.Decision{Allowed: v[0] == 1, Limit: rs.capacity, Remaining: v[1],
		RetryAfter: fromMicros(v[2]), ResetAfter: fromMicros(v[3])}, extra: v[4], horizon: v[5], k: v[6], redis: true, rs: rs}, nil
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
