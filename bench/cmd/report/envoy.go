package main

import (
	"fmt"
	"slices"
	"strings"
)

// rlsTable compares Envoy's rate-limit services on one redis-server
// (BenchmarkRLS): requests a second, Redis's commands per request, the
// commands sent per request, latency; each one's requests a second ÷
// envoyproxy/ratelimit's; and each one's p99 ÷ envoyproxy/ratelimit's.
func rlsTable(d *dataset) table {
	const fam, peer = "RLS", "envoy-ratelimit"
	t := table{
		title: "Envoy's rate-limit service: floodgate-rls vs envoyproxy/ratelimit",
		note: "Both services as processes on loopback, on one redis-server that the benchmark starts, with one configuration: a rule per client (1,000), one hot descriptor and a rule per route, each per second, and a token budget per client per hour (as Envoy AI Gateway's are), limits no request reaches. " +
			"64 requests at once (g) over one gRPC connection, each of one client's descriptor (clients-1000-desc-1), of the hot one (hot-desc-1), of a client's, the hot one and a route's (clients-1000-desc-3), or Envoy AI Gateway's token budget: a client's tokens descriptor, half the requests with hits_addend 0 (a check, at a stream's start) and half with its cost of 1 to 1,000 (at its end), which both services charge whatever the key holds, as their default STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT says (tokens-1000-desc-1). " +
			"envoy-ratelimit is envoyproxy/ratelimit, built from its Go module at the version rls/testdata/ratelimit-peer pins, with its default settings; floodgate-rls-redis decides each request by one script, -lease in lease mode (FLOODGATE_LEASE_MAX=100000: a request whose every descriptor holds a lease is served from the leases), -local in process. " +
			"cmds/req is every command Redis ran per request, a script's own included (INFO commandstats); sent/req the commands sent to Redis per request: every one for envoyproxy/ratelimit, which runs no script, and the scripts for floodgate-rls, which sends nothing else. p50, p99 and p99.9 are one request's latency in µs, on a machine that runs the callers, the service and Redis together. " +
			"server CPU is the service process's CPU time per request; gRPC its share in gRPC (grpc-go, HTTP/2, protobuf and the Envoy types), own the service's own µs per request, gRPC, the store (its Redis layer and client) and the runtime alone taken out, each from a CPU profile of the service under the same load (the leaf-most frame outside Go's standard library decides). " +
			"The team's targets: floodgate-rls-redis ≥ 1.2× with fewer commands sent (≥ 1.3× on tokens-1000-desc-1); -lease and -local ≥ 3× and p99 ≤ 0.5×; own ≤ 0.5× envoy-ratelimit's.",
		header: []string{"scenario", "g", "impl", "req/s", "cmds/req", "sent/req", "p50 (µs)", "p99 (µs)", "p99.9 (µs)", "server CPU (µs/req)", "gRPC", "own (µs/req)", "× envoy-ratelimit", "p99 ÷ envoy-ratelimit", "own ÷ envoy-ratelimit"},
		right:  rightFrom(1, 15),
	}
	us := func(v float64) string { return fmt.Sprintf("%.0f", v/1000) }
	per := func(v float64) string { return fmt.Sprintf("%.4g", v) }
	profiled := false
	for _, sc := range d.scenarios(fam) {
		for _, g := range d.goroutines(fam, sc) {
			key := func(impl string) benchKey { return benchKey{family: fam, scenario: sc, impl: impl, g: g} }
			pns, pok := d.value(key(peer), unitNs)
			p99, p99ok := d.value(key(peer), unitP99)
			pown, pownOK := d.value(key(peer), unitOwnCPU)
			for _, impl := range d.impls(func(k benchKey) bool { return k.family == fam && k.scenario == sc && k.g == g && !onMemcached(k.impl) }, unitNs) {
				k := key(impl)
				ns, ok := d.value(k, unitNs)
				row := []string{sc, fmt.Sprint(g), impl, cell(1e9/ns, ok, func(v float64) string { return fmt.Sprintf("%.0f", v) })}
				cmds, cok := d.value(k, unitCmds)
				scripts, sok := d.value(k, unitScrReq)
				sent, sentOK := scripts, sok // floodgate-rls sends nothing but scripts
				if impl == peer {
					sent, sentOK = cmds, cok // envoyproxy/ratelimit runs no script
				}
				row = append(row, cell(cmds, cok, per), cell(sent, sentOK, per))
				for _, u := range []string{unitP50, unitP99, unitP999} {
					v, vok := d.value(k, u)
					row = append(row, cell(v, vok, us))
				}
				srv, srvOK := d.value(k, unitSrvCPU)
				rpc, rpcOK := d.value(k, unitRPCCPU)
				own, ownOK := d.value(k, unitOwnCPU)
				profiled = profiled || ownOK
				row = append(row, cell(srv, srvOK, func(v float64) string { return fmt.Sprintf("%.1f", v/1000) }),
					cell(rpc/srv, rpcOK && srvOK && srv > 0, func(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) }),
					cell(own, ownOK, func(v float64) string { return fmt.Sprintf("%.1f", v/1000) }))
				ratio, p99ratio, ownRatio := missing, missing, missing
				if impl != peer {
					ratio = ratioCell(pns, pok, ns, ok)
					v, vok := d.value(k, unitP99)
					p99ratio = ratioCell(v, vok, p99, p99ok)
					ownRatio = ratioCell(own, ownOK, pown, pownOK)
				}
				t.rows = append(t.rows, append(row, ratio, p99ratio, ownRatio))
			}
		}
	}
	if len(t.rows) > 0 && !profiled {
		t.note += " This run profiled neither service (a run cut to the headline tables takes no profile, a second a scenario and service): gRPC and own are left empty."
	}
	return t
}

// The targets of issue 43 for floodgate-rls as Envoy Gateway deploys it,
// which gatewayTable prints beside BenchmarkXDS's and BenchmarkTLS's
// figures.
const (
	pushTarget     = 1e9 // ns from a push of 10,000 rules to its use
	p99RatioTarget = 2   // p99 with a push every second ÷ p99 with none
	tlsLossTarget  = 15  // % of plaintext's requests a second that TLS loses
)

// gatewayTable shows both services as Envoy Gateway deploys them
// (BenchmarkXDS, BenchmarkTLS): per service, the time a push of 10,000
// rules takes to be used, the p99 of ShouldRateLimit with no push and
// with one every second, and their ratio; and per service and store, the
// requests a second over plaintext and over TLS, and the share TLS
// loses; each beside issue 43's target.
func gatewayTable(d *dataset) table {
	t := table{
		title: "Envoy Gateway's deployment: pushes and TLS",
		note: "Each service as a process, as Envoy Gateway deploys envoyproxy/ratelimit: on one redis-server that the benchmark starts, configured over xDS by go-control-plane's ADS server and snapshot cache (a process of its own) over TLS 1.3 with client certificates, and serving gRPC over TLS 1.3 to clients that show one. " +
			"push is the time from the ADS server's new snapshot of 10,000 rules (Envoy Gateway's shape: a route's descriptor and its rule below it), every rule changed, to the service answering by it. " +
			"p99 quiet and p99 with pushes are ShouldRateLimit's 99th percentile latency in µs under an open loop of 2,000 requests a second, each for a random route of the 10,000, in seconds with no push and in seconds that start with such a push, eight of each interleaved (half a second after each push counts in neither); the ratio is the second ÷ the first, the median of the passes' ratios. " +
			"req/s is BenchmarkRLS's clients-1000-desc-1 load (64 callers over one connection) on a process serving plaintext and on one serving TLS, alternately in four rounds; TLS loss is the share of the plaintext requests a second that TLS loses, 100 × (1 − plaintext ÷ TLS time per request). " +
			"envoy-ratelimit is envoyproxy/ratelimit at the version rls/testdata/ratelimit-peer pins; floodgate-rls-redis decides on Redis, -local in process. " +
			"The team's targets (issue 43): a push of 10,000 rules used within 1 s; p99 with pushes ≤ 2× p99 quiet; TLS loses ≤ 15% of the requests a second, for both services.",
		header: []string{"impl", "push (ms)", "target", "p99 quiet (µs)", "p99 with pushes (µs)", "ratio", "target", "plaintext (req/s)", "TLS (req/s)", "TLS loss", "target"},
		right:  rightFrom(1, 11),
	}
	ms := func(v float64) string { return fmt.Sprintf("%.0f", v/1e6) }
	us := func(v float64) string { return fmt.Sprintf("%.0f", v/1e3) }
	rps := func(v float64) string { return fmt.Sprintf("%.0f", 1e9/v) }
	var impls []string
	for _, fam := range []string{"XDS", "TLS"} {
		for _, impl := range d.impls(func(k benchKey) bool { return k.family == fam }, unitNs) {
			if !slices.Contains(impls, impl) {
				impls = append(impls, impl)
			}
		}
	}
	for _, impl := range oursFirst(impls) {
		push, pushOK := d.value(benchKey{family: "XDS", scenario: "push-10000", impl: impl}, unitNs)
		load := benchKey{family: "XDS", scenario: "load-pushes-1s", impl: impl}
		quiet, qOK := d.value(load, unitP99Quiet)
		pushed, pOK := d.value(load, unitP99Pushes)
		ratio, rOK := d.value(load, unitP99Ratio)
		tls := benchKey{family: "TLS", scenario: "clients-1000-desc-1", impl: impl}
		plain, plainOK := d.value(tls, unitPlainNs)
		secure, secureOK := d.value(tls, unitTLSNs)
		loss, lossOK := d.value(tls, unitTLSLoss)
		row := []string{impl, cell(push, pushOK, ms), missing, cell(quiet, qOK, us), cell(pushed, pOK, us),
			cell(ratio, rOK, func(v float64) string { return fmt.Sprintf("%.2f×", v) }), missing,
			cell(plain, plainOK, rps), cell(secure, secureOK, rps), cell(loss, lossOK, func(v float64) string { return fmt.Sprintf("%.1f%%", v) }), missing}
		if pushOK {
			row[2] = fmt.Sprintf("≤ %.0f", pushTarget/1e6)
		}
		if rOK {
			row[6] = fmt.Sprintf("≤ %d×", p99RatioTarget)
		}
		if lossOK {
			row[10] = fmt.Sprintf("≤ %d%%", tlsLossTarget)
		}
		t.rows = append(t.rows, row)
	}
	return t
}

// The targets of issue 41 for floodgate-rls's idle rules, which
// idleTable prints beside BenchmarkIdle's figures: CPU while idle as a
// share of one core, goroutines beyond those at start, live heap a rule.
const (
	idleCPUTarget        = 1    // % of one core over the 10 s idle
	idleGoroutinesTarget = 16   // goroutines added
	idleHeapTarget       = 2048 // bytes a rule (2 KiB)
)

// idleFigures are one scenario's figures of BenchmarkIdle.
type idleFigures struct {
	cpu        []float64 // % of one core, one a run
	goroutines float64   // goroutines added
	heap       float64   // bytes a rule
	rss        float64   // MiB
}

// idleBefore are BenchmarkIdle's figures before issue 41's engine (one
// engine per Store, where each rule's policy had run a goroutine of its
// own), by scenario: `go test -bench '^BenchmarkIdle$' -benchtime 1x` in
// bench/ at commit 554c3c8 with BenchmarkIdle added (b833e24, which adds
// nothing else), one run; the 1,000 rules' CPU also from a second run.
// They are fixed here because make bench measures only the code it is
// run on.
var idleBefore = map[string]idleFigures{
	"rules-1000":  {cpu: []float64{35.4, 23.6}, goroutines: 1000, heap: 237581, rss: 44.5},
	"rules-10000": {cpu: []float64{195.0}, goroutines: 10000, heap: 236988, rss: 204.6},
}

// idleTable shows what idle rules cost floodgate-rls (BenchmarkIdle): per
// scenario, its CPU while idle, the goroutines it added, its heap a rule
// and its resident memory, each beside issue 41's target and the figure
// before that engine.
func idleTable(d *dataset) table {
	const fam, impl = "Idle", "floodgate-rls-lease"
	t := table{
		title: "Idle rules: what floodgate-rls holds and spends while nobody asks",
		note: "floodgate-rls as a process on one redis-server that the benchmark starts, in lease mode (FLOODGATE_LEASE_MAX=1000), " +
			"with a configuration of 1,000 or 10,000 rules (rules-N), each asked once over gRPC and then left idle for 10 s. " +
			"idle CPU is the CPU the process used over those 10 s as a share of one core (above 100%, more than one core); " +
			"goroutines added the goroutines it ran after them beyond those it ran before any request; heap its live heap after them " +
			"beyond the heap before any request, per rule (their keys' leases have gone back by then); RSS its resident memory, in MiB. " +
			"\"before\" is the same benchmark before issue 41's engine, when each rule's policy ran a goroutine of its own: " +
			"`go test -bench '^BenchmarkIdle$' -benchtime 1x` in bench/ at commit 554c3c8 with BenchmarkIdle added (b833e24, which adds nothing else), one run " +
			"(two for the 1,000 rules' CPU, both shown); those figures are kept in cmd/report, not measured by this run. " +
			"The team's targets (issue 41), in the \"target\" columns: idle CPU ≤ 1% of one core over 10 s, at most 16 goroutines " +
			"beyond those at start, heap ≤ 2 KiB a rule.",
		header: []string{"scenario", "idle CPU (% of a core)", "target", "before",
			"goroutines added", "target", "before", "heap (B/rule)", "target", "before", "RSS (MiB)", "before"},
		right: rightFrom(1, 12),
	}
	pct := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	added := func(v float64) string {
		if v == float64(int64(v)) {
			return fmt.Sprintf("%+.0f", v)
		}
		return fmt.Sprintf("%+.1f", v)
	}
	whole := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	mib := func(v float64) string { return fmt.Sprintf("%.1f", v) }
	for _, sc := range d.scenarios(fam) {
		k := benchKey{family: fam, scenario: sc, impl: impl}
		cpu, cpuOK := d.value(k, unitIdle)
		g, gOK := d.value(k, unitAdded)
		h, hOK := d.value(k, unitBRule)
		rss, rssOK := d.value(k, unitRSS)
		if !cpuOK && !gOK && !hOK && !rssOK {
			continue
		}
		b, bOK := idleBefore[sc]
		var cpus []string
		for _, v := range b.cpu {
			cpus = append(cpus, pct(v))
		}
		beforeCPU := missing
		if len(cpus) > 0 {
			beforeCPU = strings.Join(cpus, ", ")
		}
		t.rows = append(t.rows, []string{sc,
			cell(cpu, cpuOK, pct), "≤ " + pct(idleCPUTarget), beforeCPU,
			cell(g, gOK, added), "≤ " + added(idleGoroutinesTarget), cell(b.goroutines, bOK, added),
			cell(h, hOK, whole), "≤ " + whole(idleHeapTarget), cell(b.heap, bOK, whole),
			cell(rss, rssOK, mib), cell(b.rss, bOK, mib)})
	}
	return t
}
