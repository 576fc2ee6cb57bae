package otelmetrics_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/otelmetrics"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// A Limiter's counts, observed under the limiter name "api" and
// collected by a ManualReader (a real service gives the MeterProvider a
// periodic reader and an OTLP exporter instead).
func Example() {
	limiter, err := floodgate.New(floodgate.Config{
		Rule:  floodgate.Rule{Limit: 2, Period: time.Minute},
		Stats: true, // the requests' counts
	})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())
	exporter, err := otelmetrics.New(provider)
	if err != nil {
		log.Fatal(err)
	}
	defer exporter.Close()
	if err := exporter.Add("api", limiter); err != nil {
		log.Fatal(err)
	}

	for range 3 {
		limiter.Allow("alice")
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "floodgate.requests" {
			for _, dp := range sum.DataPoints {
				fmt.Println(m.Name, m.Unit, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Value)
			}
		}
	}
	// Unordered output:
	// floodgate.requests {request} floodgate.limiter=api,floodgate.result=allowed 2
	// floodgate.requests {request} floodgate.limiter=api,floodgate.result=denied 1
	// floodgate.requests {request} floodgate.limiter=api,floodgate.result=denied_global 0
}
