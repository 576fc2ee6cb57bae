package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// collector keeps the spans an OTLP exporter sends it.
type collector struct {
	collectorpb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.ResourceSpans
}

func (c *collector) Export(_ context.Context, r *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spans = append(c.spans, r.ResourceSpans...)
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// find returns the span named name, with its resource's attributes.
func (c *collector) find(name string) (*tracepb.Span, map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range c.spans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				if s.Name == name {
					res := map[string]string{}
					for _, a := range rs.Resource.GetAttributes() {
						res[a.Key] = a.Value.GetStringValue()
					}
					return s, res
				}
			}
		}
	}
	return nil, nil
}

// TestTracing: with TRACING_ENABLED, each call is a server span, sent to
// the OTLP endpoint of OTEL_EXPORTER_OTLP_ENDPOINT over gRPC or HTTP as
// TRACING_EXPORTER_PROTOCOL says, a child of the caller's trace, with
// the TRACING_SERVICE_* resource; the spans left are sent as the service
// stops.
func TestTracing(t *testing.T) {
	for _, protocol := range []string{"grpc", "http"} {
		t.Run(protocol, func(t *testing.T) {
			col := &collector{}
			if protocol == "grpc" {
				gs := grpc.NewServer()
				collectorpb.RegisterTraceServiceServer(gs, col)
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				go gs.Serve(ln)
				t.Cleanup(gs.Stop)
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
			} else {
				hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					body, _ := io.ReadAll(r.Body)
					var req collectorpb.ExportTraceServiceRequest
					if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
						http.Error(w, "bad export", http.StatusBadRequest)
						return
					}
					col.Export(r.Context(), &req)
					w.Header().Set("Content-Type", "application/x-protobuf")
					b, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
					w.Write(b)
				}))
				t.Cleanup(hs.Close)
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", hs.URL)
			}
			root := runtimeDir(t, map[string]string{"api.yaml": "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"})
			a, _, stop := serve(t, map[string]string{"RUNTIME_ROOT": root + "/current", "TRACING_ENABLED": "true",
				"TRACING_EXPORTER_PROTOCOL": protocol, "TRACING_SERVICE_NAME": "ratelimit", "TRACING_SERVICE_NAMESPACE": "envoy-gateway-system",
				"TRACING_SERVICE_INSTANCE_ID": "pod-1", "TRACING_SAMPLING_RATE": "1"})
			c := grpcClient(t, a.grpc)
			const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
			ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+traceID+"-"+parentID+"-01")
			if _, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "api", Descriptors: xdsDescriptor("k", "v")}); err != nil {
				t.Fatal(err)
			}
			// The JSON endpoint, with the trace context in its headers.
			const jsonParent = "00f067aa0ba902b8"
			req, err := http.NewRequest(http.MethodPost, "http://"+a.http+"/json",
				strings.NewReader(`{"domain": "api", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("traceparent", "00-"+traceID+"-"+jsonParent+"-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("/json: %s", resp.Status)
			}
			if err := stop(); err != nil { // sends what is left
				t.Fatal(err)
			}
			js, _ := col.find("POST /json")
			if js == nil {
				t.Fatal("no span of the JSON call reached the collector")
			}
			if hex.EncodeToString(js.TraceId) != traceID || hex.EncodeToString(js.ParentSpanId) != jsonParent || js.Kind != tracepb.Span_SPAN_KIND_SERVER {
				t.Errorf("JSON span: trace %x, parent %x, kind %v; want the caller's trace, a server span", js.TraceId, js.ParentSpanId, js.Kind)
			}
			jattrs := map[string]string{}
			for _, kv := range js.Attributes {
				jattrs[kv.Key] = kv.Value.GetStringValue()
				if kv.Key == "http.response.status_code" {
					jattrs[kv.Key] = fmt.Sprint(kv.Value.GetIntValue())
				}
			}
			if jattrs["ratelimit.overall_code"] != "OK" || jattrs["http.response.status_code"] != "200" || jattrs["http.route"] != "/json" {
				t.Errorf("JSON span attributes: %v", jattrs)
			}
			span, res := col.find("envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
			if span == nil {
				t.Fatal("no span of the call reached the collector")
			}
			if hex.EncodeToString(span.TraceId) != traceID || hex.EncodeToString(span.ParentSpanId) != parentID || span.Kind != tracepb.Span_SPAN_KIND_SERVER {
				t.Errorf("span: trace %x, parent %x, kind %v; want the caller's trace, a server span", span.TraceId, span.ParentSpanId, span.Kind)
			}
			attrs := map[string]string{}
			for _, kv := range span.Attributes {
				attrs[kv.Key] = kv.Value.GetStringValue()
			}
			if attrs["ratelimit.domain"] != "api" || attrs["ratelimit.overall_code"] != "OK" || attrs["rpc.method"] != "ShouldRateLimit" {
				t.Errorf("span attributes: %v", attrs)
			}
			if res["service.name"] != "ratelimit" || res["service.namespace"] != "envoy-gateway-system" || res["service.instance.id"] != "pod-1" {
				t.Errorf("resource: %v", res)
			}
		})
	}
}

// TestTracingSettings: a protocol other than http or grpc, and a rate
// that is not a number, stop the start, naming them.
func TestTracingSettings(t *testing.T) {
	for name, kv := range map[string][2]string{
		"protocol": {"TRACING_EXPORTER_PROTOCOL", "zipkin"},
		"rate":     {"TRACING_SAMPLING_RATE", "often"},
	} {
		env := map[string]string{"TRACING_ENABLED": "true", kv[0]: kv[1]}
		_, err := readSettings(func(k string) string { return env[k] })
		if err == nil || !strings.Contains(err.Error(), kv[0]) {
			t.Errorf("%s: %v, want an error naming %s", name, err, kv[0])
		}
	}
	s, err := readSettings(func(k string) string { return map[string]string{"TRACING_ENABLED": "true"}[k] })
	if err != nil || s.tracing == nil || s.tracing.protocol != "http" || s.tracing.service != "RateLimit" || s.tracing.rate != 1 || len(s.tracing.instance) != 36 {
		t.Errorf("the defaults: %+v, %v", s.tracing, err)
	}
}
