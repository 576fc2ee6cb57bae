package main

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// grpcMetrics are the gRPC server's figures as envoyproxy/ratelimit's
// Prometheus mapping (and Envoy Gateway's) names them:
// ratelimit_service_total_requests, the calls, and
// ratelimit_service_response_time_seconds, their time in the service, a
// histogram on Prometheus's default buckets; both labelled grpc_method,
// the method's own name (ShouldRateLimit, Check). envoyproxy/ratelimit
// records the time in whole milliseconds, so that its calls under a
// millisecond count as 0; these are exact.
type grpcMetrics struct {
	calls *prometheus.CounterVec
	times *prometheus.HistogramVec

	methods sync.Map // full method name → *methodMetrics
}

// methodMetrics are one method's series, looked up once.
type methodMetrics struct {
	calls prometheus.Counter
	times prometheus.Observer
}

func newGRPCMetrics(reg prometheus.Registerer) *grpcMetrics {
	m := &grpcMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_total_requests",
			Help: "gRPC calls to the service, by method."}, []string{"grpc_method"}),
		times: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ratelimit_service_response_time_seconds",
			Help: "The time gRPC calls took in the service, by method.", Buckets: prometheus.DefBuckets}, []string{"grpc_method"}),
	}
	reg.MustRegister(m.calls, m.times)
	return m
}

// of is the series of the method named full ("/pkg.Service/Method"): a
// method the server registered, so that no client can add series.
func (m *grpcMetrics) of(full string) *methodMetrics {
	if mm, ok := m.methods.Load(full); ok {
		return mm.(*methodMetrics)
	}
	name := full[strings.LastIndexByte(full, '/')+1:]
	mm, _ := m.methods.LoadOrStore(full, &methodMetrics{calls: m.calls.WithLabelValues(name), times: m.times.WithLabelValues(name)})
	return mm.(*methodMetrics)
}

// unary is the interceptor that counts and times each unary call.
func (m *grpcMetrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	mm := m.of(info.FullMethod)
	mm.calls.Inc()
	resp, err := handler(ctx, req)
	mm.times.Observe(time.Since(start).Seconds())
	return resp, err
}
