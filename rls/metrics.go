package rls

import (
	"strconv"

	"github.com/floodgate-go/floodgate/counts"
	"github.com/prometheus/client_golang/prometheus"
)

// ConfigFailed counts a configuration that failed to load (a file that
// did not parse), after which the Server keeps the one it had, and logs
// nothing: the caller reports err. New and SetConfig count the loads
// that succeed.
func (s *Server) ConfigFailed(err error) {
	if err != nil {
		s.loadErrors.Add(1)
	}
}

// Every rule's series is labelled as envoyproxy/ratelimit's Prometheus
// mapping labels it: the domain, and the first two levels of the rule's
// place (key or key_value, as configured).
var (
	ruleDescs = func() (ds [nStats]*prometheus.Desc) {
		help := [nStats]string{
			"Hits asked of the rule (each request's hits_addend).",
			"Hits refused by the rule.",
			"Hits admitted past the near-limit share of the rule's limit.",
			"Hits within the rule's limit.",
			"Hits a shadow rule would have refused.",
		}
		for i, name := range statNames {
			ds[i] = prometheus.NewDesc("ratelimit_service_rate_limit_"+name, help[i], []string{"domain", "key1", "key2"}, nil)
		}
		return ds
	}()
	loadSuccessDesc = prometheus.NewDesc("ratelimit_service_config_load_success", "Configurations loaded.", nil, nil)
	loadErrorDesc   = prometheus.NewDesc("ratelimit_service_config_load_error", "Configurations that failed to load (the one before stays).", nil, nil)
	callErrorDesc   = prometheus.NewDesc("ratelimit_service_should_rate_limit_error", "ShouldRateLimit calls answered with an error, by kind.", []string{"err_type"}, nil)
)

// Collector returns a prometheus.Collector of the Server's figures, named
// as envoyproxy/ratelimit's Prometheus mapping names them: per rule,
// ratelimit_service_rate_limit_total_hits, _over_limit, _near_limit,
// _within_limit and _shadow_mode, labelled domain, key1 and key2 (the
// rule's first two levels as configured; for a rule with detailed_metric,
// the request's own key_value at those levels, within
// Options.MaxDetailed series a rule); and
// ratelimit_service_config_load_success and _config_load_error. A rule
// shows once a request has matched it. Per-descriptor limit overrides
// count under the domain "" and key1 "override". The rule's series count
// hits, which a request chooses (hits_addend, up to 2^64 − 1): each
// saturates at 2^63 − 1 (9.2e18) and stays there, never wrapping. The
// floodgate limiters' own series (keys held, evictions) come through the
// Server as a counts.Source (see AppendCounts).
func (s *Server) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Server }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range ruleDescs {
		ch <- d
	}
	ch <- loadSuccessDesc
	ch <- loadErrorDesc
	ch <- callErrorDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	ch <- prometheus.MustNewConstMetric(loadSuccessDesc, prometheus.CounterValue, float64(s.loads.Load()))
	ch <- prometheus.MustNewConstMetric(loadErrorDesc, prometheus.CounterValue, float64(s.loadErrors.Load()))
	ch <- prometheus.MustNewConstMetric(callErrorDesc, prometheus.CounterValue, float64(s.serviceErrors.Load()), "service_error")
	// Rules deeper than two levels that share their first two share a
	// series, as they do in envoyproxy/ratelimit's mapping: summed.
	type labels struct{ domain, key1, key2 string }
	sums := map[labels]*[nStats]int64{}
	var order []labels
	add := func(l labels, st *ruleStats) {
		v := sums[l]
		if v == nil {
			v = new([nStats]int64)
			sums[l] = v
			order = append(order, l)
		}
		for i := range v {
			v[i] += st.value(i)
		}
	}
	s.eachRule(func(r *rule, domain, key1, key2 string) {
		add(labels{domain, key1, key2}, &r.stats)
		if r.detailed != nil {
			r.detailed.each(func(k1, k2 string, st *ruleStats) { add(labels{domain, k1, k2}, st) })
		}
	})
	for _, l := range order {
		for i, d := range ruleDescs {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(sums[l][i]), l.domain, l.key1, l.key2)
		}
	}
}

// eachRule calls f for every rule in use: the current configuration's,
// then the overrides'.
func (s *Server) eachRule(f func(r *rule, domain, key1, key2 string)) {
	snap := s.snap.Load()
	for i := range snap.rules {
		r := snap.rules[i].Load()
		if r == nil {
			continue
		}
		domain, levels := r.limit.Path()
		key1, key2 := "", ""
		if len(levels) > 0 {
			key1 = levels[0]
		}
		if len(levels) > 1 {
			key2 = levels[1]
		}
		f(r, domain, key1, key2)
	}
	s.overrides.Range(func(_ override, r *rule) bool {
		f(r, "", "override", strconv.FormatUint(uint64(r.limit.RequestsPerUnit), 10)+"/"+r.limit.Unit.String())
		return true
	})
}

// AppendCounts makes the Server a counts.Source (see package counts,
// and the metrics modules that export it): each rule's policy's series
// (in process, keys held, their bound and evictions), with Route the
// rule's domain and Policy its full key as configured ("override" and
// its rule for a limit override). The Store's own series are its own
// counts.Source.
func (s *Server) AppendCounts(dst []counts.Sample) []counts.Sample {
	s.eachRule(func(r *rule, domain, key1, key2 string) {
		if r.pol == nil {
			return
		}
		start := len(dst)
		dst = r.pol.AppendCounts(dst)
		name := r.limit.Key
		if domain == "" {
			name = key1 + ":" + key2
		}
		for i := start; i < len(dst); i++ {
			dst[i].Route, dst[i].Policy = domain, name
		}
	})
	return dst
}
