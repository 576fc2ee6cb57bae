//go:build !race

package inflight

import (
	"runtime"
	"sync"
)

// Tickets are kept per P (the scheduler's processor), a few each: a
// goroutine pinned to its P (runtime.procPin, which sync.Pool pins with
// too, and which the runtime keeps for outside packages: go.dev/issue/67401)
// takes one from its P's cache and puts one back there with plain loads
// and stores, as sync.Pool keeps its private object: no atomic
// instruction, no lock, and a third of sync.Pool's instructions, which
// on 1M keys lets the next request's cache misses overlap this one's. A
// cache found empty makes a ticket; one found full lets the ticket go to
// the garbage collector (a stale Slot may still point at it: its
// generation is past). A ticket belongs to no P: it may be released on
// another than it was taken on. A P whose id is past the caches made at
// start (GOMAXPROCS raised since) uses a sync.Pool. Under the race
// detector, which cannot see the order that pinning gives, every ticket
// goes through the sync.Pool (tickets_race.go).

const perP = 8

// ticketCache is one P's free tickets, on lines of its own.
type ticketCache struct {
	n int
	t [perP]*ticket
	_ [64 - 8]byte
}

var (
	caches  = make([]ticketCache, max(runtime.GOMAXPROCS(0), runtime.NumCPU()))
	spilled = sync.Pool{New: func() any { return new(ticket) }}
)

// getTicket returns a free ticket.
func getTicket() *ticket {
	p := procPin()
	if p >= len(caches) {
		procUnpin()
		return spilled.Get().(*ticket)
	}
	c := &caches[p]
	if c.n == 0 {
		procUnpin()
		return new(ticket)
	}
	c.n--
	k := c.t[c.n]
	c.t[c.n] = nil
	procUnpin()
	return k
}

// putTicket keeps a released ticket for reuse, and returns the caller's
// P, as pid does.
func putTicket(k *ticket) int {
	p := procPin()
	if p >= len(caches) {
		procUnpin()
		spilled.Put(k)
		return p
	}
	c := &caches[p]
	if c.n < perP {
		c.t[c.n] = k
		c.n++
	}
	procUnpin()
	return p
}
