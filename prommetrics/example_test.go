package prommetrics_test

import (
	"log"
	"net/http"
	"os"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/prommetrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
)

// A Limiter's counts, exported under the limiter name "api".
func Example() {
	limiter, err := floodgate.New(floodgate.Config{
		Rule:  floodgate.Rule{Limit: 2, Period: time.Minute},
		Stats: true, // the requests' counts
	})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	metrics := prommetrics.New()
	if err := metrics.Add("api", limiter); err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)

	for range 3 {
		limiter.Allow("alice")
	}
	fams, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "floodgate_requests_total" {
			expfmt.MetricFamilyToText(os.Stdout, f)
		}
	}
	// Output:
	// # HELP floodgate_requests_total Requests decided, by result: allowed, denied, denied_global, shadow_denied, exempt, fail_open, fail_closed, fail_local, fail_error, abandoned.
	// # TYPE floodgate_requests_total counter
	// floodgate_requests_total{limiter="api",policy="",result="allowed",route=""} 2
	// floodgate_requests_total{limiter="api",policy="",result="denied",route=""} 1
	// floodgate_requests_total{limiter="api",policy="",result="denied_global",route=""} 0
}

// Serving /metrics: the Collector registered with the default registry,
// which promhttp.Handler serves (with Go's own metrics beside floodgate's).
func Example_handler() {
	limiter, err := floodgate.New(floodgate.Config{Rule: floodgate.Rule{Limit: 100, Period: time.Second}, Stats: true})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	metrics := prommetrics.New()
	if err := metrics.Add("api", limiter); err != nil {
		log.Fatal(err)
	}
	prometheus.MustRegister(metrics)
	http.Handle("GET /metrics", promhttp.Handler())
	log.Fatal(http.ListenAndServe("localhost:9090", nil))
}
