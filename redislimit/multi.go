package redislimit

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
)

//go:embed multi.lua
var multiSource string

// multiScript is every kind's script as a function of (KEYS, ARGV), and
// then multi.lua, which calls them.
var multiScript = func() *script {
	var b strings.Builder
	for _, k := range []struct {
		name string
		s    *script
	}{{"gcra", gcraScript}, {"window", windowScript}, {"log", logScript}} {
		fmt.Fprintf(&b, "local function %s(KEYS, ARGV)\n%s\nend\n", k.name, k.s.src)
	}
	b.WriteString(multiSource)
	src := b.String()
	return &script{src: src, sha: sha1hex(src)}
}()

// The multi-policy script's reply: the index of the policy that refused
// (-1 for none), then seven values a policy, as each kind's script
// answers.
const multiValues = 7

// runMany is the multi-policy round trip, with a key and a cost for each
// policy (a check, when checks[i]: a dry run of cost 1 that charges
// nothing, see multi.lua; checks may be nil), and wants[i] units to lease beyond the cost for policy i if it
// charges the request (nil: none), within Timeout, in a batch with the
// Store's other calls in flight (see batcher). It writes each policy's
// answer to all, and its reply (the units it leased) to replies. With
// force, each cost is a charge that cannot be refused (see Store.Charge),
// on keys that must be distinct, and the index returned is of the first
// that would pass what its key can owe (then none was charged).
func (s *Store) runMany(ctx context.Context, ps []*policy, keys []string, ns []int64, shadow, checks []bool, wants []int64,
	all []floodgate.Decision, replies []reply, force bool) (int, error) {
	rf := refund{n: len(ps), multi: true}
	args := make([]any, 3, 3+len(ps)+2+len(ps)*(1+argHistory))
	args[0], args[1], args[2] = "evalsha", multiScript.sha, len(ps)
	hash := ""
	for i, p := range ps {
		rf.ps[i], rf.rss[i], rf.shadow[i] = p, p.rs(), shadow[i]
		rf.check[i] = checks != nil && checks[i]
		if p.tag != nil {
			args = append(args, p.redisKey(keys[i]))
			continue
		}
		if i == 0 || keys[i] != keys[i-1] || hash == "" {
			hash = keyHash(keys[i])
		}
		args = append(args, p.keyHead+"{"+hash+"}")
	}
	flags := make([]byte, len(ps))
	for i := range ps {
		switch {
		case force:
			flags[i] = '2'
		case rf.check[i] && shadow[i]:
			flags[i] = '4'
		case rf.check[i]:
			flags[i] = '3'
		case shadow[i]:
			flags[i] = '1'
		default:
			flags[i] = '0'
		}
	}
	args = append(args, s.scriptNow(), string(flags))
	calls := make([]call, len(ps))
	short := true
	for i, p := range ps {
		calls[i] = call{n: ns[i], rs: rf.rss[i], force: force}
		if wants != nil {
			calls[i].want = wants[i]
		}
		short = short && p.plain(calls[i])
	}
	if short {
		// The short form: four arguments a policy instead of twelve, and
		// the script's fast path for windows (see multi.lua).
		args = append(args, "s")
		for i := range ps {
			rs := rf.rss[i]
			args = append(args, ns[i], rs.argv[argKind], rs.argv[argInterval], rs.argv[argCapacity])
		}
	} else {
		for i, p := range ps {
			a := p.args("", calls[i])[4:] // ARGV, after evalsha, its SHA, 1 and KEYS[1]
			args = append(args, len(a))
			args = append(args, a...)
		}
	}
	v, err := s.batch.do(ctx, args, multiScript.src, time.Now().Add(s.set.timeout), &rf)
	if err != nil {
		return 0, err
	}
	if len(v) != 1+multiValues*len(ps) || v[0] < -1 || v[0] >= int64(len(ps)) {
		return 0, fmt.Errorf("redislimit: the multi-policy script answered %d values, not %d", len(v), 1+multiValues*len(ps))
	}
	for i := range ps {
		r, err := decode(v[1+multiValues*i:1+multiValues*(i+1)], rf.rss[i])
		if err != nil {
			return 0, err
		}
		all[i] = r.d
		if replies != nil {
			replies[i] = r
		}
	}
	return int(v[0]), nil
}
