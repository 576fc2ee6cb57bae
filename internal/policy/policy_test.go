package policy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// hidden is a built-in algorithm behind a type of its own, which makes it
// what floodgate.Register takes from a user: an algorithm that is not
// built in, and so cannot be bounded by MaxKeys.
type hidden struct{ floodgate.Algorithm }

func init() {
	err := floodgate.Register("policy_test_registered", func(r floodgate.Rule) (floodgate.Algorithm, error) {
		a, err := testhook.Algorithm(floodgate.Config{Rule: r})
		if err != nil {
			return nil, err
		}
		return hidden{a.(floodgate.Algorithm)}, nil
	})
	if err != nil {
		panic(err)
	}
}

// TestBuild1Registered: a policy of a registered algorithm fails under the
// middleware's default bound (MaxKeys 0) with an error that names the
// middleware's own knob, MaxKeys -1, not the core's MaxKeys 0, which in a
// middleware means the default bound; with MaxKeys -1 it is built and
// limits.
func TestBuild1Registered(t *testing.T) {
	sp := Spec{Name: "p", Algorithm: "policy_test_registered", Rule: floodgate.Rule{Limit: 1, Period: time.Hour}}
	for _, maxKeys := range []int{0, 100} {
		_, err := Build1(sp, Common{MaxKeys: maxKeys})
		if err == nil {
			t.Fatalf("MaxKeys %d: Build1 made a bounded Limiter of a registered algorithm", maxKeys)
		}
		if msg := err.Error(); !strings.Contains(msg, "MaxKeys to -1") || strings.Contains(msg, "MaxKeys to 0") {
			t.Errorf("MaxKeys %d: error %q does not name the middleware's MaxKeys -1 (alone)", maxKeys, msg)
		}
	}
	l, err := Build1(sp, Common{MaxKeys: -1, Clock: floodgate.NewManualClock(0)})
	if err != nil {
		t.Fatalf("MaxKeys -1: %v", err)
	}
	defer l.Close()
	if !l.Allow("k") || l.Allow("k") {
		t.Error("the registered algorithm did not limit to 1 an hour")
	}
}

// TestErrorsWrap: an error floodgate returns for a policy stays reachable
// through the middleware's context, for errors.Is and errors.As.
func TestErrorsWrap(t *testing.T) {
	_, err := Build1(Spec{Name: "p", Rule: floodgate.Rule{Limit: 0, Period: time.Hour}}, Common{})
	if err == nil {
		t.Fatal("Build1 took a rule of Limit 0")
	}
	if errors.Unwrap(err) == nil {
		t.Errorf("error %q wraps nothing", err)
	}
	b := NewBuilder(Common{}, valid, false, nil)
	_, err = b.Route("r", []Spec{perHour("a", 1, false)}, map[string][]Spec{"gold": {{Name: "p", Rule: floodgate.Rule{Limit: 0, Period: time.Hour}}}})
	b.Abort()
	if err == nil || errors.Unwrap(errors.Unwrap(err)) == nil {
		t.Errorf("tier error %v does not wrap the policy's, and that floodgate's", err)
	}
}
