package redislimit

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// serverFailed is called after a call failed for a reason that counts
// against the breaker (Redis's own failure). On a Redis Cluster the failure
// may be a master that died: its replica is promoted a few seconds later,
// but go-redis's ClusterClient learns of the new map only from a MOVED or
// ASK reply (a dead node sends none) or every ClusterStateReloadInterval
// (60 s by default). So the Store asks it to reload its map, at most once
// per ProbeEvery: decisions resume within about two probes of the
// promotion, with the client's default settings.
func (s *Store) serverFailed() {
	cc, ok := s.client.(*redis.ClusterClient)
	if !ok {
		return
	}
	now := s.set.clock.Now()
	last := s.reloaded.Load()
	if last != 0 && now-last < s.breaker.every {
		return
	}
	if s.reloaded.CompareAndSwap(last, now) {
		s.reloads.Add(1)
		cc.ReloadState(context.Background())
	}
}
