package rls

import (
	"context"
	"encoding/json"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const quotaYAML = `domain: q
descriptors:
  - key: k
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: n
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: s
    shadow_mode: true
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// meta is a response's dynamic metadata as JSON, its keys sorted.
func meta(t *testing.T, r *pb.RateLimitResponse) string {
	t.Helper()
	if r.DynamicMetadata == nil {
		return ""
	}
	b, err := json.Marshal(r.DynamicMetadata.AsMap())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestQuotaMode: a descriptor over a limit in quota mode is answered OK,
// with its limit, nothing left and no reset, is named in the dynamic
// metadata, and refuses nothing; the headers keep its reset. Shadow
// mode, on the same rule, comes first.
func TestQuotaMode(t *testing.T) {
	cfg, err := LoadOptions{}.Load([]File{{Name: "q.yaml", Data: []byte(quotaYAML)}})
	if err != nil {
		t.Fatal(err)
	}
	_, c := serve(t, cfg, Options{Clock: floodgate.NewManualClock(unixStart), Headers: true, DynamicMetadata: true})
	for range 2 {
		ask(t, c, "q", desc("k", "a"))
	}
	r := ask(t, c, "q", desc("k", "a"))
	st := r.Statuses[0]
	if r.OverallCode != pb.RateLimitResponse_OK || st.Code != pb.RateLimitResponse_OK || st.LimitRemaining != 0 || st.CurrentLimit.GetRequestsPerUnit() != 2 || st.DurationUntilReset != nil {
		t.Fatalf("k over its quota: %s, reset %v", summary(r), st.DurationUntilReset)
	}
	if got, want := meta(t, r), `{"descriptors":[{"entries":["k=a"]}],"domain":"q","quotaModeEnabled":true,"quotaModeViolations":[0]}`; got != want {
		t.Errorf("metadata:\n got %s\nwant %s", got, want)
	}
	if h := r.ResponseHeadersToAdd; len(h) != 3 || h[1].Value != "0" || h[2].Value != "40" {
		t.Errorf("headers %v: want remaining 0 and the window's reset, 40 s", h)
	}

	// Beside an enforced descriptor over its limit, the request is
	// refused for that one alone.
	ask(t, c, "q", desc("n", "b"))
	r = ask(t, c, "q", desc("k", "a"), desc("n", "b"))
	if r.OverallCode != pb.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != pb.RateLimitResponse_OK || r.Statuses[1].Code != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("k and n over: %s", summary(r))
	}
	if got, want := meta(t, r), `{"descriptors":[{"entries":["k=a"]},{"entries":["n=b"]}],"domain":"q","quotaModeEnabled":true,"quotaModeViolations":[0]}`; got != want {
		t.Errorf("metadata:\n got %s\nwant %s", got, want)
	}

	// Shadow and quota on one rule: shadow mode's answer, no violation.
	ask(t, c, "q", desc("s", "c"))
	r = ask(t, c, "q", desc("s", "c"))
	if r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].Code != pb.RateLimitResponse_OK || r.Statuses[0].DurationUntilReset == nil {
		t.Fatalf("s over: %s", summary(r))
	}
	if got, want := meta(t, r), `{"descriptors":[{"entries":["s=c"]}],"domain":"q","quotaModeEnabled":true}`; got != want {
		t.Errorf("metadata:\n got %s\nwant %s", got, want)
	}

	// The metadata carries the hits and a limit override.
	req := &pb.RateLimitRequest{Domain: "q", HitsAddend: 3, Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "x", Value: "1"}, {Key: "y", Value: "2"}}, HitsAddend: wrapperspb.UInt64(5)},
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "z", Value: "3"}}, Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 9, Unit: 2}}}}
	r, err = c.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	m := r.DynamicMetadata.GetFields()
	ds := m["descriptors"].GetListValue().GetValues()
	if m["hitsAddend"].GetNumberValue() != 3 || m["quotaModeEnabled"].GetBoolValue() || len(ds) != 2 ||
		ds[0].GetStructValue().GetFields()["hitsAddend"].GetNumberValue() != 5 ||
		ds[1].GetStructValue().GetFields()["limit"].GetStringValue() != req.Descriptors[1].Limit.String() {
		t.Errorf("metadata of hits and an override: %s", meta(t, r))
	}
}

// TestQuotaModeGlobal: QUOTA_MODE answers every descriptor over its
// limit as quota mode does, and the metadata's quotaModeEnabled stays
// what the rules say.
func TestQuotaModeGlobal(t *testing.T) {
	cfg, err := LoadOptions{}.Load([]File{{Name: "q.yaml", Data: []byte(quotaYAML)}})
	if err != nil {
		t.Fatal(err)
	}
	_, c := serve(t, cfg, Options{Clock: floodgate.NewManualClock(unixStart), Quota: true, DynamicMetadata: true})
	ask(t, c, "q", desc("n", "b"))
	r := ask(t, c, "q", desc("n", "b"))
	if r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].Code != pb.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("n over under QUOTA_MODE: %s", summary(r))
	}
	if got, want := meta(t, r), `{"descriptors":[{"entries":["n=b"]}],"domain":"q","quotaModeEnabled":false,"quotaModeViolations":[0]}`; got != want {
		t.Errorf("metadata:\n got %s\nwant %s", got, want)
	}
}
