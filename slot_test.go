package floodgate_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/inflight"
)

func TestLocalStoreSlots(t *testing.T) {
	s := floodgate.NewLocalStore(floodgate.LocalStoreConfig{IdleTTL: floodgate.Never})
	defer s.Close()
	var _ floodgate.SlotStore = s
	bads := []int{0, -1}
	if over := int64(inflight.MaxLimit) + 1; over <= math.MaxInt {
		bads = append(bads, int(over))
	}
	for _, bad := range bads {
		if _, err := s.SlotPolicy("bad", bad); err == nil || !strings.Contains(err.Error(), "Limit must be 1 to") {
			t.Errorf("SlotPolicy with limit %d: %v", bad, err)
		}
	}
	p, err := s.SlotPolicy("route\x00\x00conc", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SlotPolicy("route\x00\x00conc", 3); !errors.Is(err, floodgate.ErrSlotName) {
		t.Errorf("a second slot policy of one name: %v", err)
	}
	if _, err := s.Policy("route\x00\x00conc", "", floodgate.Rule{Limit: 1, Period: time.Second}); err == nil {
		t.Error("a rate policy took the name of a live slot policy")
	}
	if _, err := s.Policy("rate", "", floodgate.Rule{Limit: 1, Period: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SlotPolicy("rate", 1); !errors.Is(err, floodgate.ErrSlotName) {
		t.Errorf("a slot policy took the name of a live rate policy: %v", err)
	}

	ctx := context.Background()
	a, ok, err := p.Acquire(ctx, "client")
	if !ok || err != nil || a.IsZero() {
		t.Fatalf("first Acquire: %v, %v", ok, err)
	}
	b, ok, _ := p.Acquire(ctx, "client")
	if !ok {
		t.Fatal("second Acquire refused under a limit of 2")
	}
	if _, ok, err := p.Acquire(ctx, "client"); ok || err != nil {
		t.Fatalf("a third slot of 2: %v, %v", ok, err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, ok, err := p.Acquire(done, "other"); ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a done context: %v, %v", ok, err)
	}
	copied := a
	if !a.Release() || copied.Release() {
		t.Fatal("a slot released other than once")
	}
	if err := p.SetLimit(1); err != nil || p.Limit() != 1 {
		t.Fatalf("SetLimit(1): %v, Limit %d", err, p.Limit())
	}
	if _, ok, _ := p.Acquire(ctx, "client"); ok {
		t.Fatal("a slot above a lowered limit")
	}
	samples := p.AppendCounts(nil)
	if len(samples) != 2 || samples[0].Metric != counts.Keys || samples[0].Value != 1 || samples[1].Metric != counts.KeysMax {
		t.Errorf("counts: %+v", samples)
	}
	if s.InFlight(p) == nil || s.InFlight(p).Held("client") != 1 {
		t.Error("InFlight does not give the policy's Limiter")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if !b.Release() {
		t.Error("a slot held at Close did not release")
	}
	if _, err := s.SlotPolicy("route\x00\x00conc", 2); err != nil {
		t.Errorf("the name of a closed policy: %v", err)
	}
	var zero floodgate.Slot
	if zero.Release() || !zero.IsZero() {
		t.Error("the zero Slot released something")
	}
}
