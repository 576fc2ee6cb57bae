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
// Each Metric of package counts is one instrument, with the name, unit
// and description of its Info: an Int64ObservableCounter for a Counter
// (a cumulative, monotonic sum), an Int64ObservableGauge for a Gauge. A
// data point's attributes are floodgate.limiter (the name the Source was
// added under), floodgate.route and floodgate.policy for a Scoped Metric,
// and the Metric's own (Info.Attribute, floodgate.result for requests);
// one whose value is "" (a floodgate.Limiter of its own has no route) is
// left out. No attribute holds a client's key.
//
// The Exporter costs the requests nothing: one callback reads the Sources
// only when a reader collects, as they count without it.
package otelmetrics
