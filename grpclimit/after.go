package grpclimit

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/policy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// meter is what a call with After policies reserved (see Policy.After),
// and their costs as the call goes: from the handler's Report, and from
// their CostHeader metadata, which it takes out of the header and trailer
// before they are sent. It settles the call when the call ends.
type meter struct {
	set      *policy.Set
	key      string
	hold     floodgate.Hold
	reported policy.Reported // Report's sum

	mu      sync.Mutex
	costs   [floodgate.MaxPolicies]int64 // each policy's, from its metadata; -1 for none
	settled bool
}

// meterKey is the context key of a call's meter, for Report.
type meterKey struct{}

func newMeter(s *policy.Set, key string) *meter {
	m := &meter{set: s, key: key}
	for i := range m.costs {
		m.costs[i] = -1
	}
	return m
}

// wrap returns the handler's context: ctx with the meter, for Report, and
// with a ServerTransportStream that takes the cost metadata out of what
// grpc.SetHeader, grpc.SendHeader and grpc.SetTrailer send.
func (m *meter) wrap(ctx context.Context) context.Context {
	ctx = context.WithValue(ctx, meterKey{}, m)
	if sts := grpc.ServerTransportStreamFromContext(ctx); sts != nil {
		ctx = grpc.NewContextWithServerTransportStream(ctx, &costStream{ServerTransportStream: sts, m: m})
	}
	return ctx
}

// take reads each After policy's CostHeader from md, keeps its value, and
// returns md without them (a copy, if it had any: the caller's stays as
// it was).
func (m *meter) take(md metadata.MD) metadata.MD {
	copied := false
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, sp := range m.set.Specs {
		if sp.CostKey == "" {
			continue
		}
		vs, ok := md[sp.CostKey]
		if !ok {
			continue
		}
		m.costs[i] = policy.ParseCost(vs, m.costs[i])
		if !copied {
			md, copied = md.Copy(), true
		}
		delete(md, sp.CostKey)
	}
	return md
}

// settle settles what the call reserved, once: each After policy at its
// cost (its metadata's, else what the handler reported, else its
// estimate stands). It runs to the end whether the client is still there
// or not: the cost was spent.
func (m *meter) settle(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.settled {
		return
	}
	m.settled = true
	s := m.set
	costs := m.costs[:len(s.Specs)]
	for i, sp := range s.Specs {
		if sp.After && sp.CostKey == "" {
			costs[i] = m.reported.Load()
		}
	}
	// An error leaves the estimates charged (see policy.Set.Settle).
	_ = s.Settle(context.WithoutCancel(ctx), m.key, 1, costs, &m.hold)
}

// Report adds cost to the call's cost for its After policies that take
// no CostHeader, from the handler's context (a unary handler's, or a
// stream's Context). A handler may report as it goes (each message of a
// stream) or once; the sum is charged when the call ends. A call is
// charged at most 2^52 (some 4.5e15) for an After policy: a larger cost,
// reported or carried, counts as 2^52, and a cost more than its key can
// owe is charged as far as it can owe, which leaves it refused for as
// long as its state can say. Report returns false, and counts nothing,
// when ctx is no such call's, or for a negative cost.
func Report(ctx context.Context, cost int64) bool {
	m, ok := ctx.Value(meterKey{}).(*meter)
	if !ok || cost < 0 {
		return false
	}
	m.reported.Add(cost)
	return true
}

// costStream is a call's ServerTransportStream, which takes the cost
// metadata out of what the handler sends (see meter.take).
type costStream struct {
	grpc.ServerTransportStream
	m *meter
}

func (c *costStream) SetHeader(md metadata.MD) error {
	return c.ServerTransportStream.SetHeader(c.m.take(md))
}

func (c *costStream) SendHeader(md metadata.MD) error {
	return c.ServerTransportStream.SendHeader(c.m.take(md))
}

func (c *costStream) SetTrailer(md metadata.MD) error {
	return c.ServerTransportStream.SetTrailer(c.m.take(md))
}

// meteredStream is a stream with After policies: its Context carries the
// meter (for Report and grpc.SetTrailer), and its own header and trailer
// methods take the cost metadata out too.
type meteredStream struct {
	grpc.ServerStream
	m   *meter
	ctx context.Context
}

func (s *meteredStream) Context() context.Context { return s.ctx }

func (s *meteredStream) SetHeader(md metadata.MD) error {
	return s.ServerStream.SetHeader(s.m.take(md))
}

func (s *meteredStream) SendHeader(md metadata.MD) error {
	return s.ServerStream.SendHeader(s.m.take(md))
}

func (s *meteredStream) SetTrailer(md metadata.MD) {
	s.ServerStream.SetTrailer(s.m.take(md))
}

// costKey checks a CostHeader: a metadata key of lowercase letters, digits,
// '-', '_' and '.', not gRPC's own ("grpc-") nor a binary one ("-bin").
func costKey(k string) error {
	if k == "" || len(k) > 256 {
		return fmt.Errorf("CostHeader %q: 1 to 256 bytes", k)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("CostHeader %q: a metadata key is lowercase letters, digits, '-', '_' and '.'", k)
		}
	}
	if strings.HasPrefix(k, "grpc-") || strings.HasSuffix(k, "-bin") {
		return fmt.Errorf("CostHeader %q: not gRPC's own key, nor a binary one", k)
	}
	return nil
}
