//go:build race

package inflight

import "sync"

// Under the race detector every ticket goes through a sync.Pool, which
// tells the detector the order between a ticket's put and its next get
// (see tickets.go).
var tickets = sync.Pool{New: func() any { return new(ticket) }}

func getTicket() *ticket      { return tickets.Get().(*ticket) }
func putTicket(k *ticket) int { tickets.Put(k); return pid() }
