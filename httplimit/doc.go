// Package httplimit is net/http middleware over floodgate: limits per
// endpoint, keyed by the client's address as far as it can be trusted,
// with the IETF RateLimit headers on every limited answer and Retry-After
// on a 429. It uses the standard library only.
//
//	lim, err := httplimit.New(httplimit.Config{
//		Routes: []httplimit.Route{
//			{Pattern: "POST /login", Policies: []httplimit.Policy{{Name: "login", Rule: floodgate.Rule{Limit: 5, Period: time.Minute}}}},
//			{Pattern: "/api/", Policies: []httplimit.Policy{
//				{Name: "burst", Rule: floodgate.Rule{Limit: 10, Period: time.Second}},
//				{Name: "hourly", Rule: floodgate.Rule{Limit: 1000, Period: time.Hour}},
//			}},
//		},
//		Default:        []httplimit.Policy{{Name: "default", Rule: floodgate.Rule{Limit: 100, Period: time.Minute}}},
//		TrustedProxies: []string{"10.0.0.0/8"},
//	})
//	if err != nil {
//		log.Fatal(err) // a bad pattern, rule, policy name or CIDR
//	}
//	defer lim.Close()
//	http.ListenAndServe(addr, lim.Handler(mux)) // or router.Use(lim.Handler)
//
// # Routes
//
// Each Route matches requests as http.ServeMux matches its patterns (Go
// 1.22 syntax, methods and wildcards included: "GET /users/{id}",
// "/static/", "api.example.com/"), and holds limiters of its own: one
// client's traffic to one endpoint never spends its allowance on another,
// and "GET /users/{id}" is one endpoint for every id. A Route may carry
// several Policies (10 a second and 1,000 an hour): a request passes only
// if all admit it, and a refusal consumes nothing (see floodgate.Limits).
// Config.Default limits the requests that no Route matches; nil lets them
// through without a limit or headers.
//
// # The clean path
//
// A request counts under the Route of its clean path, as the router
// behind the middleware will serve it, not as it was sent: "//", "/./",
// "/x/../" and a subtree's path without its trailing slash ("/api" for a
// Route "/api/") count under the Route the clean path matches, where
// http.ServeMux alone would answer a redirect and the request would pass
// unlimited to a router that serves it anyway. HEAD counts under a GET
// pattern, as ServeMux matches it. A path whose escapes change its
// segments has two clean forms: "/api%2Fx" is "/api/x" to routers that
// match the decoded path (chi, gorilla/mux) and one segment "api/x" to
// ServeMux, which matches the escaped one. When the two forms match
// different Routes, the request is charged under both, so that whichever
// the router serves, its limit was applied. This is tested against
// ServeMux, chi and gorilla/mux.
//
// # Client identity
//
// The client is the connection's peer address, without the port. An IPv6
// client is grouped by its /64 (Config.IPv6Prefix), the block one
// subscriber usually holds, and an address in the NAT64 prefix
// 64:ff9b::/96 is keyed as the IPv4 client it carries. The proxy header,
// X-Forwarded-For by default or RFC 7239's Forwarded (Config.ProxyHeader),
// is believed only from peers in Config.TrustedProxies, and then the
// client is its right-most address that is not itself a trusted proxy.
// Only one header is read, since a client behind a proxy that sets one
// could send the other with an address of its choosing; and only its last
// 8 KiB (all its lines together, never an element the bound cuts
// through), from the right, where the proxies append, so a client that
// pads the header it sends cannot push their entries out of reach. A
// header from a trusted proxy that is malformed where it is read keys the
// proxy itself, and every request whose RemoteAddr cannot be read (empty
// or garbage) is keyed "invalid-remote-addr", one allowance for all of
// them: no header lets a client choose its key. Config.Key keys by an API key or
// a user instead, given the address found.
//
// # Memory
//
// The zero-value Config bounds memory, since the middleware faces clients:
// each policy forgets a client whose state has been a new client's for a
// minute (forgetting it changes no decision), and holds at most 1,048,576
// clients, fewer for the sliding log, about 64 MiB, with an evicted client
// coming back with no more than it left with: LocalStoreConfig's defaults,
// on the LocalStore that the middleware makes when Config.Store is nil. A
// client that rotates its address through a /32 of IPv6 /64s, or its API
// key, then costs a bounded amount. For other bounds, pass a Store of
// floodgate.NewLocalStore (floodgate.Unbounded and floodgate.Never turn
// either off).
//
// # Headers
//
// Every limited answer carries RateLimit-Policy ("login";q=5;w=60) and
// RateLimit ("login";r=4;t=12), as the IETF's RateLimit header fields
// draft defines them: one item per policy, t the seconds until the policy
// is full again, rounded up. q is the most a client can hold, so r never
// exceeds it: a Burst above Limit gives q=Burst and w=Burst×Period/Limit.
// Every number is clamped to RFC 9651's 15-digit Integer, so the headers
// always parse as Structured Fields. A refusal is 429 Too Many Requests
// with Retry-After in whole seconds, rounded up and never 0, and a body
// that says only that; Config.Deny writes another. Config.LegacyHeaders
// adds X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset (a
// Unix time), from the most restrictive policy.
//
// # Shadow mode
//
// Config.Shadow makes every policy a shadow, and Policy.Shadow one of
// them: a dry run before a limit is enforced. A shadow policy's requests
// are decided and charged as usual (a refusal consumes nothing, as when
// enforced), and one that it would refuse is served and counted as
// shadow_denied under it: under Config.Shadow a flood passes whole, and
// the shadow denials are what enforcement would have refused, request for
// request. With both kinds on one Route, a request that only a shadow
// refuses is charged to the enforced policies alone, and still refused if
// one of them refuses. The headers describe only the enforced policies,
// so a dry run changes no answer a client sees; Config.ShadowHeaders
// sends the shadows' too.
//
// # Tiers and exemptions
//
// Config.Tier returns a request's tier from the request and the key it is
// counted under, and a Route's Tiers give that tier policies of its own,
// with their own clients' state. A tier that the Route has no policies
// for gets the Route's own, so an unexpected tier name creates no state
// and no series. The requests no Route matches are tiered by a Route with
// Pattern "/", which catches them all (Default then never applies).
// Config.Exempt lets a request through unlimited, uncharged and without
// headers (health checks, internal callers), counted as exempt.
//
// A tier or an exemption decided from a header the client controls is a
// bypass: a client that can send "X-Plan: enterprise" or
// "User-Agent: kube-probe" chooses its own limit. Decide them from what
// the server has verified: an API key it issued, a session, mTLS, a
// trusted address.
//
// # Costs known when the handler returns
//
// A Policy with After counts a cost that the request reports when it
// ends (the tokens a model streamed, the bytes sent) instead of 1: it
// reserves Policy.Estimate at admission (0: a check, which refuses a
// client that owes and charges nothing), and when the handler returns it
// charges the cost in its place, giving back what the estimate had over
// it, or charging the overrun whatever the client has left, so that the
// client may owe, and is refused until it has paid it back. The handler
// reports the cost with Report, or a response header or trailer named by
// Policy.CostHeader carries it (a backend behind a reverse proxy); the
// middleware reads that header when the handler writes its own, and the
// trailer when it returns, and removes both (and the name from the
// Trailer announcement), so the client never sees the cost. A request is
// settled even when its client has gone, or its handler panicked: what
// it streamed or reported is charged. A cost neither reported nor carried
// leaves the estimate charged. A check (Estimate 0) admits every request
// while the client owes nothing, so the requests a client has in flight
// at once can pass its budget together by what they cost; an Estimate
// reserves that much ahead of each, and bounds it. The cost must come from
// the server or its backend, never from what the client sent. Such a
// request's ResponseWriter is the middleware's (it keeps http.Flusher,
// and http.ResponseController finds the server's through it), made per
// request.
//
// # Requests in flight
//
// A Policy with InFlight N limits how many requests of a client run at
// once, rather than how many arrive: a request takes a slot of each of
// its route's in-flight policies when it is admitted, before the rate
// policies decide, and gives them back when the handler returns (or
// panics). All or nothing: a request that an in-flight policy refuses is
// charged by no rate policy, and one that a rate policy refuses holds no
// slot. A refusal is a 429 with Retry-After, the policy's RetryAfter
// (a second by default), and no RateLimit headers, which describe quotas
// over time. Counts add floodgate_in_flight, the requests holding a slot
// now. On a Store the Store must be a floodgate.SlotStore
// (redislimit's is, across replicas).
//
// # Changing routes while serving
//
// Limiter.SetRoutes replaces the Routes and the Default, validated as New
// validates them; on an error nothing changes, and a request is decided
// by the old routes or the new, never a mix. A policy that keeps its
// Route's pattern, its tier, its name and its Algorithm keeps its clients'
// state and takes a new Rule by floodgate's SetRule, under which no client
// gains allowance; a new Shadow switch takes effect at once. A Route that
// keeps its pattern keeps its counts, and the policies that no new Route
// keeps are closed. A new Algorithm under a kept name is refused, since
// its clients' state could not be kept: a new name starts them afresh.
//
// # Across replicas
//
// By default each policy lives in process, so a service on three replicas
// passes up to three times the rule. Config.Store keeps the policies
// outside the process instead: redislimit.NewStore makes one on Redis,
// and every replica that shares it shares one limit per client. Every
// feature here works the same on a Store; a request is decided by all of
// its route's rate policies together, all or nothing, in one round trip
// at most (none in the Store's lease mode while the client's leases
// last). An in-flight policy's slot is taken before, in a round trip of
// its own (none while the replica holds one ahead, with redislimit's
// Lease.Slots), and a cost known when the handler returns is settled
// after, as redislimit's Store.Settle says. A request whose context ends
// first is refused and charged nowhere. What the client sees while Redis
// is away is the Store's FailureMode.
//
// # Counts
//
// Limiter.AppendCounts reports what the middleware decided, in the shape
// of package counts, which the prommetrics and otelmetrics modules
// export. Each request is counted once under each Route that decided it:
// allowed or exempt under the Route, denied or shadow_denied under the
// policy that refused it; and each policy reports the clients it holds,
// their bound and its evictions. The labels are the Route's pattern (or
// "default" for the Default), the policy's name ("tier/name" for a
// tier's) and the result, never a client's key, so no client can add a
// series. Counting is always on, at a per-P add of a few nanoseconds a
// request.
package httplimit
