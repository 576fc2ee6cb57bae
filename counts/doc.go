// Package counts is the one shape in which floodgate's limiters and
// middlewares report what they have counted: a list of Samples, each a
// Metric with its labels and value. The metrics modules (prommetrics for
// Prometheus, otelmetrics for OpenTelemetry) read any Source and export
// what it appends, each Metric under its own name and labels there, so
// that the core and the middlewares never depend on a metrics library.
//
// A Sample never carries a client's key: its labels are the names of a
// route (or gRPC method), a policy, and a result, reason or error kind,
// all of them fixed by the configuration, so that a client cannot add a
// series.
//
// floodgate.Limiter, httplimit.Limiter, grpclimit.Limiter and
// redislimit.Limiter are Sources.
package counts
