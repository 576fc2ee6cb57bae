package rls

import (
	"errors"
	"math"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestCollector: the per-rule figures and the config loads, under
// envoyproxy/ratelimit's names and labels, and no request's value in any
// label.
func TestCollector(t *testing.T) {
	s, c := serve(t, mustConfig(t, basic), Options{Clock: floodgate.NewManualClock(unixStart), NearLimitRatio: 0.5})
	for range 3 {
		ask(t, c, "d", desc("small", "secret-value"))
	}
	ask(t, c, "d", desc("shadow", "v"))
	ask(t, c, "d", desc("shadow", "v"))
	s.ConfigFailed(errors.New("bad file"))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collector())
	want := `
# HELP ratelimit_service_config_load_error Configurations that failed to load (the one before stays).
# TYPE ratelimit_service_config_load_error counter
ratelimit_service_config_load_error 1
# HELP ratelimit_service_config_load_success Configurations loaded.
# TYPE ratelimit_service_config_load_success counter
ratelimit_service_config_load_success 1
# HELP ratelimit_service_rate_limit_near_limit Hits admitted past the near-limit share of the rule's limit.
# TYPE ratelimit_service_rate_limit_near_limit counter
ratelimit_service_rate_limit_near_limit{domain="d",key1="shadow",key2=""} 1
ratelimit_service_rate_limit_near_limit{domain="d",key1="small",key2=""} 1
# HELP ratelimit_service_rate_limit_over_limit Hits refused by the rule.
# TYPE ratelimit_service_rate_limit_over_limit counter
ratelimit_service_rate_limit_over_limit{domain="d",key1="shadow",key2=""} 1
ratelimit_service_rate_limit_over_limit{domain="d",key1="small",key2=""} 1
# HELP ratelimit_service_rate_limit_shadow_mode Hits a shadow rule would have refused.
# TYPE ratelimit_service_rate_limit_shadow_mode counter
ratelimit_service_rate_limit_shadow_mode{domain="d",key1="shadow",key2=""} 1
ratelimit_service_rate_limit_shadow_mode{domain="d",key1="small",key2=""} 0
# HELP ratelimit_service_rate_limit_total_hits Hits asked of the rule (each request's hits_addend).
# TYPE ratelimit_service_rate_limit_total_hits counter
ratelimit_service_rate_limit_total_hits{domain="d",key1="shadow",key2=""} 2
ratelimit_service_rate_limit_total_hits{domain="d",key1="small",key2=""} 3
# HELP ratelimit_service_rate_limit_within_limit Hits within the rule's limit.
# TYPE ratelimit_service_rate_limit_within_limit counter
ratelimit_service_rate_limit_within_limit{domain="d",key1="shadow",key2=""} 1
ratelimit_service_rate_limit_within_limit{domain="d",key1="small",key2=""} 2
`
	names := []string{"ratelimit_service_config_load_error", "ratelimit_service_config_load_success", "ratelimit_service_rate_limit_near_limit",
		"ratelimit_service_rate_limit_over_limit", "ratelimit_service_rate_limit_shadow_mode", "ratelimit_service_rate_limit_total_hits", "ratelimit_service_rate_limit_within_limit"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	// The limiters' own series name each rule, never a request's value.
	for _, smp := range s.AppendCounts(nil) {
		if strings.Contains(smp.Route+smp.Policy+smp.Label, "secret") {
			t.Fatalf("a request's value in a series: %+v", smp)
		}
		if smp.Metric == counts.Keys && smp.Policy == "d.small" && smp.Value != 1 {
			t.Fatalf("d.small holds %d keys, want 1", smp.Value)
		}
	}
}

// TestCollectorDetailed: a rule with detailed_metric counts in a series
// of the request's own first two key_value (a share_threshold level's
// pattern standing for its values), at most MaxDetailed of them a rule;
// past that, or for a name longer than 256 bytes, in the rule's own
// series. A rule without it names no value.
func TestCollectorDetailed(t *testing.T) {
	cfg := mustConfig(t, `domain: d
descriptors:
  - key: client
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: team
    value: "t*"
    share_threshold: true
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 100}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 100}
`)
	s, c := serve(t, cfg, Options{Clock: floodgate.NewManualClock(unixStart), MaxDetailed: 2})
	for _, v := range []string{"a", strings.Repeat("x", 1<<20), "b", "a", "c", "d"} {
		ask(t, c, "d", desc("client", v)) // a value of 1 MB makes no series
	}
	for _, team := range []string{"t1", "t2"} {
		ask(t, c, "d", &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "team", Value: team}, {Key: "user", Value: "u"}}})
	}
	ask(t, c, "d", desc("plain", "secret"))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collector())
	want := `
# HELP ratelimit_service_rate_limit_total_hits Hits asked of the rule (each request's hits_addend).
# TYPE ratelimit_service_rate_limit_total_hits counter
ratelimit_service_rate_limit_total_hits{domain="d",key1="client",key2=""} 3
ratelimit_service_rate_limit_total_hits{domain="d",key1="client_a",key2=""} 2
ratelimit_service_rate_limit_total_hits{domain="d",key1="client_b",key2=""} 1
ratelimit_service_rate_limit_total_hits{domain="d",key1="plain",key2=""} 1
ratelimit_service_rate_limit_total_hits{domain="d",key1="team_t*",key2="user"} 0
ratelimit_service_rate_limit_total_hits{domain="d",key1="team_t*",key2="user_u"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratelimit_service_rate_limit_total_hits"); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, Options{MaxDetailed: -1}); err == nil {
		t.Fatal("a negative MaxDetailed: no error")
	}
}

// TestCollectorHugeHits: three requests of hits_addend 2^64 − 1 leave
// total_hits and over_limit at their largest value, 2^63 − 1, never
// wrapped into negative figures.
func TestCollectorHugeHits(t *testing.T) {
	s, c := serve(t, mustConfig(t, basic), Options{Clock: floodgate.NewManualClock(unixStart)})
	for range 3 {
		d := desc("big", "g")
		d.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
		ask(t, c, "d", d)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collector())
	want := `
# HELP ratelimit_service_rate_limit_over_limit Hits refused by the rule.
# TYPE ratelimit_service_rate_limit_over_limit counter
ratelimit_service_rate_limit_over_limit{domain="d",key1="big",key2=""} 9.223372036854776e+18
# HELP ratelimit_service_rate_limit_total_hits Hits asked of the rule (each request's hits_addend).
# TYPE ratelimit_service_rate_limit_total_hits counter
ratelimit_service_rate_limit_total_hits{domain="d",key1="big",key2=""} 9.223372036854776e+18
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratelimit_service_rate_limit_over_limit", "ratelimit_service_rate_limit_total_hits"); err != nil {
		t.Fatal(err)
	}
}
