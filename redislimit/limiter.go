package redislimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/redis/go-redis/v9"
)

// Limiter applies one Rule to every client, with the state in Redis: a
// Store with one policy, whose keys carry no policy's name. It is safe
// for concurrent use.
type Limiter struct {
	s *Store
	p *policy
}

// New validates cfg and returns a Limiter on client. It returns an error for
// a rule that floodgate would reject, or that Redis's microseconds cannot
// hold (see Config.Rule); for an unknown algorithm or one with no Redis
// form; for a negative Timeout, BreakAfter, ProbeEvery, LocalMaxKeys or
// Lease field; for Local with a FailureMode other than FailLocal, or a
// Local that floodgate would reject; for HashTag, which is a Store's; and
// for a go-redis client that ignores its context's deadline, since a
// stalled server would then hold each call past Timeout: build it with
// ContextTimeoutEnabled: true. The client's retries do not matter:
// redislimit turns them off for its own commands, because a script that
// timed out may already have charged its request.
func New(client redis.UniversalClient, cfg Config) (*Limiter, error) {
	return newLimiter(client, cfg, nil)
}

// newLimiter is New, with setup, when not nil, run on the Limiter before
// lease mode's bookkeeper starts: the tests' seam to put in their clocks.
func newLimiter(client redis.UniversalClient, cfg Config, setup func(*Limiter)) (*Limiter, error) {
	if cfg.HashTag != nil {
		return nil, errors.New("redislimit: HashTag is for a Store (NewStore): a Limiter's keys have no tag")
	}
	set, err := readConfig(client, cfg)
	if err != nil {
		return nil, err
	}
	name := cfg.Algorithm
	if name == "" {
		name = floodgate.TokenBucket
	}
	if _, _, _, err := parseRule(name, cfg.Rule); err != nil {
		return nil, err
	}
	switch {
	case cfg.Local != nil && cfg.FailureMode != FailLocal:
		return nil, fmt.Errorf("redislimit: Local is the rule of FailLocal, and FailureMode is %v", cfg.FailureMode)
	case cfg.Local != nil:
		if err := floodgate.CheckRule(name, *cfg.Local); err != nil {
			return nil, fmt.Errorf("redislimit: Local: %w", err)
		}
	}
	l := &Limiter{}
	var perr error
	l.s = newStore(client, set, true, func(s *Store) {
		l.s = s
		if l.p, perr = s.newPolicy("", name, cfg.Rule, cfg.Local); perr != nil {
			return
		}
		if setup != nil {
			setup(l)
		}
	})
	if perr != nil {
		l.s.Close()
		return nil, perr
	}
	return l, nil
}

// Allow reports whether one request from key may pass, with the details a
// response needs. See AllowN.
func (l *Limiter) Allow(ctx context.Context, key string) (floodgate.Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN decides a request of cost n from key. A cost below 1 or above the
// rule's capacity is a denial with RetryAfter == floodgate.Never, and
// reaches no server.
//
// The error is nil whenever the Limiter decided: by Redis, or by the
// FailureMode while Redis failed (see Stats and Config.OnError), but for
// FailError, whose refusals come with an error that wraps
// floodgate.ErrUnreached. It is the context's error when ctx ended before
// Redis answered. Such a call is
// abandoned: it is denied under every FailureMode (its caller is gone;
// admitting it would let a client pass the shared limit by sending a
// deadline too short for a round trip), it counts against no breaker,
// whatever deadline the caller sent, and it keeps no charge (see
// Store.Decide). Set Timeout below the deadlines callers carry: a call
// that ends by its caller's deadline tells the breaker nothing, even when
// Redis is the one that stalled.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	d, res, err := l.s.decideOne(ctx, l.p, key, n)
	l.s.results.Inc(int(res))
	return d, err
}

// Peek returns what Allow would answer for key now, and changes nothing.
// In lease mode it asks Redis, and counts this replica's unspent lease as
// remaining too.
func (l *Limiter) Peek(ctx context.Context, key string) (floodgate.Decision, error) {
	return l.p.Peek(ctx, key)
}

// Reset forgets key's state in Redis, in lease mode, and in the FailLocal
// limiter, so that its next request finds it full. It returns Redis's
// error, if any: a reset has no failure mode.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	p := l.p
	if t := p.twin.Load(); t != nil {
		t.lim.Reset(key)
	}
	if ls := l.s.lease; ls != nil {
		ls.forget(p, key)
	}
	ctx, cancel := context.WithTimeout(ctx, l.s.set.timeout)
	defer cancel()
	err := l.s.client.Process(ctx, noRetry{redis.NewIntCmd(ctx, "del", p.redisKey(key))})
	if err != nil {
		return fmt.Errorf("redislimit: reset %q: %w", key, err)
	}
	return nil
}

// redisKey returns the Redis key that holds key's state:
// "<Prefix>:<algorithm>:" and 32 hex digits of key's SHA-256.
func (l *Limiter) redisKey(key string) string { return l.p.redisKey(key) }

// SetRule makes r the rule of every key from now on, in Redis and, unless
// Config.Local gave FailLocal a rule of its own, in the FailLocal limiter.
// It validates r as New does and returns New's error for a rule New would
// refuse (with the Limiter's algorithm); then nothing changes. It is safe
// to call at any time, from any goroutine, beside any other method; calls
// to SetRule are applied one at a time. A rule with the same step and capacity in
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
//     the new period's window of T, with min(held', new Limit) left in it
//     and no previous window's count, where held' is held less what the
//     limit was lowered by, at least 0 (the key has spent what it spent).
//   - sliding_log: Limit minus the cost in the window where a request at T
//     is charged. The key holds one entry, stamped at T (or at its latest
//     entry, if later), of the cost that leaves it min(held', new Limit),
//     held' as for the windows.
//
// A key that owes at T (a charge put it in debt) owes as much after it,
// in whole units and the fraction of one, as the in-process Limiter's key
// does: a bucket refills its debt at the new rate, a window counts it
// beyond the new Limit in the new period's window of T, a log's entry
// carries it (as far as each can hold: see Store.Charge).
//
// T is Redis's clock: this machine's, corrected by what Redis's TIME said
// of the two clocks' difference, asked (within Timeout) when the Store
// last asked it more than a second ago, so that a reload of many rules
// costs one round trip; if Redis does not answer, the last difference
// known. Redis holds each key with the rule it was written under and the
// instant it was written at, and the Limiter sends its calls the rules it
// changed from, with the instants of the changes, until every key written
// under them has expired
// (at most 16 changes; a key untouched across more holds nothing at the
// 16th from the latest). A key's first call after the change converts it,
// in the script, atomically: from the rule it was written under, at each
// change since, exactly as if it had been converted at the change.
//
// A key that makes no call after the change keeps the TTL of the rule it
// was written under, and a change leaves the calls' history once a key
// of its rule holding no debt would have expired (a burst's refill for a
// bucket, two periods for a window or a log, and two seconds). So a key
// untouched since a change that slowed its rule is forgotten when its
// old TTL ends, holding nothing or owing, where the in-process Limiter's
// would still refuse; and a bucket that owed more than its burst and
// calls only after its change left the history converts at that call,
// having repaid at the old rate until then.
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
// In lease mode, no batch this replica holds is spent after the change
// (its units lapse, and count in Stats.Lapsed), cached denials are
// forgotten, and a return or renewal sent under the old rule does nothing
// to a key converted since: no unit leased under the old rule is spent
// after SetRule returns, but for requests that race it.
func (l *Limiter) SetRule(r floodgate.Rule) error { return l.p.SetRule(r) }

// Close stops what lease mode started and returns every unspent lease to
// Redis. It first waits for lease mode's round trips in flight (a refill
// in a request's round trip, a renewal, a return), within Timeout, and
// then returns every unit held, theirs too, within another Timeout: when
// Close returns, lease mode sends nothing more, and the client may be
// closed. After Close the Limiter still decides, each request by a round
// trip. Close is idempotent, and a Limiter without leases has it too. The
// error says how many units could not be returned, and whether round
// trips were still running after Timeout: those units are lost (they
// count in Stats.Lapsed), so the clients under-admit by as many until
// Redis would have given them back anyway.
func (l *Limiter) Close() error { return l.s.Close() }

// Stats returns the counts so far.
func (l *Limiter) Stats() Stats { return l.s.Stats() }

// AppendCounts appends the Limiter's counts to dst (see package counts),
// with Route and Policy "", which makes the Limiter a counts.Source.
//
// counts.Requests counts each decision of Allow and AllowN once (Peek and
// Reset decide nothing), under one result:
//
//   - allowed and denied: Redis decided, in the request's own round trip
//     or, in lease mode, through the units this replica had leased (a
//     request served from a lease is allowed; one answered from a denial
//     that Redis made for the key and the replica holds until its
//     RetryAfter is denied). A cost below 1 or above the rule's capacity,
//     which reaches no server, is denied too.
//   - fail_open, fail_closed, fail_local, fail_error: the FailureMode decided, as it
//     does while Redis fails (a round trip that failed or ran out of
//     Timeout, an error reply about the key's data, a lease refill that
//     outlasted Timeout) or while the breaker is open. The one of the
//     Limiter's FailureMode counts them all: fail_open for the admissions
//     of FailOpen, fail_closed for the denials of FailClosed,
//     fail_local for FailLocal's decisions, whatever its in-process
//     limiter answered, and fail_error for FailError's failed calls.
//   - abandoned: the caller's context ended before Redis answered (or
//     before the call): denied, with the context's error (see AllowN).
//
// Then Redis's side: counts.StoreCalls, the round trips (Stats.Calls:
// batches of decisions, lease renewals and returns, refunds, whether or
// not they failed); counts.StoreErrors, the calls that failed
// (Stats.Errors, each call of a failed batch), by kind: timeout (ran out
// of Timeout, Stats.Timeouts), key (an error reply about one key's data,
// Stats.KeyErrors) and other (every other failure: a broken or refused
// connection, a server state such as LOADING or READONLY);
// counts.StoreBreakerOpen, 1 from the breaker's opening until a call
// finds Redis back (while it is 1 the FailureMode decides, but for one
// probe at a time once ProbeEvery has passed), else 0; and
// counts.StoreBreakerOpens, the times it opened (Stats.Opens).
//
// In lease mode only: counts.StoreLeased, StoreReturned and StoreLapsed,
// the units of Stats.Leased, Returned and Lapsed.
func (l *Limiter) AppendCounts(dst []counts.Sample) []counts.Sample { return l.s.AppendCounts(dst) }
