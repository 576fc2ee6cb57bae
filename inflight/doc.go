// Package inflight limits how many requests each client holds at once: at
// most Limit slots of a key are held at any instant, however many
// goroutines acquire them. A rate limit counts arrivals; this counts what
// is running, so that one client's slow requests cannot take every worker.
//
//	l, err := inflight.New(inflight.Config{Limit: 5})
//	...
//	slot, ok := l.TryAcquire(clientID)
//	if !ok {
//		// refuse: 429, with a Retry-After
//	}
//	defer slot.Release()
//
// # The contract
//
//   - Exact: no more than Limit slots of a key are ever held, nor more
//     than Global over all keys when it is set.
//   - A slot is released once. Release of a Slot, or of any copy of it,
//     gives the slot back the first time and is a no-op after that.
//   - Lock-free: an acquisition and a release are one CAS on the key's word
//     in the flat table, and allocate nothing for a key already held (a
//     Slot's bookkeeping is pooled). Only a key with waiters takes a lock.
//   - A hot key scales across cores: in a Limiter with no Queue and no
//     Global, a key whose word two cores fight over spreads, and a slot
//     given back stays parked on its core's lane of the key, for that
//     core's next request to take without writing the shared word. Parked
//     slots count as held, and a request that finds the key full takes one
//     from any lane before it is refused, so the answers are the same.
//     At most 64 keys of a Limiter are spread at once, and Sweep takes
//     the lanes of a key that took no slot from them since the previous
//     Sweep.
//   - Memory: a key costs its entry in the flat table (64 bytes, its
//     share of a table at half load with its pointer), and each slot it
//     holds a pooled 48-byte ticket, which keeps no table: slots held for
//     hours while other keys come and go keep nothing of the tables made
//     meanwhile. A spread key's lanes cost 64 bytes a P.
//   - A bounded, FIFO wait: Acquire queues for a slot when Config.Queue
//     allows, under a context; waiters of one key are served in the order
//     they came, and no later request takes a slot while one waits. A full
//     queue refuses at once (ErrFull). A waiter whose context ends takes
//     no slot and leaves no gap; one whose context is done before it
//     starts gets the context's error at once.
//   - Keys that hold something stay: a key with a slot held or a waiter
//     queued is never removed, by Sweep, the sweeper or MaxKeys. A key
//     removed while it held nothing comes back with every slot free, which
//     is the state it left: an in-flight count has no history. So, unlike
//     a rate limiter at MaxKeys, nothing is remembered of an evicted key,
//     and nothing needs to be. At MaxKeys, a new key whose shard holds
//     only busy keys is refused (ErrKeys) rather than evict one.
//   - Close wakes every waiter with ErrClosed. Slots held then stay held
//     until released, and Release works after Close.
//
// A slot that is never released is held for good: release it in a defer,
// or when a stream ends. For limits across processes, where a process may
// die holding slots, see the redislimit module, whose slots expire unless
// their holder renews them.
package inflight
