package bench

import (
	"testing"

	"github.com/floodgate-go/floodgate"
)

// chargeImpls are the implementations BenchmarkCharge runs: every
// floodgate algorithm, lock-free, on the system clock.
var chargeImpls = ByName("floodgate-tb", "floodgate-lb", "floodgate-fw", "floodgate-sc", "floodgate-sl")

// chargeOps are the operations BenchmarkCharge compares on the same keys,
// each behind the harness's Limiter so that benchHot and benchPicks drive
// them as they drive Allow: "allown" is AllowN(key, 1), the figure the
// others are held against; "charge" is Charge(key, 1); "settle" is the
// whole round of a request whose cost is known after it, Reserve(key, 2)
// then Settle(1). (On the hot key, "settlealone" times the Settle(1)
// alone; see benchSettleAlone.) A call that is refused, or returns an error, counts as
// denied: under Plenty none should.
var chargeOps = []struct {
	name string
	op   func(*floodgate.Limiter) Limiter
}{
	{"allown", func(l *floodgate.Limiter) Limiter { return allowNOp{l} }},
	{"charge", func(l *floodgate.Limiter) Limiter { return chargeOp{l} }},
	{"settle", func(l *floodgate.Limiter) Limiter { return settleOp{l} }},
}

type allowNOp struct{ l *floodgate.Limiter }

func (o allowNOp) Allow(key string) bool { return o.l.AllowN(key, 1).Allowed }

type chargeOp struct{ l *floodgate.Limiter }

func (o chargeOp) Allow(key string) bool {
	d, err := o.l.Charge(key, 1)
	return err == nil && d.Allowed
}

type settleOp struct{ l *floodgate.Limiter }

func (o settleOp) Allow(key string) bool {
	r := o.l.Reserve(key, 2)
	if !r.Decision().Allowed {
		return false
	}
	_, err := r.Settle(1)
	return err == nil
}

// chargeKeys is the key set of BenchmarkCharge's parallel scenario, the
// size of BenchmarkKeys's largest.
const chargeKeys = 1_000_000

// BenchmarkCharge measures what a cost known after the work costs (issue
// 42): Charge, and Reserve followed by Settle, beside AllowN on the same
// keys of the same limiter, for every algorithm, under Plenty so that
// every call is admitted and no key ever owes. Its names carry op=
// (allown, charge, settle, and on the hot key settlealone) after impl=:
//
//	BenchmarkCharge/scenario=hotkey/impl=floodgate-tb/op=charge
//	BenchmarkCharge/scenario=1M-uniform-parallel/impl=floodgate-sl/op=settle
//
// hotkey is one key from one goroutine, a fresh limiter for each op;
// 1M-uniform-parallel is BenchmarkKeys's scenario of that name, on one
// limiter filled with 1M keys before the timer starts and shared by the
// three ops, which run one after the other.
func BenchmarkCharge(b *testing.B) {
	for _, impl := range chargeImpls {
		for _, op := range chargeOps {
			b.Run("scenario=hotkey/impl="+impl.Name+"/op="+op.name, func(b *testing.B) {
				benchHot(b, op.op(floodgateOf(b, build(b, impl, Options{Rate: Plenty}))))
			})
		}
		if impl.Name == "floodgate-sl" {
			continue // a batch of its reservations would lapse but the last (see benchSettleAlone)
		}
		b.Run("scenario=hotkey/impl="+impl.Name+"/op=settlealone", func(b *testing.B) {
			benchSettleAlone(b, floodgateOf(b, build(b, impl, Options{Rate: Plenty})))
		})
	}
	for _, impl := range chargeImpls {
		b.Run("scenario=1M-uniform-parallel/impl="+impl.Name, func(b *testing.B) {
			ks := keySet(chargeKeys)
			_, l, release := filled(b, impl, ks)
			defer release()
			fl := floodgateOf(b, l)
			seq := picks(len(ks), "uniform")
			for _, op := range chargeOps {
				b.Run("op="+op.name, func(b *testing.B) { benchPicks(b, op.op(fl), ks, seq, true) })
			}
		})
	}
}

// settleBatch is how many reservations benchSettleAlone makes, with the
// timer stopped, before it times their settlements.
const settleBatch = 1024

// benchSettleAlone times Settle(1) alone, on one hot key, for a settle
// beside an AllowN (issue 42's target): the reservations it settles,
// Reserve("hot", 2) each, are made in batches of settleBatch with the
// timer stopped. A refused reservation or a failed settlement fails the
// benchmark. Not for the sliding log, whose give-back lands only while
// the reservation's entry is the key's newest: in a batch all but the
// last would lapse, and time another path than a request's.
func benchSettleAlone(b *testing.B, l *floodgate.Limiter) {
	rs := make([]floodgate.Reservation, settleBatch)
	b.ReportAllocs()
	b.StopTimer()
	for done := 0; done < b.N; {
		k := min(settleBatch, b.N-done)
		for j := range rs[:k] {
			rs[j] = l.Reserve("hot", 2)
			if !rs[j].Decision().Allowed {
				b.Fatalf("a reservation under Plenty was refused: %+v", rs[j].Decision())
			}
		}
		b.StartTimer()
		for j := range rs[:k] {
			if _, err := rs[j].Settle(1); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		done += k
	}
}

// floodgateOf is the floodgate Limiter behind l.
func floodgateOf(b *testing.B, l Limiter) *floodgate.Limiter {
	fl, ok := l.(*floodgate.Limiter)
	if !ok {
		b.Fatalf("%T is not a *floodgate.Limiter", l)
	}
	return fl
}
