// Package redislimit keeps floodgate's rules in Redis, so that every
// replica of a service shares one limit per client.
//
// A Store (NewStore) is the floodgate.Store that httplimit, grpclimit and
// Envoy's rate-limit service (package rls) take: a set of named policies
// on one Redis client, all served by the Store's one engine (see Store).
// A Limiter (New) is a Store of one policy, for a rule in your own code.
//
// # Decisions
//
// Each request is decided in one round trip: one Lua script, run
// atomically by Redis, reads the client's state, decides, and writes the
// new state only when it admits (a denial or a Peek writes nothing, unless
// the rule changed since the key was written). A request of several
// policies' asks is one script too, which charges all or none (see
// Store.Decide). A script is sent by its SHA (EVALSHA), and whole only
// when Redis has lost it: on a new server, and after a restart, a
// failover or SCRIPT FLUSH (Stats.Loads).
//
// The calls in flight at once on a Store, of every policy and key, go to
// Redis together, as one pipeline: one write and one read on each side
// for all of them, where a call apiece would cost each its own. There is
// no timer: a call that finds fewer than two batches in flight is sent at
// once, with whatever calls are waiting, so a lone caller sends a plain
// command, and under many callers a round trip carries many decisions
// (Stats.Calls counts round trips). Each call has Config.Timeout from
// when it was made, queued and sent; a batch runs until its earliest
// call's, whatever its callers' cancellations, with its first caller's
// context values (a trace span reaches go-redis's hooks). A caller whose
// context ends first returns its context's error: its call is not sent
// if it was queued, and if Redis had run it, what it charged is given
// back. A batch that fails fails each of its calls, and each is answered
// by the FailureMode.
//
// Time is Redis's own clock, which the script reads (TIME), so the
// application servers' clocks may disagree. The state is integers in
// microseconds, and every step is exact integer arithmetic:
//
//   - "token_bucket" and "leaky_bucket" are GCRA, as in floodgate: one
//     integer per key, the theoretical arrival time;
//   - "fixed_window" and "sliding_counter" are floodgate's window
//     definitions with 1 µs for 1 ns: the window and two counts per key;
//   - "sliding_log" is floodgate's exact log, with 1 µs for 1 ns: one
//     12-byte entry per instant that holds admitted cost (a weighted cost
//     is one entry), in a ring in one string per key, of which a call
//     reads and writes only the few entries it needs.
//
// So a rule's step (Period/Limit for the buckets, Period for the windows
// and the log) is held in whole microseconds: exactly when it is one,
// else rounded up, so that a client never passes more than the rule. New
// refuses a step below 1 µs, and one that the rounding would slow by more
// than 0.1% (see Config.Rule).
//
// # Keys, TTLs and memory
//
// A client's state is one key, "<Prefix>:<algorithm>:" and 32 hex digits
// of the SHA-256 of the client's id, with a TTL that ends a second after
// the key would be fresh again, so Redis's memory follows the active
// clients: MEMORY USAGE reports 152 bytes for a bucket's key and for a
// window's; a log's key takes 168 bytes with one entry and 1,384 with 100,
// about 12 bytes an entry. Every call touches that one key, so a Limiter
// runs alike on one Redis, on a Redis Cluster, whose slots its keys spread
// over, and on a Ring. Each key's state also records the rule it was
// written under, and when, so that SetRule can change the rule with no key
// gaining from it.
//
// # When Redis fails
//
// Each call has Config.Timeout for Redis (100 ms by default), and is never
// retried by go-redis: a script that timed out may already have charged
// its request. When Redis fails or runs out of Timeout, the Store decides
// by its FailureMode: FailLocal, the default, with an in-process limiter
// of each policy's rule (a Limiter's Config.Local; each replica then
// applies the rule on its own), FailOpen, FailClosed, or FailError, which
// fails the call with an error that wraps floodgate.ErrUnreached for its
// caller to decide (Envoy's failure_mode_deny, for floodgate-rls). A call
// waits on Redis one Timeout at most, and so does a request of several
// calls (see Config.Timeout). After Config.BreakAfter consecutive
// failures, of any of the Store's policies, the Store's one circuit
// breaker stops calling Redis until a probe, one call every
// Config.ProbeEvery (250 ms), finds it back; on a Redis Cluster, a
// failure also has the client reload its slot map, at most once per
// ProbeEvery. An error reply about one key's data (WRONGTYPE on a key something else
// wrote) is answered by the FailureMode but opens the breaker for no one;
// a call whose caller's context ended first is denied, and counts against
// no breaker (see Limiter.AllowN). Stats and Limiter.AppendCounts count
// each of these.
//
// # Lease mode
//
// With Config.Lease.Max set, each replica takes a busy key's allowance
// from Redis in batches, in the round trip of the request that needed one,
// and spends them in process with no round trip, while the Store's one
// bookkeeper goroutine takes the next batches ahead, for every policy.
// Every unit admitted was taken from Redis first, so the replicas
// together never pass the rule; a unit stays spendable for Lease.TTL at
// most, and never past the instant Redis would have given it back, timed
// on this machine's monotonic clock from the sending of the round trip
// that took it, and not after a suspension of the host (never on
// Config.Clock, which times only the breaker and FailLocal); unspent
// units go back to Redis after a TTL, and at Close, which first waits
// for the round trips in flight. Lease mode keeps each key's hash, never
// the key. New refuses a Lease whose batches could not outlast their
// renewal (for the buckets, Lease.Max steps of the rule must last 40 ms
// with the default TTL), since it would cost round trips instead of saving
// them. See Lease.
//
// # A middleware's policies: Store
//
// NewStore makes a floodgate.Store, which httplimit and grpclimit take in
// their Config (Store) to keep every policy on Redis: their routes, tiers,
// shadows, keys, headers and counts work as in process, and every replica
// shares one limit per client. Each policy has the Store's Config and its
// own rule, and costs nothing while idle: no goroutine, timer or channel,
// a few hundred bytes. A request is decided by all of its route's
// policies in one round trip: one script over the client's keys, which
// share a Redis Cluster slot (see Store), charges them all or none, so a
// refusal is charged nowhere at no moment. In lease mode a client whose
// every policy holds a lease is decided in process, with no round trip.
//
// # In-flight limits
//
// Store.SlotPolicy makes a floodgate.SlotPolicy: at most N requests of a
// client at once, across every replica. A client's slots are one sorted
// set, its holders scored by when they expire on Redis's clock: an
// acquisition is one script that drops the expired holders and adds its
// own if fewer than N remain, and a release one that removes it. The
// Store renews every slot it holds every third of Config.SlotTTL (10 s by
// default), all of them in one pipeline, one command per client, so that
// a living holder never loses its slot, and a replica that dies holding
// slots gives them back within SlotTTL. It is exact while the holders
// keep up their renewals; a holder cut off from Redis for a SlotTTL loses
// its slots, and another replica may take them. The renewer runs only
// while a slot is held. When Redis cannot answer an acquisition, the
// FailureMode does, as for rates (FailLocal with an inflight.Limiter of N
// in this process). With Lease.Slots K, a replica takes up to K slots of
// a client ahead with the one it needs, and keeps up to K of those
// released, so that a busy client's requests take a slot with no round
// trip; a slot ahead unused for a third of SlotTTL goes back, a busy
// client's too, and all go back at Close. They are held on Redis like any
// other: the replicas together never hold more than N, and slots one
// replica holds ahead are slots the others cannot take.
//
// Each renewal answers, member by member, whether Redis still held it.
// When Redis loses a client's members (FLUSHALL, a restart, a failover to
// a replica that had not seen them, or an expiry while their replica was
// paused, after which another replica may take their places), each
// replica drops the slots it had there at its next renewal: none is
// renewed or served again. A slot ahead is served only while Redis is
// known to hold it, until SlotTTL after the sending of the last round
// trip that found it there (timed on the monotonic clock, and not after a
// suspension of the host), so a replica that was stopped past SlotTTL, or
// whose renewals fail, serves none of them. A request that holds a lost
// slot runs to its end: nothing can take a slot back from a handler. So
// after a loss the replicas together may hold more than N at once, and
// are back within N after at most one SlotTTL plus the longest request
// held, and stay there; Stats.SlotsLost counts the slots dropped.
//
// # Costs known after the work
//
// A Store is a floodgate.Settler, for costs known only when a request
// ends (a model's tokens, the bytes sent), with the in-process contract:
// Store.Charge takes a cost whatever the key holds, so that the key may
// owe, and every replica refuses it until the debt is paid back (at the
// rule's rate, at the window's end, as the charge ages out); Store.Reserve
// admits an estimate, or checks with an estimate of 0, and Store.Settle
// corrects it to the cost, giving back the excess where it was charged or
// charging the overrun. A charge or a reservation is one round trip (one
// script, all or nothing over a request's keys); a settlement one, or two
// when it both charges an overrun and gives back or reads another key.
// Debt is bounded by what a key can hold, past which the charge returns
// floodgate.ErrDebtBound and charges nothing (see Store.Charge).
//
// In lease mode a charge, a reservation, a check and a settlement that
// the keys' leases hold make no round trip; a charge past what a lease
// holds draws the lease and sends the rest to Redis, so a key in debt is
// admitted from no lease. A check (a Peek, or a reservation of 0) of a key
// that holds no lease takes one: a Peek in the round trip that answers it
// (but the sliding log's, which stays a dry run), a reservation by the
// bookkeeper after it, so that the checks and costs of a token budget
// find one at steady state. Units a replica gives back after another
// replica has charged the key into debt pay that debt, as they would pay
// a request: once every lease is back, Redis holds the costs charged,
// exactly on the windows, and on the buckets but for the whole units
// whose slots the rule has refilled since they were leased (a give-back
// keeps only the units still ahead of Redis's clock). A sliding log's
// give-back after a later entry of the key lapses. Either way stricter,
// never looser.
//
// # Changing the rule
//
// SetRule changes the rule of a running Limiter. No key gains from the
// change: each holds at most what it held, and at most the new capacity,
// and refills at the new rate; the script converts a key at its first
// call after the change, exactly as if at the change. While replicas run
// different rules, as in a rollout, a key's allowance never exceeds the
// largest of their capacities, and once every replica runs the new rule
// every key holds at most what the new rule allows. See Limiter.SetRule.
package redislimit
