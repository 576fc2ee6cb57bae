package storekit

import (
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/plan"
	"github.com/floodgate-go/floodgate/internal/storelink"
)

// Plan is one Decide's asks, prepared (see the package documentation):
// Prepare fills it from the asks, and the backend decides its Live asks.
// Its fields, for n asks (N), each index an ask:
//
//   - Of is the ask that decides each ask: itself, or the first before it
//     of the same policy and key, whose answer it receives.
//   - Cost is, for an ask that decides, the summed cost of every ask it
//     decides (math.MaxInt64 past that).
//   - Bad marks the asks that decide and whose Cost is below 1 or above
//     their policy's capacity: they refuse before anything is charged.
//   - Shadow marks the shadow asks.
//   - Live are the asks that decide and are not Bad, in order (NLive of
//     them): those the backend decides against its state.
//   - Refused is the first Bad enforced ask, or -1: the request is then
//     refused before the backend is asked, and nothing is charged.
//   - ShadowsRefused says a shadow ask is Bad: the shadows refuse before
//     the backend is asked, and the backend decides the enforced asks
//     alone, charging no shadow.
//
// Prepare(n, same, shadow, cost, capacity) fills the Plan for n asks:
// same(i, j) reports whether asks j < i name one policy and key; shadow,
// cost and capacity say what they say of ask i. It is an error to give
// no ask, more than floodgate.MaxPolicies, or two asks of one policy and
// key of which one is a shadow and the other is not. Refusal(live) is
// the index that Decide returns, from the index in Live of the ask that
// refused among the live ones (-1 for none): the first enforced ask that
// refused, else the first shadow, a Bad one included, else -1.
//
// The zero Plan is ready for Prepare, and a Plan holds no pointer: a
// backend keeps it on its stack.
type Plan = plan.Plan

// Verdict is the index of the Decision that stands for a request that
// Decide decided (see floodgate.Store's Decide): all holds each ask's
// answer and refused is the index that Decide returns. It is the
// refusing ask's if that is enforced; with only shadows refusing, the
// most restrictive enforced answer (the refusing shadow's when every ask
// is a shadow); with none refusing, the most restrictive of all: the
// fewest remaining, the longest ResetAfter among equals, the first of
// equals.
func Verdict(asks []floodgate.Ask, all []floodgate.Decision, refused int) int {
	return plan.Verdict(len(all), refused, func(i int) bool { return asks[i].Shadow },
		func(i int) int64 { return all[i].Remaining }, func(i int) time.Duration { return all[i].ResetAfter })
}

// Owing is the index of the Decision that a Settler's Charge or Settle
// answers with, of all, each ask's: the ask that owes most, else the one
// with the fewest remaining, else the longest ResetAfter (the first of
// equals), among the asks that are not shadows (every ask, if all are);
// 0 for none.
func Owing(asks []floodgate.Ask, all []floodgate.Decision) int {
	return plan.Owing(len(all), func(i int) bool { return asks[i].Shadow }, func(i int) plan.Answer {
		return plan.Answer{Owed: all[i].Owed, Remaining: all[i].Remaining, ResetAfter: all[i].ResetAfter}
	})
}

// CheckSettle checks a Settle's arguments against h before anything is
// charged, as floodgate's own Settlers do: floodgate.ErrNotReserved for a
// Hold that Reserve did not admit (or a zero or nil one),
// floodgate.ErrSettled for one settled already, and an error for a count
// of asks that is not Reserve's or for a negative cost.
func CheckSettle(asks []floodgate.Ask, h *floodgate.Hold) error {
	return checkSettle(asks, h)
}

// checkSettle is floodgate's own check (see storelink).
var checkSettle = storelink.CheckSettle.(func([]floodgate.Ask, *floodgate.Hold) error)

// SlotHolder is a slot that a SlotStore holds, outside this process or
// beside it: its Release gives the slot back once, and reports whether
// this call did. A floodgate.Slot compares its holder with ==: give a
// comparable one, such as a pointer.
type SlotHolder interface {
	Release() bool
}

// HeldSlot returns the floodgate.Slot of h, for a SlotStore's Acquire:
// its Release is h's (a nil h gives the zero Slot, which holds nothing).
func HeldSlot(h SlotHolder) floodgate.Slot { return heldSlot(h) }

// heldSlot is floodgate's constructor (see storelink).
var heldSlot = storelink.HeldSlot.(func(interface{ Release() bool }) floodgate.Slot)
