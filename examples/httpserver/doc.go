// Command httpserver is a small HTTP server behind floodgate's httplimit
// middleware: GET /hello, GET /other and GET /hold each allow every
// client -limit requests per -period, counted apart.
//
//	httpserver -addr 127.0.0.1:8080 -limit 5 -period 1m -metrics 127.0.0.1:9090
//
// Once it listens it prints exactly one line to standard output,
// "listening on HOST:PORT", and with -metrics a second one, "metrics on
// HOST:PORT", where GET /metrics serves the middleware's counts in
// Prometheus's format (package prommetrics), on a listener of its own so
// that clients of the server never reach it. With port 0 it picks a free
// port. It logs to standard error, and stops on SIGINT or SIGTERM.
//
// It sets both of the middleware's memory bounds (MaxKeys and IdleTTL, on
// the floodgate.LocalStore it passes as the Store), and ReadHeaderTimeout
// and IdleTimeout on its server, explicitly.
// -trusted-proxies (comma-separated CIDRs) and -ipv6-prefix set the
// middleware's client identity. It is in a module of its own, so that
// floodgate's core module never requires client_golang, go-redis or
// gomemcache.
//
// # A budget of costs known at the end
//
// With -budget N, GET /spend?n=K answers as a model's stream does: in
// three flushed parts, and reports its cost, K units, only when it ends.
// Each client has a budget of N units per -period: a request is admitted
// while the client owes nothing (its cost is not known yet), and charged
// K when it ends, so that a client whose last reply ran past what was
// left owes the rest, and is refused until the budget has paid it back
// (httplimit's Policy.After). Its RateLimit header shows the budget
// before the request's own cost:
//
//	httpserver -budget 1000 -period 1h &
//	curl -i 'localhost:8080/spend?n=600'   # 200, RateLimit r=1000
//	curl -i 'localhost:8080/spend?n=600'   # 200, r=400: now owes 200
//	curl -i 'localhost:8080/spend?n=600'   # 429, until the 200 are paid back
//
// With -redis every replica shares the budget.
//
// # Requests in flight
//
// With -inflight N, a client holds at most N requests at once on each
// endpoint (httplimit's Policy.InFlight): a request takes a slot when it
// is admitted and gives it back when its handler returns, and one more is
// a 429 with Retry-After: 1 and no RateLimit headers. GET /hold?ms=D
// holds a request D ms (0 to 60000) before it answers, so that it can be
// tried with curl:
//
//	httpserver -inflight 2 &
//	curl 'localhost:8080/hold?ms=5000' & curl 'localhost:8080/hold?ms=5000' &
//	curl -i 'localhost:8080/hold?ms=0'   # 429 while the two are held
//
// With -redis, N holds across every replica: a slot is a member of the
// client's sorted set on Redis, which each replica renews while it holds
// it. A replica killed with SIGKILL gives its slots back within
// -slot-ttl (10s by default), when they expire. -lease-slots K (1 to 64)
// has a replica take up to K of a client's slots ahead with the one it
// needs, and keep up to K of them when its requests end, so that the
// client's next requests take one with no round trip
// (redislimit.Lease.Slots). A slot kept ahead is served only while Redis
// is known to hold it: when Redis loses its data (FLUSHALL, a restart, a
// failover) or a replica was stopped past -slot-ttl, the replicas drop
// the slots it lost, and are back within N at once after at most
// -slot-ttl plus the longest request held; the requests that held a lost
// slot run to their end meanwhile.
//
// # Replicas on Redis
//
// With -redis HOST:PORT the limits live on that Redis server
// (redislimit.NewStore as the middleware's Config.Store), so that every
// replica started with the same -redis, -limit and -period shares one
// allowance per client and endpoint:
//
//	httpserver -redis localhost:6379 -addr :8081 -limit 100 -period 1m
//	httpserver -redis localhost:6379 -addr :8082 -limit 100 -period 1m
//
// A Redis that does not answer PING within 5 seconds is an error at
// start. Then each request is decided in one round trip to Redis, unless
// -lease-max N (N > 0) turns lease mode on: a replica takes up to N of a
// busy client's units ahead and spends them with no round trip
// (redislimit.Lease). -redis-timeout (100ms) is each request's budget for
// Redis; past it, or while Redis is away, -redis-failure decides: local
// (the default: each replica applies -limit on its own, so three replicas
// admit up to three times the limit), open (admit) or closed (refuse).
// The memory bounds are then Redis's business: each client's state there
// expires once it would be full again.
//
// # Replicas on memcached
//
// With -memcache HOST:PORT instead (not with -redis), the limits live on
// that memcached (memcachelimit.NewStore as the middleware's
// Config.Store), shared by every replica started with the same
// -memcache, -limit and -period, and exact: each request is decided by
// a gets and a cas, and a replica that loses a race reads again, so no
// update is lost. A memcached that does not answer at start is an
// error; -redis-timeout and -redis-failure then apply to it as to Redis.
// memcached has no lease mode and holds no in-flight slots: -lease-max
// and -inflight are errors with -memcache. A memcached restarted
// forgets every count, and each client starts afresh; a replica killed
// with SIGKILL holds nothing, so the others go on exactly. With -metrics
// the Store's counts are under limiter="httpserver-memcache".
//
//	httpserver -memcache localhost:11211 -addr :8081 -limit 100 -period 1m
//	httpserver -memcache localhost:11211 -addr :8082 -limit 100 -period 1m
//
// On SIGINT or SIGTERM the server stops taking requests and finishes
// those in flight (http.Server.Shutdown, within 5 seconds), then closes
// the middleware, which gives the units it leased ahead back to Redis, and
// then its Redis client. A replica killed with SIGKILL gives nothing back:
// its clients' unspent units stay charged until Redis would have refilled
// them (less for the clients, never more). With -metrics it also serves
// the Store's own counts, under limiter="httpserver-redis": its round
// trips to Redis, their failures, and the requests its -redis-failure
// decided.
package main
