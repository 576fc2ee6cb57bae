// Package prommetrics exports floodgate's counts to Prometheus: a
// prometheus.Collector that reads any number of counts.Sources (a
// floodgate.Limiter, an httplimit, grpclimit or redislimit Limiter), each
// under the name it was added with, which becomes its limiter label.
//
//	c := prommetrics.New()
//	if err := c.Add("api", limiter); err != nil { ... }
//	prometheus.MustRegister(c)
//
// The names, kinds, help and labels are those of each Metric's Info (see
// package counts): floodgate_requests_total{limiter, route, policy,
// result}, floodgate_keys{limiter, route, policy}, and so on. Every series
// of a Metric has its labels, "" where a Source has none (a
// floodgate.Limiter of its own has no route or policy), which Prometheus
// stores as a label that is absent. No label holds a client's key.
//
// The Collector costs the requests nothing: it reads its Sources only
// when it is scraped, as they count without it. It is a checked Collector
// (Describe sends every Metric's Desc), so a registry refuses a second
// Collector with the same names; wrap one in prometheus.WrapRegistererWith
// to give it constant labels of its own.
package prommetrics
