// Package prommetrics exports floodgate's counts to Prometheus: a
// prometheus.Collector that reads any number of counts.Sources (a
// floodgate.Limiter, an httplimit, grpclimit or redislimit Limiter), each
// under the name it was added with, which becomes its limiter label.
//
//	c := prommetrics.New()
//	if err := c.Add("api", limiter); err != nil { ... }
//	prometheus.MustRegister(c)
//
// Each Metric of package counts is one metric, with a help text that says
// what it counts. Those of a route and policy:
//
//	floodgate_requests_total{limiter, route, policy, result}  counts.Requests
//	floodgate_keys{limiter, route, policy}                    counts.Keys
//	floodgate_keys_max{limiter, route, policy}                counts.KeysMax
//	floodgate_evictions_total{limiter, route, policy, reason} counts.Evictions
//	floodgate_in_flight{limiter, route, policy}               counts.InFlight
//
// and those of a Store's own:
//
//	floodgate_store_round_trips_total{limiter}     counts.StoreCalls
//	floodgate_store_errors_total{limiter, kind}    counts.StoreErrors
//	floodgate_store_breaker_open{limiter}          counts.StoreBreakerOpen
//	floodgate_store_breaker_opens_total{limiter}   counts.StoreBreakerOpens
//	floodgate_store_leased_units_total{limiter}    counts.StoreLeased
//	floodgate_store_returned_units_total{limiter}  counts.StoreReturned
//	floodgate_store_lapsed_units_total{limiter}    counts.StoreLapsed
//
// The names ending in _total are counters, the others gauges. Every
// series of a metric has its labels, "" where a Source has none (a
// floodgate.Limiter of its own has no route or policy), which Prometheus
// stores as a label that is absent. No label holds a client's key.
//
// The Collector costs the requests nothing: it reads its Sources only
// when it is scraped, as they count without it. It is a checked Collector
// (Describe sends every Metric's Desc), so a registry refuses a second
// Collector with the same names; wrap one in prometheus.WrapRegistererWith
// to give it constant labels of its own.
package prommetrics
