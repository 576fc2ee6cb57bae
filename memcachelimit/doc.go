// Package memcachelimit keeps floodgate's rules in memcached, so that
// every replica of a service shares one limit per client, exactly.
//
// A Store (NewStore) is the floodgate.Store and floodgate.Settler that
// httplimit, grpclimit and Envoy's rate-limit service (package rls)
// take: a set of named policies on one gomemcache client, every one of
// floodgate's five algorithms, with costs settled after the work
// (Charge, Reserve and Settle, debt). It is written on package storekit
// alone: each policy is a storekit.Machine, and storetest's conformance
// suite is its proof.
//
// # Deployment
//
// Point every replica at the same memcached server (one server: a
// client of several servers spreads the keys over them, which is fine,
// but each key then lives on one server and is lost with it). Run
// memcached with -M, so that when its memory is full it refuses new
// items rather than evicting live ones (see Failure), and give it the
// memory of the active clients: one item per client and policy, whose
// value is its state, 42 bytes for a token bucket or a window and 50
// for a leaky bucket (a sliding log's, 46 and about 5 more per instant
// of admitted cost still in its window: 539 with 100), beside its key
// and memcached's own header of about 50 bytes.
//
// # What is exact
//
// A key's state is one memcached item: the Machine's bytes. A request
// reads every state it needs in one round trip (gets), decides them in
// process, and, only when it admits, writes each charged key with a
// compare-and-swap of what it read (cas; add for a key memcached does
// not hold). A write that another replica's beat fails, and the key is
// read and decided again: no update is ever lost, so a key never passes
// more than its rule across any number of replicas. A refusal writes
// nothing. Within one process, a key's writes take turns (striped
// locks), so a process never races itself, and the requests that wait
// on a busy key are decided together (group commit): one read, each
// request's step in turn on the state the one before left, each answered
// its own decision exactly as if they had come one after the other, and
// one compare-and-swap for them all. A request of several asks reads
// its keys without waiting on any, and writes each through its key's
// group, on the key's state as it is then: it never holds one key while
// it waits on another, so a key that every request names (a route's,
// a global one) is written at its group's pace.
//
// A request of several policies is all or nothing: the enforced asks are
// decided first, in order, then the shadows (see floodgate.Store's
// Decide). When a later ask refuses after earlier ones were written (a
// replica or another request took its key's last units between its read
// and its write), the earlier ones are given back (the Machine's Refund
// of their grants). Until they are, a request that reads those keys
// sees their charge, and may be refused where it would have been
// admitted a moment later: stricter, never over the limit (a sliding
// log's give-back lapses, and the charge stays, when a later request
// was logged on the key in between). A crash, or
// memcached failing, between those writes and the give-back leaves the
// charges in place: the request was refused and is charged, which is
// stricter, never over-admission.
//
// An admission of one ask costs two round trips (a read and a
// compare-and-swap) shared by the group it joins; one of several asks,
// a read of its keys and a compare-and-swap a key (and a read more for
// a key whose state changed since, or that others wait on); a refusal,
// the read alone. Stats.CASConflicts counts the writes that lost a race.
//
// # Time
//
// memcached has no clock that a client can read. The replicas use their
// own wall clocks (Config.Clock; time.Now().UnixNano() by default), as
// envoyproxy/ratelimit's memcache backend does, and every state records
// the instants it depends on. A replica whose clock runs ahead of the
// others by δ admits early what the rule gives back with time: a
// bucket refills up to Limit×δ/Period early (up to that many requests
// more than the rule within a Period), and a window's boundary (a fixed
// or sliding window's, or the end of a sliding log's period) moves up
// to δ earlier. A replica whose clock lags gives nothing: it is stricter.
// Keep the replicas on NTP: a skew of a few milliseconds costs a few
// milliseconds' worth of the rule.
//
// # Keys and expiry
//
// A client's key is the Prefix, the algorithm, the policy's name
// (its length first, so that a name and a key never run into each
// other) and the client's key, when memcached can hold that as a key (at
// most 250 bytes, none a space or a control byte); any other key is the
// Prefix, '#' and the base64url SHA-256 of the same, so that keys of any
// length and any bytes are limited, each apart from the others: two
// clients share a state only if SHA-256 collides, about 2^-128 for a
// pair. Each item expires a second after its state is fresh again
// (storekit.Machine.Fresh, rounded up to whole seconds), and no sooner
// than a minute, so memcached's memory follows the active clients.
//
// # Failure
//
// memcached keeps nothing on disk, and may evict an item under memory
// pressure. A restart, or an eviction, loses the keys' counts: each key
// then starts fresh, which can admit up to one more burst (a bucket's
// capacity) or window's Limit per key lost, once. Run memcached with -M
// so that it refuses writes when full (the Store then answers by its
// FailureMode) instead of evicting live counts.
//
// When memcached fails or does not answer within the call's time
// (Config.Timeout), the Store decides by its FailureMode: FailLocal, the
// default, with an in-process limiter of each policy's rule (each
// replica then applies the rule on its own), FailOpen, FailClosed, or
// FailError, which fails the call with an error that wraps
// floodgate.ErrUnreached. After Config.BreakAfter consecutive failures
// the Store's one circuit breaker stops calling memcached until a probe,
// one call every Config.ProbeEvery, finds it answering again. A caller
// whose context ends first is refused with its context's error, and
// counts against no breaker; what its request had written is given back.
//
// # What is not built
//
// In-flight limits (floodgate.SlotStore): memcached may forget a count
// of held slots while their holders still run, so SlotPolicy refuses,
// and says why; keep them on Redis (redislimit) or in process (package
// inflight).
//
// Lease mode (redislimit's Config.Lease: a replica takes a key's
// allowance in batches and spends it in process) is not built: storekit
// gives no lease engine, and redislimit's is its own, in Lua on Redis.
// It would take, on the Machine, a step that takes up to k units at once
// and tells how long they stay spendable, and a Refund of the unspent
// part at the batch's instant; and in this package a bookkeeper that
// renews and returns batches by their deadlines, as redislimit's does.
package memcachelimit
