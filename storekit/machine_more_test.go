package storekit_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/storekit"
)

// TestNewMachineErrors: floodgate.New's error for a rule the algorithm
// cannot hold, and an error naming an algorithm that is not built in.
func TestNewMachineErrors(t *testing.T) {
	for _, c := range []struct {
		alg  string
		rule floodgate.Rule
	}{
		{floodgate.FixedWindow, floodgate.Rule{Limit: 5, Period: time.Second, Burst: 3}},
		{floodgate.TokenBucket, floodgate.Rule{Limit: 0, Period: time.Second}},
		{"", floodgate.Rule{Limit: 5, Period: -time.Second}},
		{floodgate.SlidingLog, floodgate.Rule{Limit: 5_000_000, Period: time.Second}},
		{floodgate.LeakyBucket, floodgate.Rule{Limit: 10, Period: time.Nanosecond}},
	} {
		_, want := floodgate.New(floodgate.Config{Algorithm: c.alg, Rule: c.rule})
		_, err := storekit.NewMachine(c.alg, c.rule)
		if want == nil || err == nil || err.Error() != want.Error() {
			t.Errorf("NewMachine(%q, %+v): %v; New's %v", c.alg, c.rule, err, want)
		}
	}
	for _, name := range []string{"gcra", "token_bucket_mutex"} {
		if _, err := storekit.NewMachine(name, floodgate.Rule{Limit: 5, Period: time.Second}); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("NewMachine(%q): %v, want an error naming it", name, err)
		}
	}
	if m, err := storekit.NewMachine("", floodgate.Rule{Limit: 5, Period: time.Second}); err != nil || m == nil {
		t.Errorf(`NewMachine(""): %v`, err)
	}
}

// TestMachineBadStates: a state of another algorithm, of an unknown
// version, truncated or corrupt, is an error that says which, from
// every step, and changes nothing.
func TestMachineBadStates(t *testing.T) {
	rule := floodgate.Rule{Limit: 5, Period: time.Second}
	states := map[string][]byte{}
	for _, alg := range machineAlgorithms {
		m, _ := storekit.NewMachine(alg, rule)
		_, s, _, err := m.Take(nil, machineStart, 2, nil)
		if err != nil || s == nil {
			t.Fatalf("%s: Take on a new key: %v, state %v", alg, err, s)
		}
		states[alg] = s
	}
	corrupt := func(s []byte, i int, b byte) []byte {
		c := bytes.Clone(s)
		c[i] = b
		return c
	}
	for _, alg := range machineAlgorithms {
		m, _ := storekit.NewMachine(alg, rule)
		other := floodgate.TokenBucket
		if alg == other {
			other = floodgate.SlidingLog
		}
		s := states[alg]
		cases := []struct {
			name, says string
			state      []byte
		}{
			{"another algorithm", other, states[other]},
			{"version", "version", corrupt(s, 0, 9)},
			{"algorithm none", "none", corrupt(s, 1, 77)},
			{"truncated header", "truncated", s[:10]},
			{"truncated body", "corrupt", s[:len(s)-1]},
			{"trailing byte", "corrupt", append(bytes.Clone(s), 0)},
			{"rule no algorithm holds", "corrupt", corrupt(s, 9, 0)}, // Limit 0
		}
		if alg != floodgate.SlidingLog {
			cases = append(cases, struct {
				name, says string
				state      []byte
			}{"field out of range", "corrupt", corrupt(s, len(s)-8, 0x80)})
		} else {
			huge := append(bytes.Clone(s[:26+17]), 0xff, 0xff, 0xff, 0xff, 0x0f) // 2^32 − 1 entries claimed
			cases = append(cases, struct {
				name, says string
				state      []byte
			}{"entries claimed", "entries", huge})
		}
		for _, c := range cases {
			errs := []error{}
			_, next, _, err := m.Take(c.state, machineStart, 1, nil)
			errs = append(errs, err)
			_, next2, err := m.Charge(c.state, machineStart, 1, nil)
			errs = append(errs, err)
			_, next3, err := m.Refund(c.state, machineStart, machineStart, 1, nil)
			errs = append(errs, err)
			_, err = m.Peek(c.state, machineStart)
			errs = append(errs, err)
			_, err = m.Fresh(c.state)
			errs = append(errs, err)
			if next != nil || next2 != nil || next3 != nil {
				t.Errorf("%s, %s: a step wrote a state", alg, c.name)
			}
			for i, err := range errs {
				if err == nil || !strings.Contains(err.Error(), c.says) {
					t.Errorf("%s, %s: step %d: %v, want an error that says %q", alg, c.name, i, err, c.says)
				}
			}
		}
	}
}

// TestMachineSetRule: a state written under another rule is converted
// at the step's instant as Limiter.SetRule converts at its own, and a
// refund that meets it gives nothing back, as the Limiter drops one.
func TestMachineSetRule(t *testing.T) {
	rules := []floodgate.Rule{
		{Limit: 10, Period: time.Second},
		{Limit: 4, Period: 300 * time.Millisecond},
		{Limit: 30, Period: 2 * time.Second},
	}
	for _, alg := range machineAlgorithms {
		for _, from := range rules {
			for _, to := range rules {
				if from == to {
					continue
				}
				clock := floodgate.NewManualClock(machineStart)
				lim, err := floodgate.New(floodgate.Config{Algorithm: alg, Rule: from, Clock: clock, IdleTTL: floodgate.Never, MaxKeys: floodgate.Unbounded})
				if err != nil {
					t.Fatal(err)
				}
				m1, _ := storekit.NewMachine(alg, from)
				m2, _ := storekit.NewMachine(alg, to)
				var s []byte
				take := func(m *storekit.Machine, n int64) {
					t.Helper()
					want := lim.AllowN("k", n)
					got, next, _, err := m.Take(s, clock.Now(), n, nil)
					if err != nil || got != want {
						t.Fatalf("%s %+v→%+v: Take(%d) %+v, %v; the Limiter's %+v", alg, from, to, n, got, err, want)
					}
					if next != nil {
						s = next
					}
				}
				take(m1, 1)
				clock.Advance(from.Period / 3)
				take(m1, 1)
				r := new(floodgate.Reservation)
				*r = lim.Reserve("k", 2)
				_, next, at, _ := m1.Take(s, clock.Now(), 2, nil)
				if !r.Decision().Allowed || next == nil {
					t.Fatalf("%s: the reservation was refused", alg)
				}
				s = next
				clock.Advance(from.Period / 5)
				if err := lim.SetRule(to); err != nil {
					t.Fatal(err)
				}
				if got, err := m2.Peek(s, clock.Now()); err != nil || got != lim.Peek("k") {
					t.Fatalf("%s %+v→%+v: Peek of the old state %+v, %v; the Limiter's %+v", alg, from, to, got, err, lim.Peek("k"))
				}
				want, _ := r.Settle(0)
				got, next, err := m2.Refund(s, clock.Now(), at, 2, nil)
				if err != nil || got != want || next == nil {
					t.Fatalf("%s %+v→%+v: Refund of the old state %+v, %v (state %v); the Limiter's Settle %+v", alg, from, to, got, err, next != nil, want)
				}
				s = next
				for range 6 {
					take(m2, 1)
					clock.Advance(to.Period / 4)
				}
				if _, err := m1.Peek(s, clock.Now()); err != nil {
					t.Fatalf("%s: the old rule's Machine cannot read the new rule's state: %v", alg, err)
				}
				lim.Close()
			}
		}
	}
}

// TestMachineFresh: at Fresh(state) a state answers as a new one, and
// one nanosecond before it does not: its last grant still counts. The
// same with a debt.
func TestMachineFresh(t *testing.T) {
	rule := floodgate.Rule{Limit: 4, Period: time.Second}
	for _, alg := range machineAlgorithms {
		m, _ := storekit.NewMachine(alg, rule)
		for _, charge := range []int64{0, 9} {
			_, s, _, _ := m.Take(nil, machineStart+int64(time.Second)/3, 1, nil)
			if charge > 0 {
				_, s, _ = m.Charge(s, machineStart+int64(time.Second)/2, charge, nil)
			}
			f, err := m.Fresh(s)
			if err != nil {
				t.Fatal(err)
			}
			full := func(now int64) (floodgate.Decision, floodgate.Decision) {
				got, _, _, _ := m.Take(s, now, rule.Limit, nil)
				want, _, _, _ := m.Take(nil, now, rule.Limit, nil)
				return got, want
			}
			if got, want := full(f); got != want {
				t.Errorf("%s, charged %d: at Fresh %d, Take(%d) %+v; a new state's %+v", alg, charge, f-machineStart, rule.Limit, got, want)
			}
			if gp, wp := mustPeek(t, m, s, f), mustPeek(t, m, nil, f); gp != wp {
				t.Errorf("%s, charged %d: at Fresh, Peek %+v; a new state's %+v", alg, charge, gp, wp)
			}
			// The sliding counter's instant for a debt is a window later
			// than it needs (the sketch's, kept conservative).
			if got, _ := full(f - 1); got.Allowed && !(alg == floodgate.SlidingCounter && charge > 0) {
				t.Errorf("%s, charged %d: a ns before Fresh, Take(%d) admitted: %+v", alg, charge, rule.Limit, got)
			}
		}
	}
	m, _ := storekit.NewMachine("", rule)
	if f, err := m.Fresh(nil); err != nil || f != -1<<63 {
		t.Errorf("Fresh(nil): %d, %v", f, err)
	}
}

func mustPeek(t *testing.T, m *storekit.Machine, s []byte, now int64) floodgate.Decision {
	t.Helper()
	d, err := m.Peek(s, now)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestMachineNext: a step that changes nothing returns no state, a dst
// with room is not reallocated, and the state is appended after dst's
// bytes.
func TestMachineNext(t *testing.T) {
	rule := floodgate.Rule{Limit: 2, Period: time.Second}
	for _, alg := range machineAlgorithms {
		m, _ := storekit.NewMachine(alg, rule)
		_, s, _, _ := m.Take(nil, machineStart, 2, nil)
		if d, next, _, err := m.Take(s, machineStart, 1, nil); err != nil || d.Allowed || next != nil {
			t.Errorf("%s: a refusal: %+v, %v, state %v", alg, d, err, next != nil)
		}
		if _, next, _, _ := m.Take(nil, machineStart, 3, nil); next == nil {
			t.Errorf("%s: a refusal of a new key writes no state: the key made at now must be kept", alg)
		}
		dst := make([]byte, 3, 200)
		copy(dst, "pre")
		later := machineStart + 2*int64(time.Second)
		_, next, _, err := m.Take(s, later, 1, dst)
		if err != nil || next == nil || &next[0] != &dst[0] || string(next[:3]) != "pre" {
			t.Errorf("%s: the state is not appended to dst in place", alg)
		}
		if next == nil {
			continue
		}
		if _, err := m.Peek(next[3:], later); err != nil {
			t.Errorf("%s: the appended state does not read back: %v", alg, err)
		}
	}
}

// TestMachineAllocs: a step on a key's state, its bytes appended to a
// dst with room, allocates nothing, for every algorithm: each decides on
// a pooled twin (the sliding log's with its entries' buffer kept). The
// race detector's pool drops objects at random, so under it the count
// is reported, not asserted.
func TestMachineAllocs(t *testing.T) {
	rule := floodgate.Rule{Limit: 1000, Period: time.Second}
	dst := make([]byte, 0, 4096)
	for _, alg := range machineAlgorithms {
		m, _ := storekit.NewMachine(alg, rule)
		var s []byte
		for i := range 20 {
			_, next, _, _ := m.Take(s, machineStart+int64(i), 3, nil)
			s = next
		}
		now := machineStart + 100
		var err error
		allocs := testing.AllocsPerRun(200, func() {
			var at int64
			_, _, at, err = m.Take(s, now, 1, dst[:0])
			m.Refund(s, now, at, 1, dst[:0])
			m.Charge(s, now, 1, dst[:0])
			m.Peek(s, now)
		})
		if err != nil {
			t.Fatal(err)
		}
		if raceEnabled {
			t.Logf("%s: %.1f allocations a step under the race detector", alg, allocs)
			continue
		}
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations for Take, Refund, Charge and Peek", alg, allocs)
		}
	}
}

// TestMachineConcurrent: replicas that share a key's bytes through a
// compare-and-swap, many at once, admit exactly the rule's limit of a
// window that does not move, and a Machine serves them all at once.
func TestMachineConcurrent(t *testing.T) {
	const limit, callers, each = 100, 8, 40
	for _, alg := range machineAlgorithms {
		rule := floodgate.Rule{Limit: limit, Period: time.Hour}
		m, err := storekit.NewMachine(alg, rule)
		if err != nil {
			t.Fatal(err)
		}
		c := &casStore{m: map[string][]byte{}}
		var wg sync.WaitGroup
		admitted := make([]int, callers)
		for g := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					// Readings a few ns apart, in either order.
					if take(c, m, "k", machineStart+int64((g*each+i)%7), 1).Allowed {
						admitted[g]++
					}
				}
			}()
		}
		wg.Wait()
		total := 0
		for _, n := range admitted {
			total += n
		}
		if total != limit {
			t.Errorf("%s: %d admitted of %d asked, want exactly %d", alg, total, callers*each, limit)
		}
	}
}

// TestMachineLogRefund: a sliding log's refund gives back part of its
// grant while the grant's entry is the key's newest, and lapses (the
// key keeps the cost) once a later entry was charged, once the refund
// was given, when the backend forgot the state and made it again, and
// across a change of rule and back.
func TestMachineLogRefund(t *testing.T) {
	r1 := floodgate.Rule{Limit: 10, Period: time.Second}
	r2 := floodgate.Rule{Limit: 20, Period: time.Second}
	m, _ := storekit.NewMachine(floodgate.SlidingLog, r1)
	m2, _ := storekit.NewMachine(floodgate.SlidingLog, r2)
	now := machineStart
	remaining := func(s []byte) int64 { // as a settlement counts it
		d := mustPeek(t, m, s, now)
		if d.Allowed {
			return d.Remaining + 1
		}
		return d.Remaining
	}

	_, s, at, _ := m.Take(nil, now, 4, nil)
	d, s2, err := m.Refund(s, now, at, 3, nil)
	if err != nil || s2 == nil || d.Remaining != 9 || remaining(s2) != 9 {
		t.Fatalf("a refund of the newest grant: %+v, %v; want 9 remaining", d, err)
	}
	if d, again, _ := m.Refund(s2, now, at, 1, nil); again != nil || d.Remaining != 9 {
		t.Errorf("a second refund of one grant gave back: %+v", d)
	}

	_, s, at, _ = m.Take(nil, now, 4, nil)
	_, s, _, _ = m.Take(s, now, 1, nil)
	if d, next, _ := m.Refund(s, now, at, 3, nil); next != nil || d.Remaining != 5 {
		t.Errorf("a refund after a later grant gave back: %+v", d)
	}

	// Forgotten: the same costs, a state made again later, even with
	// the same running costs as the first (the clocks' difference).
	_, old, at, _ := m.Take(nil, now, 4, nil)
	f, _ := m.Fresh(old)
	_, s, _, _ = m.Take(nil, f, 4, nil)
	if d, next, _ := m.Refund(s, f, at, 3, nil); next != nil || d.Remaining != 6 {
		t.Errorf("a refund of a forgotten state's grant gave back to the new state: %+v", d)
	}

	// A change of rule and back.
	_, s, at, _ = m.Take(nil, now, 4, nil)
	_, s, _, _ = m2.Take(s, now, 0, nil)
	_, s, _, _ = m.Take(s, now, 0, nil)
	if d, next, _ := m.Refund(s, now, at, 3, nil); next != nil || d.Remaining != remaining(s) {
		t.Errorf("a refund across a change of rule and back gave back: %+v", d)
	}
}

// TestMachineSkew: two replicas share a key, one's clock δ ahead of the
// other's. What they admit together stays within what the Machine's
// documentation says skew can cost: a bucket, its capacity and the
// refill of the run's span plus δ; a fixed window, its limit in each
// window that either clock reads.
func TestMachineSkew(t *testing.T) {
	const delta = 250 * time.Millisecond
	rule := floodgate.Rule{Limit: 10, Period: time.Second}
	span := 5 * time.Second
	for _, alg := range []string{floodgate.TokenBucket, floodgate.LeakyBucket, floodgate.FixedWindow} {
		m, _ := storekit.NewMachine(alg, rule)
		c := &casStore{m: map[string][]byte{}}
		admitted := int64(0)
		windows := map[int64]bool{}
		step := 10 * time.Millisecond
		for at := time.Duration(0); at < span; at += step {
			for _, skew := range []time.Duration{0, delta} {
				now := machineStart + int64(at+skew)
				windows[now/int64(rule.Period)] = true
				if take(c, m, "k", now, 1).Allowed {
					admitted++
				}
			}
		}
		bound := rule.Capacity() + rule.Limit*int64(span+delta)/int64(rule.Period)
		if alg == floodgate.FixedWindow {
			bound = rule.Limit * int64(len(windows))
		}
		if admitted > bound {
			t.Errorf("%s: %d admitted with a clock %v ahead, above %d", alg, admitted, delta, bound)
		}
		t.Logf("%s: %d admitted in %v with a clock %v ahead (bound %d)", alg, admitted, span, delta, bound)
	}
}
