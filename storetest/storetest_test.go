package storetest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testmain"
	"github.com/floodgate-go/floodgate/storetest"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// brokenEnv names the broken Store that TestBroken runs the suite on.
const brokenEnv = "STORETEST_BROKEN"

// TestSuiteCatches runs the suite, in a child process, on Stores that
// each break one obligation, and requires the subtest of that
// obligation to fail: the suite's checks can fail.
func TestSuiteCatches(t *testing.T) {
	for _, c := range []struct{ broken, subtest string }{
		{"piecemeal", "Decide/token_bucket/AllOrNothing"},
		{"shadows-enforced", "Decide/token_bucket/Shadows"},
		{"each-unfilled", "Decide/token_bucket/Each"},
		{"context-charges", "Decide/token_bucket/ContextDone"},
		{"one-more", "Exact/fixed_window/OnePolicy"},
		{"one-more", "Limiter/sliding_log"},
		{"check-lies", "CheckRule"},
		{"setrule-refills", "SetRule/leaky_bucket"},
		{"settles-twice", "Settler/token_bucket/SettleErrors"},
		{"slot-more", "Slots/AtMostLimit"},
		{"plain-error", "Outage"},
	} {
		t.Run(c.broken+"/"+c.subtest, func(t *testing.T) {
			pattern := "^TestBroken$"
			for _, part := range strings.Split(c.subtest, "/") {
				pattern += "/^" + part + "$"
			}
			args := []string{os.Args[0], "-test.run", pattern, "-test.count", "1", "-test.v"}
			if emu := os.Getenv("FLOODGATE_EMULATOR"); emu != "" {
				args = append([]string{emu}, args...) // make test-cross: this binary runs under qemu
			}
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Env = append(os.Environ(), brokenEnv+"="+c.broken)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a Store that breaks %s:\n%s", c.subtest, out)
			}
			if want := "--- FAIL: TestBroken/" + c.subtest; !strings.Contains(string(out), want) {
				t.Fatalf("no %q in the suite's output:\n%s", want, out)
			}
		})
	}
}

// TestBroken runs the suite on the broken Store that brokenEnv names,
// for TestSuiteCatches; it is skipped otherwise.
func TestBroken(t *testing.T) {
	how := os.Getenv(brokenEnv)
	if how == "" {
		t.Skip("run by TestSuiteCatches, in a child process")
	}
	var down atomic.Bool
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T, clock *floodgate.ManualClock) floodgate.Store {
			s := floodgate.NewLocalStore(floodgate.LocalStoreConfig{Clock: clock})
			t.Cleanup(func() { _ = s.Close() })
			return &broken{LocalStore: s, how: how, down: &down, seen: map[string]bool{}}
		},
		Outage: func(*testing.T) func() {
			down.Store(true)
			return func() { down.Store(false) }
		},
	})
}

// broken is a LocalStore that breaks the obligation how names.
type broken struct {
	*floodgate.LocalStore
	how  string
	down *atomic.Bool

	mu   sync.Mutex
	seen map[string]bool // one-more's keys given one more
}

// policy is a broken Store's policy.
type policy struct {
	floodgate.StorePolicy
	s         *broken
	name, alg string
}

func (b *broken) Policy(name, alg string, r floodgate.Rule) (floodgate.StorePolicy, error) {
	p, err := b.LocalStore.Policy(name, alg, r)
	if err != nil {
		return nil, err
	}
	return &policy{StorePolicy: p, s: b, name: name, alg: alg}, nil
}

func (b *broken) CheckRule(alg string, r floodgate.Rule) error {
	if b.how == "check-lies" {
		return nil
	}
	return b.LocalStore.CheckRule(alg, r)
}

// SetRule of setrule-refills makes the policy anew: every key full.
func (p *policy) SetRule(r floodgate.Rule) error {
	if p.s.how != "setrule-refills" {
		return p.StorePolicy.SetRule(r)
	}
	np, err := p.s.LocalStore.Policy(p.name+"'", p.alg, r)
	if err != nil {
		return err
	}
	p.name += "'"
	p.StorePolicy = np
	return nil
}

// inner is asks with the LocalStore's policies.
func (b *broken) inner(asks []floodgate.Ask) []floodgate.Ask {
	in := make([]floodgate.Ask, len(asks))
	for i, a := range asks {
		in[i] = a
		if p, ok := a.Policy.(*policy); ok {
			in[i].Policy = p.StorePolicy
		}
		if b.how == "shadows-enforced" {
			in[i].Shadow = false
		}
	}
	return in
}

var errDown = errors.New("broken: down")

func (b *broken) Decide(ctx context.Context, asks []floodgate.Ask, each []floodgate.Decision) (floodgate.Decision, int, error) {
	in := b.inner(asks)
	switch b.how {
	case "plain-error":
		if b.down.Load() {
			return floodgate.Decision{}, 0, errDown
		}
	case "piecemeal":
		for i := range in {
			if d, _, err := b.LocalStore.Decide(ctx, in[i:i+1], nil); err != nil || !d.Allowed {
				return d, i, err
			}
		}
		return floodgate.Decision{Allowed: true}, -1, nil
	case "each-unfilled":
		each = nil
	case "context-charges":
		d, refused, err := b.LocalStore.Decide(ctx, in, each)
		if ctx.Err() != nil {
			return floodgate.Decision{}, 0, ctx.Err()
		}
		return d, refused, err
	case "one-more":
		d, refused, err := b.LocalStore.Decide(ctx, in, each)
		if len(in) == 1 && !d.Allowed && in[0].N == 1 && d.RetryAfter != floodgate.Never {
			b.mu.Lock()
			defer b.mu.Unlock()
			if !b.seen[in[0].Key] {
				b.seen[in[0].Key] = true
				return floodgate.Decision{Allowed: true, Limit: d.Limit}, -1, nil
			}
		}
		return d, refused, err
	}
	return b.LocalStore.Decide(ctx, in, each)
}

func (b *broken) Charge(ctx context.Context, asks []floodgate.Ask, each []floodgate.Decision) (floodgate.Decision, error) {
	return b.LocalStore.Charge(ctx, b.inner(asks), each)
}

func (b *broken) Reserve(ctx context.Context, asks []floodgate.Ask, each []floodgate.Decision, h *floodgate.Hold) (floodgate.Decision, int, error) {
	return b.LocalStore.Reserve(ctx, b.inner(asks), each, h)
}

func (b *broken) Settle(ctx context.Context, asks []floodgate.Ask, each []floodgate.Decision, h *floodgate.Hold) (floodgate.Decision, error) {
	if b.how == "settles-twice" {
		h.Settled = false
	}
	return b.LocalStore.Settle(ctx, b.inner(asks), each, h)
}

func (b *broken) SlotPolicy(name string, limit int) (floodgate.SlotPolicy, error) {
	if b.how == "slot-more" {
		limit++
	}
	return b.LocalStore.SlotPolicy(name, limit)
}
