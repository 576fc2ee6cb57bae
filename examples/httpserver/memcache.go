package main

import (
	"errors"
	"fmt"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memcachelimit"
)

// memcacheFailureModes are -redis-failure's values with -memcache.
var memcacheFailureModes = map[string]memcachelimit.FailureMode{
	"local":  memcachelimit.FailLocal,
	"open":   memcachelimit.FailOpen,
	"closed": memcachelimit.FailClosed,
}

// memcacheStore makes the Store on the memcached at -memcache and sets
// it as cfg's, after checking that memcached answers. The Store is
// closed by the caller, after the middleware; its client holds no more
// than idle connections, which the process's end closes.
func memcacheStore(o options, cfg *httplimit.Config) (*memcachelimit.Store, error) {
	switch {
	case o.leaseMax != 0:
		return nil, errors.New("-lease-max needs -redis: memcached has no lease mode, and decides every request in a round trip")
	case o.inflight != 0:
		return nil, errors.New("-inflight with -memcache: memcached cannot hold a client's slots exactly (memcachelimit refuses them); use -redis, or no -inflight")
	}
	mode, ok := memcacheFailureModes[o.redisFailure]
	if !ok {
		return nil, fmt.Errorf("-redis-failure %q: want local, open or closed", o.redisFailure)
	}
	list := new(memcache.ServerList)
	if err := list.SetServers(o.memcache); err != nil {
		return nil, fmt.Errorf("-memcache %s: %w", o.memcache, err)
	}
	client := memcache.NewFromSelector(list)
	// Each read and write within a request's budget, as
	// memcachelimit.Config.Timeout asks; an idle connection kept for
	// each of many requests at once.
	client.Timeout, client.MaxIdleConns = o.redisTimeout, 64
	// A memcached that cannot be reached at start is a mistake in
	// -memcache more often than an outage: say so before listening.
	if err := client.Ping(); err != nil {
		return nil, fmt.Errorf("-memcache %s: %w", o.memcache, err)
	}
	store, err := memcachelimit.NewStore(client, memcachelimit.Config{Timeout: o.redisTimeout, FailureMode: mode})
	if err != nil {
		return nil, err
	}
	cfg.Store = store
	return store, nil
}
