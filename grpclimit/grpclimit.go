// Package grpclimit is gRPC server interceptors over floodgate: limits per
// method, keyed by the client's address as far as it can be trusted, and a
// refusal that tells the client when to retry.
//
// A refused call fails with codes.ResourceExhausted and a status that
// carries a google.rpc.RetryInfo detail with the exact wait, which
// clients that honour it (gRPC's retry policies, Google's client
// libraries) back off by; the message says only "rate limit exceeded".
// The full method name chooses the rule, and each method (or service) has
// limiters of its own, so one client's calls to one method never spend
// another's allowance. A stream is charged when it opens, and with
// Config.PerMessage for every message it receives as well, once the
// message has arrived (the stream's end costs nothing); a refused message
// reaches the handler as the error of its RecvMsg, not as a message.
//
// grpclimit is a module of its own, so that floodgate's core does not take
// on gRPC's dependencies.
package grpclimit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clientip"
	"github.com/floodgate-go/floodgate/internal/policy"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Policy is one named limit: a request passes only if every policy of its
// method admits it (see floodgate.Limits).
type Policy struct {
	Name      string
	Rule      floodgate.Rule
	Algorithm string // "" is the token bucket
}

// Config configures a Limiter. The zero value of every field but Methods
// and Default is a working default.
type Config struct {
	// Methods are the limited methods by full name
	// ("/package.Service/Method"), or whole services by their prefix
	// ending in a slash ("/package.Service/"), each with 1 to 8 policies.
	// A call matches its method's entry first, then its service's.
	Methods map[string][]Policy
	// Default limits the calls that Methods does not match; nil lets them
	// through.
	Default []Policy
	// TrustedProxies are the CIDR prefixes of peers whose
	// "x-forwarded-for" metadata is believed; the client is then its
	// right-most address that is not itself trusted. None by default: the
	// metadata is ignored.
	TrustedProxies []string
	// IPv6Prefix groups IPv6 clients by this prefix length, 1 to 128; 0
	// means 64.
	IPv6Prefix int
	// Key, if set, returns the key of a call from its context, full method
	// and the client address found (say, an authenticated user's id).
	Key func(ctx context.Context, fullMethod, client string) string
	// PerMessage charges every message a stream receives, not only its
	// opening: each once it has arrived, so that the end of the stream
	// costs nothing, and a refused one reaches the handler as its
	// RecvMsg's error, before the handler sees it.
	PerMessage bool
	// Clock is every policy's clock; nil is the SystemClock.
	Clock floodgate.Clock
	// MaxKeys bounds the clients each policy holds, as in httplimit: 0
	// means a bound that keeps each policy within 64 MiB (1,048,576
	// clients for the buckets and the windows; for the sliding log, 64 MiB
	// over 512 bytes and 16 per request of its Limit, at least 1,024), and
	// negative means no bound, on purpose.
	MaxKeys int
	// IdleTTL is how long a client's state must have been a new client's
	// before it is forgotten in the background, which changes no decision;
	// 0 means a minute, negative never.
	IdleTTL time.Duration
}

// Limiter holds the limits and makes the interceptors. It is safe for
// concurrent use.
type Limiter struct {
	methods    map[string]*floodgate.Limits
	deflt      *floodgate.Limits
	clients    clientip.Finder
	key        func(context.Context, string, string) string
	perMessage bool
	all        []*floodgate.Limiter
}

// New validates cfg and returns a Limiter: a method name that is not
// "/service/method" or "/service/", an entry with no policies or more than
// 8, a bad or repeated policy name, a rule floodgate rejects, a bad CIDR
// or IPv6Prefix are errors.
func New(cfg Config) (_ *Limiter, err error) {
	l := &Limiter{methods: map[string]*floodgate.Limits{}, key: cfg.Key, perMessage: cfg.PerMessage}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	if l.clients.V6Bits, err = clientip.V6Bits(cfg.IPv6Prefix); err != nil {
		return nil, fmt.Errorf("grpclimit: %v", err)
	}
	if l.clients.Trusted, err = clientip.ParseTrusted(cfg.TrustedProxies); err != nil {
		return nil, fmt.Errorf("grpclimit: %v", err)
	}
	for name, ps := range cfg.Methods {
		if !validMethod(name) {
			return nil, fmt.Errorf("grpclimit: method %q: want \"/package.Service/Method\" or \"/package.Service/\"", name)
		}
		if l.methods[name], err = l.limits(ps, cfg); err != nil {
			return nil, fmt.Errorf("grpclimit: method %q: %v", name, err)
		}
	}
	if cfg.Default != nil {
		if l.deflt, err = l.limits(cfg.Default, cfg); err != nil {
			return nil, fmt.Errorf("grpclimit: default: %v", err)
		}
	}
	return l, nil
}

func validMethod(s string) bool {
	service, method, ok := strings.Cut(strings.TrimPrefix(s, "/"), "/")
	return strings.HasPrefix(s, "/") && ok && service != "" && !strings.Contains(method, "/")
}

func (l *Limiter) limits(ps []Policy, cfg Config) (*floodgate.Limits, error) {
	specs := make([]policy.Spec, len(ps))
	for i, p := range ps {
		specs[i] = policy.Spec(p)
	}
	return policy.Build(specs, policy.Common{Clock: cfg.Clock, MaxKeys: cfg.MaxKeys, IdleTTL: cfg.IdleTTL},
		func(name string) bool { return name != "" }, &l.all)
}

// Close stops every limiter made (their IdleTTL sweepers). It is
// idempotent and returns nil. The interceptors go on limiting after Close,
// as floodgate's Limiter does, but idle clients are no longer swept.
func (l *Limiter) Close() error {
	for _, fl := range l.all {
		fl.Close()
	}
	return nil
}

// match returns the limits of a full method name, or nil.
func (l *Limiter) match(fullMethod string) *floodgate.Limits {
	if m, ok := l.methods[fullMethod]; ok {
		return m
	}
	if i := strings.LastIndexByte(fullMethod, '/'); i > 0 {
		if m, ok := l.methods[fullMethod[:i+1]]; ok {
			return m
		}
	}
	return l.deflt
}

// Client returns the key under which a call in ctx to fullMethod is
// counted: the peer's address, or behind a trusted proxy the client its
// "x-forwarded-for" names, or Config.Key's answer. A peer whose address is
// not an IP address (a Unix socket, bufconn) is keyed by
// "invalid-remote-addr": all such peers share one allowance.
func (l *Limiter) Client(ctx context.Context, fullMethod string) string {
	remote := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		remote = p.Addr.String()
	}
	var xff []string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		xff = md.Get("x-forwarded-for")
	}
	c := l.clients.Address(remote, xff)
	if l.key != nil {
		return l.key(ctx, fullMethod, c)
	}
	return c
}

// Check decides one call in ctx to fullMethod: nil if it may proceed (or
// no limit applies), else the ResourceExhausted status error a refused
// call returns.
func (l *Limiter) Check(ctx context.Context, fullMethod string) error {
	m := l.match(fullMethod)
	if m == nil {
		return nil
	}
	return refusal(m.AllowN(l.Client(ctx, fullMethod), 1))
}

// refusal is nil for an admitted call, and the status error for a refused
// one, with the wait as RetryInfo when there is one.
func refusal(d floodgate.Decision) error {
	if d.Allowed {
		return nil
	}
	st := status.New(codes.ResourceExhausted, "rate limit exceeded")
	if d.RetryAfter != floodgate.Never {
		if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)}); err == nil {
			st = withInfo
		}
	}
	return st.Err()
}

// UnaryServerInterceptor limits unary calls.
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := l.Check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor limits streams: each is charged when it opens,
// and with Config.PerMessage for every message it receives.
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		m := l.match(info.FullMethod)
		if m == nil {
			return handler(srv, ss)
		}
		key := l.Client(ss.Context(), info.FullMethod)
		if err := refusal(m.AllowN(key, 1)); err != nil {
			return err
		}
		if l.perMessage {
			ss = &chargedStream{ServerStream: ss, limits: m, key: key}
		}
		return handler(srv, ss)
	}
}

// chargedStream charges every message the stream receives, once it has
// arrived: the end of the stream (io.EOF) and a failed receive are not
// messages, and cost nothing. A refused message never reaches the handler:
// its RecvMsg returns the refusal instead, and the message it had read is
// reset, so that a handler that ignored the error would find nothing in
// it.
type chargedStream struct {
	grpc.ServerStream
	limits *floodgate.Limits
	key    string
}

func (s *chargedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := refusal(s.limits.AllowN(s.key, 1)); err != nil {
		if pm, ok := m.(proto.Message); ok {
			proto.Reset(pm)
		}
		return err
	}
	return nil
}
