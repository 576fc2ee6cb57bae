package main

import (
	"fmt"
)

// redisTable compares the Redis-backed limiters on one server: checks a
// second, round trips per check, latency and the server's own time per
// call, at each goroutine count; each limiter's checks a second ÷
// redis_rate's; and lease mode's p99 of the checks it served from a lease
// ÷ the in-process limiter's p99.
func redisTable(d *dataset) table {
	const fam, peer, inproc, lease = "Redis", "redis_rate", "in-process", "floodgate-lease"
	t := table{
		title: "Redis backend: redislimit, per request and in lease mode, vs redis_rate; memcachelimit beside",
		note: "One redis-server on loopback, started by the benchmark, and one memcached beside it; checks of random keys of 1,000, or of one hot key, every one admitted. " +
			"floodgate is redislimit per request, floodgate-lease in lease mode, floodgate-memcached memcachelimit's Store on the memcached, a Decide per check (gets, then cas; concurrent checks of one key share a round), on the same rule. " +
			"checks/s counts checks over the wall time; rt/check is round trips per check (a pipeline is one), scripts/check the scripts Redis ran per check; p50, p99 and p99.9 are one check's latency in µs, " +
			"and p99 local that of lease mode's checks during which it made no round trip; server µs/call is EVALSHA's usec_per_call from INFO commandstats. " +
			"× redis_rate is checks/s ÷ redis_rate's; p99 ÷ in-process is lease mode's p99 local ÷ the in-process limiter's p99 (same rule, no Redis). " +
			"The -paired scenarios run floodgate and redis_rate in turn at one goroutine, 25 ms each, 20 rounds a pass: checks/s is the median slice's, so that the machine's drift falls on both alike.",
		header: []string{"scenario", "g", "impl", "checks/s", "rt/check", "scripts/check", "p50 (µs)", "p99 (µs)", "p99.9 (µs)", "p99 local (µs)", "server µs/call", "× redis_rate", "p99 ÷ in-process"},
		right:  rightFrom(1, 13),
	}
	us := func(v float64) string { return fmt.Sprintf("%.2f", v/1000) }
	for _, sc := range d.scenarios(fam) {
		for _, g := range d.goroutines(fam, sc) {
			key := func(impl string) benchKey { return benchKey{family: fam, scenario: sc, impl: impl, g: g} }
			pn, pok := d.value(key(peer), unitNs)
			ip99, ipok := d.value(key(inproc), unitP99)
			for _, impl := range d.impls(func(k benchKey) bool { return k.family == fam && k.scenario == sc && k.g == g }, unitNs) {
				k := key(impl)
				ns, ok := d.value(k, unitNs)
				rt, rtok := d.value(k, unitRT)
				scr, scrok := d.value(k, unitScript)
				p50, p50ok := d.value(k, unitP50)
				p99, p99ok := d.value(k, unitP99)
				p999, p999ok := d.value(k, unitP999)
				loc, locok := d.value(k, unitLocal)
				srv, srvok := d.value(k, unitServer)
				row := []string{sc, fmt.Sprint(g), impl, cell(1e9/ns, ok, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
					cell(rt, rtok, func(v float64) string { return fmt.Sprintf("%.6f", v) }),
					cell(scr, scrok, func(v float64) string { return fmt.Sprintf("%.6f", v) }),
					cell(p50, p50ok, us), cell(p99, p99ok, us), cell(p999, p999ok, us), cell(loc, locok, us),
					cell(srv, srvok, func(v float64) string { return fmt.Sprintf("%.2f", v) })}
				if impl != peer {
					row = append(row, ratioCell(pn, pok, ns, ok))
				} else {
					row = append(row, missing)
				}
				if impl == lease {
					row = append(row, ratioCell(loc, locok, ip99, ipok))
				} else {
					row = append(row, missing)
				}
				t.rows = append(t.rows, row)
			}
		}
	}
	return t
}
