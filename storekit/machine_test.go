package storekit_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/storekit"
)

// The Machine is held to floodgate's own Limiter: the same algorithm and
// rule on a ManualClock, the same requests, the same Decisions field by
// field, with every state the Machine returns stored as bytes and read
// back at the next step.

var machineAlgorithms = []string{floodgate.TokenBucket, floodgate.LeakyBucket, floodgate.FixedWindow, floodgate.SlidingCounter, floodgate.SlidingLog}

// machineRules are the rules the differential draws from: whole and
// fractional intervals, a burst above the limit (the buckets alone), a
// limit of 1, and a long period.
var machineRules = []floodgate.Rule{
	{Limit: 5, Period: time.Second},
	{Limit: 3, Period: 100 * time.Millisecond},
	{Limit: 7, Period: 300 * time.Millisecond, Burst: 10},
	{Limit: 1, Period: time.Second},
	{Limit: 1000, Period: time.Minute},
	{Limit: 4, Period: 7 * time.Nanosecond},
}

// machineStart is the clock's first reading: the wall clock's scale.
const machineStart = 1_700_000_000 * int64(time.Second)

// pending is a reservation held on both sides.
type pending struct {
	key    string
	est    int64
	at     int64
	r      *floodgate.Reservation
	policy int // the rule it was taken under
}

// differential runs the operations that data encodes (see FuzzMachine)
// against a Limiter and a Machine, failing at the first difference.
func differential(t testing.TB, data []byte) {
	if len(data) < 2 {
		return
	}
	alg := machineAlgorithms[int(data[0])%len(machineAlgorithms)]
	ri := int(data[1]) % len(machineRules)
	if floodgate.CheckRule(alg, machineRules[ri]) != nil {
		ri = 0
	}
	rule := machineRules[ri]
	clock := floodgate.NewManualClock(machineStart)
	lim, err := floodgate.New(floodgate.Config{Algorithm: alg, Rule: rule, Clock: clock, IdleTTL: floodgate.Never, MaxKeys: floodgate.Unbounded})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	m, err := storekit.NewMachine(alg, rule)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c"}
	states := map[string][]byte{}
	scratch := make([]byte, 0, 256)
	var held []pending
	gen := 0
	lastSet := int64(math.MinInt64)
	log := []string{fmt.Sprintf("rule %+v", rule)}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s %+v, after:\n%v\n%s", alg, rule, log, fmt.Sprintf(format, args...))
	}
	store := func(key string, next []byte) {
		if next != nil {
			states[key] = append([]byte(nil), next...)
		}
	}
	for i := 2; i+1 < len(data); i += 2 {
		op, arg := data[i]%8, data[i+1]
		key := keys[int(arg>>5)%len(keys)]
		c := rule.Capacity()
		now := clock.Now()
		switch op {
		case 0: // the clock moves, backwards too
			p := int64(rule.Period)
			moves := []int64{0, 1, p / 7, p / 3, p / 2, p, 2*p + 1, -1, -p / 4, 5 * p}
			clock.Advance(time.Duration(moves[int(arg)%len(moves)]))
			log = append(log, fmt.Sprintf("clock %d", clock.Now()-machineStart))
		case 1, 7: // AllowN
			n := int64(arg&31) % (c + 2)
			if op == 7 {
				n = 1
			}
			want := lim.AllowN(key, n)
			got, next, _, err := m.Take(states[key], now, n, scratch[:0])
			log = append(log, fmt.Sprintf("take %s %d", key, n))
			if err != nil || got != want {
				fail("Take: %+v, %v; the Limiter's %+v", got, err, want)
			}
			store(key, next)
		case 2: // Reserve
			est := 1 + int64(arg&31)%(c+1)
			r := new(floodgate.Reservation)
			*r = lim.Reserve(key, est)
			got, next, at, err := m.Take(states[key], now, est, scratch[:0])
			log = append(log, fmt.Sprintf("reserve %s %d", key, est))
			if err != nil || got != r.Decision() {
				fail("Take for Reserve: %+v, %v; the Limiter's %+v", got, err, r.Decision())
			}
			store(key, next)
			if got.Allowed {
				held = append(held, pending{key: key, est: est, at: at, r: r, policy: gen})
			}
		case 3: // Settle
			if len(held) == 0 {
				continue
			}
			j := int(arg) % len(held)
			h := held[j]
			held = append(held[:j], held[j+1:]...)
			actual := int64(arg&31) % (h.est + 3)
			want, werr := h.r.Settle(actual)
			log = append(log, fmt.Sprintf("settle %s %d of %d", h.key, actual, h.est))
			var got floodgate.Decision
			var next []byte
			if actual > h.est {
				got, next, err = m.Charge(states[h.key], now, actual-h.est, scratch[:0])
			} else {
				got, next, err = m.Refund(states[h.key], now, h.at, h.est-actual, scratch[:0])
			}
			if (err != nil) != (werr != nil) || err == nil && got != want {
				fail("Settle: %+v, %v; the Limiter's %+v, %v", got, err, want, werr)
			}
			if err != nil && errors.Is(err, floodgate.ErrDebtBound) != errors.Is(werr, floodgate.ErrDebtBound) {
				fail("Settle's error %v; the Limiter's %v", err, werr)
			}
			store(h.key, next)
		case 4: // Charge
			n := int64(arg&31) % (2*c + 2)
			if arg == 255 {
				n = 1 << 40
			}
			want, werr := lim.Charge(key, n)
			got, next, err := m.Charge(states[key], now, n, scratch[:0])
			log = append(log, fmt.Sprintf("charge %s %d", key, n))
			if (err != nil) != (werr != nil) || err == nil && got != want {
				fail("Charge: %+v, %v; the Limiter's %+v, %v", got, err, want, werr)
			}
			if err != nil && (next != nil || errors.Is(err, floodgate.ErrDebtBound) != errors.Is(werr, floodgate.ErrDebtBound)) {
				fail("Charge's error %v (state %v); the Limiter's %v", err, next != nil, werr)
			}
			store(key, next)
			if err != nil && n >= 1 && states[key] == nil {
				// The Limiter made the key before its charge failed; a
				// backend need not, and is then as a key made later.
				_, next, _, _ := m.Take(nil, now, 0, scratch[:0])
				store(key, next)
			}
		case 5: // Peek
			want := lim.Peek(key)
			got, err := m.Peek(states[key], now)
			log = append(log, fmt.Sprintf("peek %s", key))
			if err != nil || got != want {
				fail("Peek: %+v, %v; the Limiter's %+v", got, err, want)
			}
		case 6: // SetRule, every key converted at the same instant
			r := machineRules[int(arg)%len(machineRules)]
			// The Limiter converts at a change to the same rule too, and
			// keeps its changes in order on the clock; a state's bytes
			// name their rule, and a Machine converts what another rule
			// wrote, at its reading.
			if floodgate.CheckRule(alg, r) != nil || r == rule || now < lastSet {
				continue
			}
			lastSet = now
			if err := lim.SetRule(r); err != nil {
				t.Fatal(err)
			}
			rule, gen = r, gen+1
			if m, err = storekit.NewMachine(alg, r); err != nil {
				t.Fatal(err)
			}
			log = append(log, fmt.Sprintf("setrule %+v", r))
			// A refund of a grant made under the old rule is dropped
			// by the Limiter; a backend drops it by its rule's
			// generation (HoldPart.Gen), so the test forgets them.
			held = held[:0]
			for _, k := range keys {
				if states[k] == nil {
					continue
				}
				want := lim.AllowN(k, 0)
				got, next, _, err := m.Take(states[k], now, 0, scratch[:0])
				if err != nil || got != want || next == nil {
					fail("Take(0) converting %s: %+v, %v (state %v); the Limiter's %+v", k, got, err, next != nil, want)
				}
				store(k, next)
			}
		}
		// Fresh: from its instant on, a state answers as a new one.
		for _, k := range keys {
			f, err := m.Fresh(states[k])
			if err != nil {
				fail("Fresh(%s): %v", k, err)
			}
			if now := clock.Now(); now >= f {
				got, _ := m.Peek(states[k], now)
				fresh, _ := m.Peek(nil, now)
				if got != fresh {
					fail("%s at %d ≥ its Fresh %d: Peek %+v, a new state's %+v", k, now-machineStart, f-machineStart, got, fresh)
				}
			}
		}
	}
}

// randomOps is a random differential's input.
func randomOps(r *rand.Rand, alg, rule, n int) []byte {
	data := []byte{byte(alg), byte(rule)}
	for range n {
		data = append(data, byte(r.IntN(256)), byte(r.IntN(256)))
	}
	return data
}

// TestMachineDifferential holds each algorithm's Machine to the Limiter
// on random sequences of requests, reservations and settlements,
// charges, peeks, clock moves (backwards too) and rule changes.
func TestMachineDifferential(t *testing.T) {
	r := rand.New(rand.NewPCG(57, 1))
	for a, alg := range machineAlgorithms {
		t.Run(alg, func(t *testing.T) {
			for ri := range machineRules {
				for range 40 {
					differential(t, randomOps(r, a, ri, 300))
				}
			}
		})
	}
}

// FuzzMachine drives the differential from its input, and reads the
// input as a state too: no bytes make a step panic, and bytes that are
// no state are an error.
func FuzzMachine(f *testing.F) {
	r := rand.New(rand.NewPCG(57, 2))
	for a := range machineAlgorithms {
		for ri := range machineRules {
			f.Add(randomOps(r, a, ri, 40))
		}
	}
	for _, alg := range machineAlgorithms {
		m, _ := storekit.NewMachine(alg, machineRules[0])
		_, s, _, _ := m.Take(nil, machineStart, 2, nil)
		f.Add(s)
		_, s, _ = m.Charge(s, machineStart, 9, nil)
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		differential(t, data)
		for _, alg := range machineAlgorithms {
			for _, rule := range machineRules[:2] {
				m, err := storekit.NewMachine(alg, rule)
				if err != nil {
					t.Fatal(err)
				}
				arbitrary(t, m, data)
				// The input as the body of a state with this Machine's
				// header, and of one with another rule's.
				_, s, _, _ := m.Take(nil, machineStart, 1, nil)
				arbitrary(t, m, append(s[:26:26], data...))
				other, _ := storekit.NewMachine(alg, machineRules[3])
				arbitrary(t, other, append(s[:26:26], data...))
			}
		}
	})
}

// arbitrary runs every step on state, which may be anything: an error,
// or answers from a state that reads back.
func arbitrary(t *testing.T, m *storekit.Machine, state []byte) {
	for _, now := range []int64{machineStart, math.MinInt64, math.MaxInt64, 0} {
		_, next, at, err := m.Take(state, now, 1, nil)
		if err == nil && next != nil {
			if _, err := m.Peek(next, now); err != nil {
				t.Fatalf("a state Take wrote does not read back: %v", err)
			}
		}
		m.Charge(state, now, 3, nil)
		m.Refund(state, now, at, 1, nil)
		m.Peek(state, now)
		m.Fresh(state)
	}
}
