package rls

import (
	"math"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// respond builds the response from each descriptor's answer, and counts.
func (s *Server) respond(sc *scratch, req *pb.RateLimitRequest, over bool) *pb.RateLimitResponse {
	ds := req.GetDescriptors()
	n := len(sc.kind)
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, n)}
	statuses := make([]pb.RateLimitResponse_DescriptorStatus, n) // one allocation for all
	now := s.clock.Now()
	minIdx, minLeft := -1, uint32(math.MaxUint32)
	var violations []int // the descriptors over a limit in quota mode
	resetFor, reset := -1, (*durationpb.Duration)(nil)
	for i := range n {
		st := &statuses[i]
		resp.Statuses[i] = st
		st.Code = pb.RateLimitResponse_OK
		r, d, hits := sc.rules[i], &sc.ds[i], sc.hits[i]
		switch sc.kind[i] {
		case kindNone:
			continue
		case kindUnlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		}
		st.CurrentLimit = r.pbLim
		st.DurationUntilReset = r.reset(now, d)
		stats := &r.stats
		if r.detailed != nil {
			if c := r.detailed.get(sc.detailedLabel(r.limit, ds[i].GetEntries())); c != nil {
				stats = c
			}
		}
		var left int64
		var overHere bool
		switch sc.state[i] {
		case refusedHere:
			overHere = true
		case peeked:
			left = remainingNow(d)
			// A key that owes refuses a check too, as does a Store that
			// cannot reach its state and refuses by its failure mode.
			overHere = uint64(left) < sc.cost[i] || d.Owed > 0 || d.Unreached && !d.Allowed
		default:
			left = d.Remaining
			overHere = owes(d)
		}
		if overHere {
			left = 0
			switch {
			case sc.quota[i]:
				// As envoyproxy/ratelimit answers it: OK, with the limit
				// and nothing left, and no reset (the headers keep it).
				violations = append(violations, i)
				resetFor, reset = i, st.DurationUntilReset
				st.DurationUntilReset = nil
			case sc.kind[i] == kindShadow:
				stats.add(statShadow, hits)
			default:
				st.Code = pb.RateLimitResponse_OVER_LIMIT
				over = true // a check whose key owes, too
			}
			stats.add(statOver, hits)
		} else {
			stats.add(statWithin, hits)
			// near_limit as envoyproxy/ratelimit counts it: the hits that
			// landed past the ratio's share of the limit.
			nearFloor := int64(math.Floor(float64(float32(r.limit.RequestsPerUnit) * float32(s.near))))
			if used := int64(r.limit.RequestsPerUnit) - left; used > nearFloor && hits > 0 {
				stats.add(statNear, uint64(min(int64(min(hits, math.MaxInt64)), used-nearFloor)))
			}
		}
		stats.add(statTotal, hits)
		st.LimitRemaining = uint32(min(max(left, 0), math.MaxUint32))
		// The headers describe the descriptor with the least left, or
		// the last one over its limit, as envoyproxy/ratelimit picks it.
		if st.LimitRemaining < minLeft || st.Code == pb.RateLimitResponse_OVER_LIMIT {
			minIdx, minLeft = i, st.LimitRemaining
		}
	}
	if over {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
		if s.opts.Shadow {
			resp.OverallCode = pb.RateLimitResponse_OK
		}
	}
	if s.opts.Headers && minIdx >= 0 {
		st := &statuses[minIdx]
		d := st.DurationUntilReset
		if minIdx == resetFor {
			d = reset
		}
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: s.opts.LimitHeader, Value: strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)},
			{Key: s.opts.RemainingHeader, Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
			{Key: s.opts.ResetHeader, Value: strconv.FormatInt(d.GetSeconds(), 10)},
		}
	}
	if s.opts.DynamicMetadata {
		resp.DynamicMetadata = metadata(sc, req, violations)
	}
	return resp
}

// remainingNow is what a Peek says is left before one more request.
func remainingNow(d *floodgate.Decision) int64 {
	if !d.Allowed {
		return 0
	}
	return d.Remaining + 1
}

// reset is the status's duration_until_reset: for a fixed window, the
// whole seconds to the window's end, as envoyproxy/ratelimit computes it
// (unit − now mod unit, on the Unix clock); for the other algorithms,
// the time until the key is whole again, rounded up to a second.
func (r *rule) reset(now int64, d *floodgate.Decision) *durationpb.Duration {
	if r.fixed {
		sec := now / int64(time.Second)
		return &durationpb.Duration{Seconds: r.unit - sec%r.unit}
	}
	return &durationpb.Duration{Seconds: int64((d.ResetAfter + time.Second - 1) / time.Second)}
}

// metadata is a response's dynamic metadata, as envoyproxy/ratelimit
// writes it (RESPONSE_DYNAMIC_METADATA); violations are the descriptors
// over a limit in quota mode.
func metadata(sc *scratch, req *pb.RateLimitRequest, violations []int) *structpb.Struct {
	ds := req.GetDescriptors()
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	descs := make([]*structpb.Value, 0, len(ds))
	for _, d := range ds {
		if d == nil {
			continue
		}
		entries := make([]*structpb.Value, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if l := d.GetLimit(); l != nil {
			f["limit"] = structpb.NewStringValue(l.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	if len(violations) > 0 {
		v := make([]*structpb.Value, len(violations))
		for i, d := range violations {
			v[i] = structpb.NewNumberValue(float64(d))
		}
		fields["quotaModeViolations"] = structpb.NewListValue(&structpb.ListValue{Values: v})
	}
	enabled := false
	for _, r := range sc.rules {
		enabled = enabled || r != nil && r.limit.Quota
	}
	fields["quotaModeEnabled"] = structpb.NewBoolValue(enabled)
	return &structpb.Struct{Fields: fields}
}
