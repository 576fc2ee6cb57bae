package policy

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// TestErrorsWrap: an error floodgate returns for a policy stays reachable
// through the middleware's context, for errors.Is and errors.As.
func TestErrorsWrap(t *testing.T) {
	b := NewBuilder(storeFor(t, nil), valid, false, nil)
	_, err := b.Route("r", []Spec{{Name: "p", Rule: floodgate.Rule{Limit: 0, Period: time.Hour}}}, nil)
	if err == nil {
		t.Fatal("a rule of Limit 0 was taken")
	}
	if errors.Unwrap(err) == nil {
		t.Errorf("error %q wraps nothing", err)
	}
	_, err = b.Route("r", []Spec{perHour("a", 1, false)}, map[string][]Spec{"gold": {{Name: "p", Rule: floodgate.Rule{Limit: 0, Period: time.Hour}}}})
	b.Abort()
	if err == nil || errors.Unwrap(errors.Unwrap(err)) == nil {
		t.Errorf("tier error %v does not wrap the policy's, and that floodgate's", err)
	}
}
