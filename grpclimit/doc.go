// Package grpclimit is gRPC server interceptors over floodgate: limits per
// method, keyed by the client's address as far as it can be trusted, and a
// refusal that tells the client when to retry. It is a module of its own
// (github.com/floodgate-go/floodgate/grpclimit), so that floodgate's core
// never takes on gRPC's dependencies.
//
//	lim, err := grpclimit.New(grpclimit.Config{
//		Methods: map[string][]grpclimit.Policy{
//			"/shop.Orders/Create": {{Name: "create", Rule: floodgate.Rule{Limit: 10, Period: time.Minute}}},
//			"/shop.Catalog/":      {{Name: "catalog", Rule: floodgate.Rule{Limit: 100, Period: time.Second}}}, // a whole service
//		},
//		TrustedProxies: []string{"10.0.0.0/8"}, // believe their "x-forwarded-for" metadata
//		PerMessage:     true,                   // charge every message a stream receives, not only its opening
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer lim.Close()
//	srv := grpc.NewServer(grpc.UnaryInterceptor(lim.UnaryServerInterceptor()),
//		grpc.StreamInterceptor(lim.StreamServerInterceptor()))
//
// # Methods
//
// The full method name chooses the rule: the method's own entry in
// Config.Methods ("/package.Service/Method"), then its service's
// ("/package.Service/"), then Config.Default; with no Default, the calls
// that nothing matches go through unlimited. Each entry has limiters of
// its own, so one client's calls to one method never spend another's
// allowance, and a service's entry is one allowance for all the methods
// of the service that have no entry of their own. An entry carries 1 to 8
// Policies: a call proceeds only if all admit it, and a refusal consumes
// nothing (see floodgate.Limits).
//
// # Refusals and streams
//
// A refused call fails with codes.ResourceExhausted, the message "rate
// limit exceeded", and a google.rpc.RetryInfo detail holding the exact
// wait, which clients that honour it (gRPC's retry policies, Google's
// client libraries) back off by. A stream is charged when it opens, and
// with Config.PerMessage for every message it receives as well, once the
// message has arrived: the stream's end costs nothing, and a refused
// message reaches the handler as the error of its RecvMsg (the message
// reset), never as a message. Limiter.Check decides a call outside an
// interceptor.
//
// # Client identity
//
// The client is the peer's address, without the port, with httplimit's
// rules: an IPv6 client is grouped by its /64 (Config.IPv6Prefix), an
// address in the NAT64 prefix 64:ff9b::/96 is keyed as the IPv4 client it
// carries, and the "x-forwarded-for" metadata is believed only from peers
// in Config.TrustedProxies, whose client is then its right-most address
// that is not itself trusted. A peer whose address is not an IP address
// (a Unix socket, bufconn) is keyed "invalid-remote-addr": all such peers
// share one allowance. Config.Key keys by something else (an
// authenticated user's id), given the call's context, its method and the
// address found.
//
// # Memory
//
// The zero-value Config bounds memory, as httplimit's does: each policy
// forgets a client whose state has been a new client's for a minute
// (forgetting it changes no decision), and holds at most 1,048,576
// clients, fewer for the sliding log, about 64 MiB: LocalStoreConfig's
// defaults, on the LocalStore that the Limiter makes when Config.Store is
// nil. For other bounds, pass a Store of floodgate.NewLocalStore
// (floodgate.Unbounded and floodgate.Never turn either off).
//
// # Shadow mode
//
// Config.Shadow makes every policy a shadow, and Policy.Shadow one of
// them: a dry run before a limit is enforced. A shadow policy's calls are
// decided and charged as usual, and one that it would refuse proceeds and
// is counted as shadow_denied under it: under Config.Shadow the shadow
// denials are what enforcement would have refused, call for call. With
// both kinds on one entry, a call that only a shadow refuses is charged
// to the enforced policies alone, and still refused if one of them
// refuses.
//
// # Tiers and exemptions
//
// Config.Tier returns a call's tier from its context, its method and the
// key it is counted under, and Config.Tiers[tier][name] are the policies
// of the Methods entry name for the calls in that tier (Tiers[tier][""]
// are the Default's), with their own clients' state. A tier that has no
// entry for the call's match gets the entry's own policies, so an
// unexpected tier name creates no state and no series. Config.Exempt lets
// a call through unlimited and uncharged (health checks, internal
// callers), counted as exempt.
//
// A tier or an exemption decided from metadata the client writes is a
// bypass: a client that can name its tier chooses its own limit. Decide
// them from what the server has verified: a token it issued, mTLS, a
// trusted address.
//
// # Costs known when the call ends
//
// A Policy with After counts a cost that the call reports when it ends
// (the tokens a model streamed) instead of 1: it reserves Policy.Estimate
// when the call arrives (0: a check, which refuses a client that owes
// and charges nothing), and when the handler returns, for a unary call or
// a stream alike, it charges the cost in its place, giving back what the
// estimate had over it, or charging the overrun whatever the client has
// left, so that the client may owe, and is refused until it has paid it
// back. The handler reports the cost with Report on its context, or sets
// it in the metadata key Policy.CostHeader names, in the header or the
// trailer (grpc.SetHeader, grpc.SetTrailer, a stream's SetHeader or
// SetTrailer); the interceptor takes that key out before the metadata is
// sent, so the client never sees it. A call is settled even when its
// client has gone or its handler panicked; a cost neither reported nor
// carried leaves the estimate charged. A check (Estimate 0) admits every
// call while the client owes nothing, so the calls a client has in flight
// at once can pass its budget together by what they cost; an Estimate
// reserves that much ahead of each, and bounds it. The cost must come from
// the server or its backend, never from the client's metadata.
// Limiter.Check has no end to wait
// for: it charges an After policy its estimate.
//
// # Calls in flight
//
// A Policy with InFlight N limits how many calls of a client run at once:
// a call takes a slot of each of its entry's in-flight policies when it
// is admitted, before the rate policies decide, and gives them back when
// a unary handler answers or a stream's handler returns. All or nothing,
// as in httplimit: a call that an in-flight policy refuses is charged by
// no rate policy, and one that a rate policy refuses holds no slot. A
// refusal is ResourceExhausted, "too many calls in flight", with the
// policy's RetryAfter (a second by default) as RetryInfo. PerMessage
// charges a stream's messages to the rate policies only. Limiter.Check
// takes a slot and gives it back at once.
//
// # Changing methods while serving
//
// Limiter.SetMethods replaces Methods, Tiers and Default, validated as New
// validates them; on an error nothing changes, and a call is decided by
// the old limits or the new, never a mix. A policy that keeps its entry's
// name, its tier, its name and its Algorithm keeps its clients' state and
// takes a new Rule by floodgate's SetRule, under which no client gains
// allowance. An entry that keeps its name keeps its counts, and the
// policies that no new entry keeps are closed. A stream already open with
// Config.PerMessage goes on being charged by the policies it opened
// under.
//
// # Across replicas
//
// By default each policy lives in process, so a service on three replicas
// passes up to three times the rule. Config.Store keeps the policies
// outside the process instead: redislimit.NewStore makes one on Redis,
// and every replica that shares it shares one limit per client. Every
// feature here works the same on a Store; a call is decided by all of its
// method entry's rate policies together, all or nothing, in one round
// trip at most (none in the Store's lease mode while the client's leases
// last). An in-flight policy's slot is taken before, in a round trip of
// its own (none while the replica holds one ahead, with redislimit's
// Lease.Slots), and a cost known when the call ends is settled after, as
// redislimit's Store.Settle says. A call whose context ends first is
// refused and charged nowhere. What the client sees while Redis is away
// is the Store's FailureMode.
//
// # Counts
//
// Limiter.AppendCounts reports what the interceptors decided, in the
// shape of package counts, which the prommetrics and otelmetrics modules
// export: the calls, and with Config.PerMessage the stream messages, each
// once, allowed or exempt under its entry (the Methods entry's name, or
// "default" for the Default), denied or shadow_denied under the policy
// that refused it; and each policy's clients held, their bound and its
// evictions. No label is ever a client's key. Counting is always on, at a
// per-P add of a few nanoseconds a call.
package grpclimit
