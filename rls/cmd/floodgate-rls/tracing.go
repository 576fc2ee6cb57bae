package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// tracingSettings are envoyproxy/ratelimit's TRACING_* settings: spans
// through the OpenTelemetry SDK to an OTLP endpoint, which the exporter
// reads from the standard OTEL_EXPORTER_OTLP_* variables (the endpoint,
// headers, certificate, timeout), as there.
type tracingSettings struct {
	protocol                     string // http or grpc
	service, namespace, instance string
	rate                         float64 // TRACING_SAMPLING_RATE: ≥ 1 every trace, ≤ 0 none
}

// readTracing reads the TRACING_* settings; nil when TRACING_ENABLED is
// not true.
func readTracing(getenv func(string) string, errs *[]error, boolean func(string, bool) bool) *tracingSettings {
	if !boolean("TRACING_ENABLED", false) {
		return nil
	}
	t := &tracingSettings{protocol: strings.ToLower(getenv("TRACING_EXPORTER_PROTOCOL")), service: getenv("TRACING_SERVICE_NAME"),
		namespace: getenv("TRACING_SERVICE_NAMESPACE"), instance: getenv("TRACING_SERVICE_INSTANCE_ID"), rate: 1}
	switch t.protocol {
	case "":
		t.protocol = "http"
	case "http", "grpc":
	default:
		*errs = append(*errs, fmt.Errorf("TRACING_EXPORTER_PROTOCOL=%q: http or grpc", t.protocol))
	}
	if t.service == "" {
		t.service = "RateLimit"
	}
	if v := getenv("TRACING_SAMPLING_RATE"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r != r {
			*errs = append(*errs, fmt.Errorf("TRACING_SAMPLING_RATE=%q: a number, 1 for every trace", v))
		}
		t.rate = r
	}
	if t.instance == "" {
		var b [16]byte
		rand.Read(b[:])
		b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80 // a version 4 UUID, as envoyproxy/ratelimit makes one
		t.instance = fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
	}
	return t
}

// start makes the tracer provider, which sends its spans in batches to
// the OTLP endpoint; its Shutdown sends what is left.
func (t *tracingSettings) start(ctx context.Context) (*sdktrace.TracerProvider, error) {
	var client otlptrace.Client
	if t.protocol == "grpc" {
		client = otlptracegrpc.NewClient()
	} else {
		client = otlptracehttp.NewClient()
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("tracing: the OTLP exporter: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", t.service), attribute.String("service.namespace", t.namespace),
		attribute.String("service.instance.id", t.instance))
	return sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(t.rate))),
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)), sdktrace.WithResource(res)), nil
}

// mdCarrier is gRPC metadata as a carrier of trace context.
type mdCarrier metadata.MD

func (m mdCarrier) Get(k string) string {
	if v := metadata.MD(m).Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (m mdCarrier) Set(k, v string) { metadata.MD(m).Set(k, v) }
func (m mdCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// traceUnary is a server span for each call, named by its method as
// OpenTelemetry's gRPC instrumentation names it, and a child of the
// caller's span when the call carries W3C trace context (Envoy sends it
// when it traces): the request's domain and descriptors, the overall
// code, and the gRPC status.
func traceUnary(tp trace.TracerProvider) grpc.UnaryServerInterceptor {
	tracer := tp.Tracer("github.com/floodgate-go/floodgate/rls/cmd/floodgate-rls")
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			ctx = prop.Extract(ctx, mdCarrier(md))
		}
		name := strings.TrimPrefix(info.FullMethod, "/")
		service, method, _ := strings.Cut(name, "/")
		ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attribute.String("rpc.system", "grpc"), attribute.String("rpc.service", service), attribute.String("rpc.method", method)))
		defer span.End()
		if r, ok := req.(*pb.RateLimitRequest); ok {
			span.SetAttributes(attribute.String("ratelimit.domain", r.GetDomain()), attribute.Int("ratelimit.descriptors", len(r.GetDescriptors())))
		}
		resp, err := handler(ctx, req)
		if r, ok := resp.(*pb.RateLimitResponse); ok && err == nil {
			span.SetAttributes(attribute.String("ratelimit.overall_code", r.GetOverallCode().String()))
		}
		st, _ := status.FromError(err)
		span.SetAttributes(attribute.Int("rpc.grpc.status_code", int(st.Code())))
		if err != nil {
			span.SetStatus(otelcodes.Error, st.Message())
		}
		return resp, err
	}
}

// traceJSON is a server span for each call of the JSON endpoint, named
// as OpenTelemetry's HTTP instrumentation names it ("POST /json"), and a
// child of the caller's span when its headers carry W3C trace context:
// the HTTP status, and the overall code that it stands for (200 OK, 429
// OVER_LIMIT). A status of 500 or more marks the span as an error.
func traceJSON(tp trace.TracerProvider, next http.Handler) http.Handler {
	tracer := tp.Tracer("github.com/floodgate-go/floodgate/rls/cmd/floodgate-rls")
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, r.Method+" /json", trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attribute.String("http.request.method", r.Method), attribute.String("http.route", "/json"), attribute.String("url.path", r.URL.Path)))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r.WithContext(ctx))
		span.SetAttributes(attribute.Int("http.response.status_code", sw.status))
		switch {
		case sw.status == http.StatusOK:
			span.SetAttributes(attribute.String("ratelimit.overall_code", pb.RateLimitResponse_OK.String()))
		case sw.status == http.StatusTooManyRequests:
			span.SetAttributes(attribute.String("ratelimit.overall_code", pb.RateLimitResponse_OVER_LIMIT.String()))
		case sw.status >= 500:
			span.SetStatus(otelcodes.Error, http.StatusText(sw.status))
		}
	})
}

// statusWriter is a ResponseWriter that keeps the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}
