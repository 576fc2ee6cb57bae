package main

import (
	"fmt"
	"strings"
)

// middlewareTable shows what each HTTP middleware adds to a request: its
// ns/op less the bare handler's, with its allocations, and floodgate's
// overhead ÷ each one's.
func middlewareTable(d *dataset) table {
	const fam, bare, ours = "Middleware", "bare", "floodgate"
	t := table{
		title: "HTTP middleware overhead",
		note: "One request through each middleware to a handler that writes \"ok\", keyed by the client's address, on one goroutine. " +
			"Overhead is ns/op less bare's (no middleware); the ratio is floodgate's overhead ÷ that middleware's (below 1× means floodgate adds less).",
		header: []string{"scenario", "impl", "ns/op", "overhead (ns)", "B/op", "allocs/op", "floodgate ÷ it"},
		right:  rightFrom(2, 7),
	}
	for _, sc := range d.scenarios(fam) {
		if strings.HasPrefix(sc, redisScenario) {
			continue // redisMiddlewareTable's
		}
		b, bok := d.ns(fam, sc, bare)
		f, fok := d.ns(fam, sc, ours)
		for _, impl := range d.impls(func(k benchKey) bool { return k.family == fam && k.scenario == sc }, unitNs) {
			k := benchKey{family: fam, scenario: sc, impl: impl}
			v, ok := d.value(k, unitNs)
			row := []string{sc, impl, cell(v, ok, fmtNs), cell(v-b, ok && bok, fmtNs)}
			for _, u := range []string{"B/op", "allocs/op"} {
				x, xok := d.value(k, u)
				row = append(row, cell(x, xok, fmtNs))
			}
			ratio := missing
			if impl != bare {
				ratio = ratioCell(f-b, fok && bok, v-b, ok && bok)
			}
			t.rows = append(t.rows, append(row, ratio))
		}
	}
	return t
}

// countingTable shows what httplimit's per-route counts cost a request:
// floodgate's ns/op less floodgate-uncounted's, as a share of the
// middleware's own overhead (floodgate-uncounted less bare).
func countingTable(d *dataset) table {
	const fam = "Middleware"
	t := table{
		title: "What the middleware's counting costs",
		note: "httplimit with its per-route counts (always on) and without them (an internal switch), ns/op; " +
			"the share is the difference over the uncounted middleware's own overhead (its ns/op less bare's).",
		header: []string{"scenario", "bare", "uncounted", "counted", "counting (ns)", "share of overhead"},
		right:  rightFrom(1, 6),
	}
	for _, sc := range d.scenarios(fam) {
		b, bok := d.ns(fam, sc, "bare")
		u, uok := d.ns(fam, sc, "floodgate-uncounted")
		c, cok := d.ns(fam, sc, "floodgate")
		if !uok || !cok {
			continue
		}
		share := missing
		if bok && u > b {
			share = fmt.Sprintf("%+.1f%%", 100*(c-u)/(u-b))
		}
		t.rows = append(t.rows, []string{sc, cell(b, bok, fmtNs), fmtNs(u), fmtNs(c), fmtNs(c - u), share})
	}
	return t
}

// redisMiddlewareTable compares the HTTP middlewares on one redis-server
// (BenchmarkMiddleware's scenarios redis-clients-N): requests a second,
// round trips, scripts and commands per request, latency; each one's
// requests a second ÷ the fastest Redis-backed peer's; and each
// Redis-backed one's p99 ÷ the in-process middleware's.
func redisMiddlewareTable(d *dataset) table {
	const fam, bare, inproc = "Middleware", "bare", "floodgate"
	t := table{
		title: "HTTP middleware on Redis: httplimit on redislimit's Store vs ulule and throttled",
		note: "One redis-server on loopback, started by the benchmark; 64 requests at once (g) from random clients of 1 or 1,000, every one admitted, each through the middleware to a handler that writes \"ok\". " +
			"floodgate is httplimit in process, bare no middleware; floodgate-redis is httplimit on redislimit.NewStore, a round trip per request, -lease in lease mode, -2policies a route of two policies decided together, -2tiers two policies in flight at once (each client's request decided by its tier's policy; half the clients in each tier), whose calls share the Store's one pipeline. " +
			"rt/req is the round trips the middleware's go-redis client made per request (a pipeline is one; lease renewals count); scripts/req and cmds/req are the scripts, and every command, that Redis ran per request (INFO commandstats: a script's own commands count); p50, p99 and p99.9 are one request's latency in µs. " +
			"× best peer is req/s ÷ the faster of ulule-redis and throttled-redis; p99 ÷ in-process is the p99 ÷ floodgate's in process. " +
			"The team's targets: floodgate-redis ≥ 1× the best peer; floodgate-redis-lease ≥ 20× and p99 ≤ 2× in process.",
		header: []string{"scenario", "g", "impl", "req/s", "rt/req", "scripts/req", "cmds/req", "p50 (µs)", "p99 (µs)", "p99.9 (µs)", "× best peer", "p99 ÷ in-process"},
		right:  rightFrom(1, 12),
	}
	us := func(v float64) string { return fmt.Sprintf("%.2f", v/1000) }
	per := func(v float64) string { return fmt.Sprintf("%.4g", v) }
	for _, sc := range d.scenarios(fam) {
		if !strings.HasPrefix(sc, redisScenario) {
			continue
		}
		for _, g := range d.goroutines(fam, sc) {
			key := func(impl string) benchKey { return benchKey{family: fam, scenario: sc, impl: impl, g: g} }
			var best string
			var bestNs float64
			for _, p := range redisMiddlewarePeers {
				if v, ok := d.value(key(p), unitNs); ok && (best == "" || v < bestNs) {
					best, bestNs = p, v
				}
			}
			ip99, ipok := d.value(key(inproc), unitP99)
			for _, impl := range d.impls(func(k benchKey) bool { return k.family == fam && k.scenario == sc && k.g == g }, unitNs) {
				k := key(impl)
				ns, ok := d.value(k, unitNs)
				row := []string{sc, fmt.Sprint(g), impl, cell(1e9/ns, ok, func(v float64) string { return fmt.Sprintf("%.0f", v) })}
				for _, u := range []string{unitRTReq, unitScrReq, unitCmds} {
					v, vok := d.value(k, u)
					row = append(row, cell(v, vok, per))
				}
				for _, u := range []string{unitP50, unitP99, unitP999} {
					v, vok := d.value(k, u)
					row = append(row, cell(v, vok, us))
				}
				ratio := missing
				if impl != bare && best != "" {
					ratio = ratioCell(bestNs, true, ns, ok) + " (" + best + ")"
				}
				p99ratio := missing
				if impl != bare && impl != inproc {
					p99, p99ok := d.value(k, unitP99)
					p99ratio = ratioCell(p99, p99ok, ip99, ipok)
				}
				t.rows = append(t.rows, append(row, ratio, p99ratio))
			}
		}
	}
	return t
}
