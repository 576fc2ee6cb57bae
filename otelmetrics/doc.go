// Package otelmetrics exports floodgate's counts to OpenTelemetry: the
// counts of any number of counts.Sources (a floodgate.Limiter, an
// httplimit, grpclimit or redislimit Limiter), each under the name it was
// added with, as asynchronous instruments of a metric.MeterProvider.
//
//	exp, err := otelmetrics.New(meterProvider)
//	if err != nil { ... }
//	defer exp.Close()
//	if err := exp.Add("api", limiter); err != nil { ... }
//
// Each Metric of package counts is one instrument, with a unit and a
// description that says what it counts: an Int64ObservableCounter (a
// cumulative, monotonic sum) for a counter, an Int64ObservableGauge for a
// gauge. Those of a route and policy:
//
//	floodgate.requests ({request}), a counter by floodgate.result       counts.Requests
//	floodgate.keys ({key}), a gauge                                     counts.Keys
//	floodgate.keys.limit ({key}), a gauge                               counts.KeysMax
//	floodgate.evictions ({key}), a counter by floodgate.eviction.reason counts.Evictions
//	floodgate.in_flight ({request}), a gauge                            counts.InFlight
//
// and those of a Store's own, counters but for the breaker's gauge:
//
//	floodgate.store.round_trips ({call})           counts.StoreCalls
//	floodgate.store.errors ({call}), by error.type counts.StoreErrors
//	floodgate.store.breaker.open (1), a gauge      counts.StoreBreakerOpen
//	floodgate.store.breaker.opens ({open})         counts.StoreBreakerOpens
//	floodgate.store.leased ({unit})                counts.StoreLeased
//	floodgate.store.returned ({unit})              counts.StoreReturned
//	floodgate.store.lapsed ({unit})                counts.StoreLapsed
//
// A data point's attributes are floodgate.limiter (the name the Source
// was added under), floodgate.route and floodgate.policy for a Metric of
// a route and policy, and the Metric's own above; one whose value is ""
// (a floodgate.Limiter of its own has no route) is left out. No
// attribute holds a client's key.
//
// The Exporter costs the requests nothing: one callback reads the Sources
// only when a reader collects, as they count without it.
package otelmetrics
