package rls

import (
	"context"
	"math"
	"sync"
	"unsafe"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/outage"
	"github.com/floodgate-go/floodgate/rls/internal/config"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// scratch is one request's working memory, reused across requests.
type scratch struct {
	entries []config.Entry
	key     []byte
	ends    []int // where each descriptor's key ends in key
	rules   []*rule
	hits    []uint64
	kind    []uint8
	quota   []bool               // over the limit answers OK: quota mode
	ds      []floodgate.Decision // each descriptor's answer
	state   []uint8              // how each answer was reached
	first   []int                // the descriptor that decides for each: itself, or the first of the same rule and key
	cost    []uint64             // what the deciding descriptor asks: the hits of all it decides for
	label   []byte               // a detailed series' name
	asks    []floodgate.Ask      // the limited descriptors', for the Store
	askOf   []int                // the descriptor of each ask
	each    []floodgate.Decision // each ask's answer
	ovs     []*rule              // the overrides the request uses, released when it ends
	names   map[string]bool      // replaces
}

// What a descriptor is, for this request.
const (
	kindNone      uint8 = iota // no rule: OK, no limit
	kindUnlimited              // an unlimited rule: OK, remaining MaxUint32
	kindEnforced               // charged with the others, all or nothing
	kindShadow                 // charged with the other shadows, after the others, never refusing
	kindCheck                  // hits 0: looked at, charged nothing
	kindFull                   // a limit override past Options.MaxOverrides: over the limit
)

var scratches = sync.Pool{New: func() any { return &scratch{names: map[string]bool{}} }}

// ShouldRateLimit decides one request from Envoy. A request the service
// cannot decide is answered with a status: InvalidArgument for an empty
// domain, no descriptors, too many (Options.MaxDescriptors, or more than
// floodgate.MaxPolicies limited ones) or a limit override of no known
// unit; DeadlineExceeded or Canceled when the caller gave up before the
// Store answered. A Store that cannot reach its state, under a failure
// mode that fails the call (redislimit.FailError), fails it as
// envoyproxy/ratelimit fails a request when its Redis does, so that
// Envoy's failure_mode_deny decides: DeadlineExceeded, "context deadline
// exceeded", when the state did not answer in time (what that server's
// caller sees of a stalled Redis), else Unknown, with the Store's error.
//
// A request waits on a Store that does not answer once, whatever the
// calls its descriptors need (a decision, the checks looked at after it,
// a charge after a refusal): the Store answers the later ones by its
// failure mode at once (see redislimit's Config.Timeout).
func (s *Server) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if s.own == nil {
		ctx = outage.With(ctx) // the request's calls share what they learn of the Store
	}
	resp, err := s.shouldRateLimit(ctx, req)
	if err != nil {
		s.serviceErrors.Add(1)
	}
	return resp, err
}

func (s *Server) shouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rls: the domain is empty")
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rls: the request has no descriptors")
	}
	if len(ds) > s.opts.MaxDescriptors {
		return nil, status.Errorf(codes.InvalidArgument, "rls: %d descriptors in one request, more than the %d allowed", len(ds), s.opts.MaxDescriptors)
	}
	snap := s.snap.Load()
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	defer sc.release()
	n := len(ds)
	sc.key, sc.ends = sc.key[:0], sc.ends[:0]
	sc.rules, sc.hits, sc.kind, sc.quota = grow(sc.rules, n), grow(sc.hits, n), grow(sc.kind, n), grow(sc.quota, n)
	sc.ds = grow(sc.ds, n)
	clear(sc.names)
	reqHits := uint64(max(1, req.GetHitsAddend()))
	var now int64 // read once, for the first override
	for i, d := range ds {
		sc.entries = sc.entries[:0]
		for _, e := range d.GetEntries() {
			sc.entries = append(sc.entries, config.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		start := len(sc.key)
		sc.key = config.AppendField(sc.key, req.Domain)
		var l *config.Limit
		var r *rule
		full := false
		if o := d.GetLimit(); o != nil {
			u, ok := unitOf(int32(o.GetUnit()))
			if !ok {
				return nil, status.Errorf(codes.InvalidArgument, "rls: descriptor %d: limit override with unit %v", i, o.GetUnit())
			}
			if !snap.cfg.HasDomain(req.Domain) {
				sc.key = sc.key[:start] // envoyproxy/ratelimit applies an override only in a known domain
			} else {
				if now == 0 {
					now = s.clock.Now()
				}
				var err error
				if r, err = s.overrideFor(o.GetRequestsPerUnit(), u, now); err != nil {
					return nil, status.Errorf(codes.Internal, "rls: %v", err)
				}
				if r == nil {
					full = true
					r = newRule(&config.Limit{Key: "override", RequestsPerUnit: o.GetRequestsPerUnit(), Unit: u, Algorithm: floodgate.FixedWindow}, 0)
				} else {
					sc.ovs = append(sc.ovs, r)
				}
				for _, e := range sc.entries {
					sc.key = config.AppendField(config.AppendField(sc.key, e.Key), e.Value)
				}
			}
		} else if l, sc.key = snap.cfg.AppendKey(sc.key, req.Domain, sc.entries); l == nil {
			sc.key = sc.key[:start]
		} else {
			for _, name := range l.Replaces {
				sc.names[name] = true
			}
			if !l.Unlimited {
				var err error
				if r, err = s.ruleFor(snap, l); err != nil {
					return nil, status.Errorf(codes.Internal, "rls: %v", err)
				}
			}
		}
		sc.ends = append(sc.ends, len(sc.key))
		sc.rules[i] = r
		hits := reqHits
		if h := d.GetHitsAddend(); h != nil {
			hits = h.GetValue()
		}
		sc.hits[i] = hits
		switch {
		case l != nil && l.Unlimited:
			sc.kind[i] = kindUnlimited
		case full:
			sc.kind[i] = kindFull
		case r == nil:
			sc.kind[i] = kindNone
		case hits == 0:
			sc.kind[i] = kindCheck
		case r.limit.Shadow:
			sc.kind[i] = kindShadow
		case r.limit.Quota || s.opts.Quota:
			sc.kind[i] = kindShadow // charged, never refusing, as a shadow
		default:
			sc.kind[i] = kindEnforced
		}
		sc.quota[i] = r != nil && !r.limit.Shadow && (r.limit.Quota || s.opts.Quota)
	}
	if len(sc.names) > 0 {
		for i, r := range sc.rules {
			if r != nil && r.limit.Name != "" && sc.names[r.limit.Name] && (sc.kind[i] != kindUnlimited) {
				sc.kind[i], sc.rules[i] = kindNone, nil
			}
		}
	}
	over, err := s.decide(ctx, sc)
	if err != nil {
		return nil, err
	}
	return s.respond(sc, req, over), nil
}

// release ends the request's use of its overrides.
func (sc *scratch) release() {
	for i, r := range sc.ovs {
		r.release()
		sc.ovs[i] = nil
	}
	sc.ovs = sc.ovs[:0]
}

// unitOf converts a limit override's unit, numbered as the response's
// (envoyproxy/ratelimit converts it by number too, so 7 is a week).
func unitOf(u int32) (config.Unit, bool) {
	if u < int32(config.Second) || u > int32(config.Week) {
		return 0, false
	}
	return config.Unit(u), true
}

// keyOf is descriptor i's key, which shares sc.key's bytes: valid for
// the request (a Store keeps none of it: floodgate's hash it, and
// redislimit's lease mode keeps what it derives).
func (sc *scratch) keyOf(i int) string {
	start := 0
	if i > 0 {
		start = sc.ends[i-1]
	}
	if start == sc.ends[i] {
		return ""
	}
	return unsafe.String(&sc.key[start], sc.ends[i]-start)
}

// detailedLabel names the detailed series of a request's descriptor of
// entries under rule l: its first two levels' key_value (a share_threshold
// level's as configured), joined by a 0 byte. The name is a view of sc's
// buffer, valid until sc's next use.
func (sc *scratch) detailedLabel(l *config.Limit, entries []*rlv3.RateLimitDescriptor_Entry) string {
	sc.label = sc.label[:0]
	for i := range min(2, len(entries)) {
		if i > 0 {
			sc.label = append(sc.label, 0)
		}
		if l.SharedLevel(i) {
			sc.label = append(sc.label, l.Level(i)...)
			continue
		}
		e := entries[i]
		sc.label = append(sc.label, e.GetKey()...)
		if v := e.GetValue(); v != "" {
			sc.label = append(append(sc.label, '_'), v...)
		}
	}
	if len(entries) < 2 {
		sc.label = append(sc.label, 0)
	}
	return unsafe.String(unsafe.SliceData(sc.label), len(sc.label))
}

// clampHits converts a hits_addend to a cost. A cost past int64 is past
// every rule's capacity (a rule's limit is a uint32), so it is refused as
// the largest cost is: nothing is admitted that asked for more.
func clampHits(h uint64) int64 {
	if h > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(h)
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
