package main

import (
	"fmt"
	"strings"
)

// onMemcached reports whether impl is a service of BenchmarkRLS that
// keeps its counts on memcached: its figures are rlsMemcacheTable's.
func onMemcached(impl string) bool { return strings.HasSuffix(impl, "-memcache") }

// rlsMemcacheTable compares Envoy's rate-limit services on one memcached
// (BenchmarkRLS's -memcache services): requests a second, memcached's
// commands per request, latency, the service's and memcached's CPU;
// floodgate-rls's requests a second ÷ envoyproxy/ratelimit's and its
// p99 ÷ envoyproxy/ratelimit's.
func rlsMemcacheTable(d *dataset) table {
	const fam, peer = "RLS", "envoy-ratelimit-memcache"
	t := table{
		title: "Envoy's rate-limit service on memcached: floodgate-rls vs envoyproxy/ratelimit",
		note: "BenchmarkRLS's load and configuration (see the table before), both services with BACKEND_TYPE=memcache on one memcached that the benchmark starts, each with its own key prefix and MEMCACHE_MAX_IDLE_CONNS=64 (one idle connection a caller: at envoyproxy/ratelimit's default of 2 both would dial for most round trips). " +
			"envoy-ratelimit-memcache reads a request's counts with one get and increments each key afterwards, in the background, so that callers racing it read the same count and it may pass more than the limit; floodgate-rls-memcache is exact: it reads with gets and writes with cas, and concurrent requests of one key share a round. " +
			"mc cmds/req is memcached's commands per request from its stats (cmd_get, which counts each key of a get, cmd_set, which counts add and cas too, cmd_touch, incr, decr and delete): with one descriptor a request, its round trips. " +
			"memcached CPU and server CPU are memcached's and the service process's CPU time per request; p50, p99 and p99.9 one request's latency in µs. " +
			"The issue's target: floodgate-rls-memcache ≥ 1× envoy-ratelimit-memcache per request, while exact.",
		header: []string{"scenario", "g", "impl", "req/s", "mc cmds/req", "p50 (µs)", "p99 (µs)", "p99.9 (µs)", "server CPU (µs/req)", "memcached CPU (µs/req)", "× envoy-ratelimit-memcache", "p99 ÷ envoy-ratelimit-memcache"},
		right:  rightFrom(1, 12),
	}
	us := func(v float64) string { return fmt.Sprintf("%.0f", v/1000) }
	cpu := func(v float64) string { return fmt.Sprintf("%.1f", v/1000) }
	for _, sc := range d.scenarios(fam) {
		for _, g := range d.goroutines(fam, sc) {
			key := func(impl string) benchKey { return benchKey{family: fam, scenario: sc, impl: impl, g: g} }
			pns, pok := d.value(key(peer), unitNs)
			p99, p99ok := d.value(key(peer), unitP99)
			for _, impl := range d.impls(func(k benchKey) bool { return k.family == fam && k.scenario == sc && k.g == g && onMemcached(k.impl) }, unitNs) {
				k := key(impl)
				ns, ok := d.value(k, unitNs)
				cmds, cok := d.value(k, unitMCCmds)
				row := []string{sc, fmt.Sprint(g), impl, cell(1e9/ns, ok, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
					cell(cmds, cok, func(v float64) string { return fmt.Sprintf("%.4g", v) })}
				for _, u := range []string{unitP50, unitP99, unitP999} {
					v, vok := d.value(k, u)
					row = append(row, cell(v, vok, us))
				}
				srv, srvOK := d.value(k, unitSrvCPU)
				mc, mcOK := d.value(k, unitMCCPU)
				row = append(row, cell(srv, srvOK, cpu), cell(mc, mcOK, cpu))
				ratio, p99ratio := missing, missing
				if impl != peer {
					ratio = ratioCell(pns, pok, ns, ok)
					v, vok := d.value(k, unitP99)
					p99ratio = ratioCell(v, vok, p99, p99ok)
				}
				t.rows = append(t.rows, append(row, ratio, p99ratio))
			}
		}
	}
	return t
}
