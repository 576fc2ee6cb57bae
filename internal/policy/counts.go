package policy

import (
	"slices"

	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/internal/countinfo"
)

// This file reports a Route's counts: its requests by result, and each
// policy's denials, shadow denials, slots held, keys and evictions.

// AppendCounts appends the Route's counts (see package counts): its
// requests by result, the denials and shadow denials by policy, and each
// policy's keys and evictions, with the route and policy labels set. The
// series come in the same order on every call.
func (r *Route) AppendCounts(dst []counts.Sample) []counts.Sample {
	dst = append(dst,
		counts.Sample{Metric: counts.Requests, Route: r.Name, Label: countinfo.Allowed, Value: r.count.Value(routeAllowed)},
		counts.Sample{Metric: counts.Requests, Route: r.Name, Label: countinfo.Exempt, Value: r.count.Value(routeExempt)})
	tiers := make([]string, 0, len(r.tiers))
	for t := range r.tiers {
		tiers = append(tiers, t)
	}
	slices.Sort(tiers)
	dst = r.base.appendCounts(dst)
	for _, t := range tiers {
		dst = r.tiers[t].appendCounts(dst)
	}
	return dst
}

func (s *Set) appendCounts(dst []counts.Sample) []counts.Sample {
	route := s.route.Name
	for _, e := range s.entries {
		dst = append(dst,
			counts.Sample{Metric: counts.Requests, Route: route, Policy: e.label, Label: countinfo.Denied, Value: e.count.Value(entryDenied)},
			counts.Sample{Metric: counts.Requests, Route: route, Policy: e.label, Label: countinfo.ShadowDenied, Value: e.count.Value(entryShadow)})
		from := len(dst)
		dst = e.SP.AppendCounts(dst)
		for i := from; i < len(dst); i++ {
			dst[i].Route, dst[i].Policy = route, e.label
		}
	}
	for _, e := range s.slots {
		dst = append(dst,
			counts.Sample{Metric: counts.Requests, Route: route, Policy: e.label, Label: countinfo.Denied, Value: e.count.Value(entryDenied)},
			counts.Sample{Metric: counts.Requests, Route: route, Policy: e.label, Label: countinfo.ShadowDenied, Value: e.count.Value(entryShadow)},
			counts.Sample{Metric: counts.InFlight, Route: route, Policy: e.label, Value: e.count.Value(entryHeld)})
		from := len(dst)
		dst = e.Slots.AppendCounts(dst)
		for i := from; i < len(dst); i++ {
			dst[i].Route, dst[i].Policy = route, e.label
		}
	}
	return dst
}
