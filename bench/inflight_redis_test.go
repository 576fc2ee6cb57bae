package bench

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/redislimit"
	"github.com/redis/go-redis/v9"
)

// stripeScript is a concurrent-requests limiter as Stripe published it
// ("Scaling your API with rate limiters", 2017): a sorted set per client
// of its requests in flight, scored by their start on the application's
// clock; a request prunes the entries older than 60 s, counts the rest,
// and adds itself if there is room; its end removes it (ZREM). Written
// here from that description: entries outlive a dead process by up to
// 60 s, and a request that runs longer than that loses its entry while it
// runs.
var stripeScript = redis.NewScript(`
local key, capacity, now, id, ttl = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], 60
redis.call('zremrangebyscore', key, '-inf', now - ttl)
local count = redis.call('zcard', key)
if count < capacity then
  redis.call('zadd', key, now, id)
  redis.call('expire', key, ttl)
  return 1
end
return 0
`)

// inflightRedisPeers are BenchmarkInFlightRedis's implementations: each
// round takes a slot of a client and gives it back. calls is the round
// trips so far (nil: two a round, the acquisition and the release).
var inflightRedisPeers = []struct {
	name string
	make func(b *testing.B, c *redis.Client) redisPeer
}{
	{"floodgate", func(b *testing.B, c *redis.Client) redisPeer { return slotPeer(b, c, redislimit.Lease{}) }},
	{"floodgate-lease", func(b *testing.B, c *redis.Client) redisPeer { return slotPeer(b, c, redislimit.Lease{Slots: 4}) }},
	{"stripe", func(b *testing.B, c *redis.Client) redisPeer {
		var seq atomic.Int64
		return redisPeer{check: func(ctx context.Context, key string) (bool, error) {
			id := strconv.FormatInt(seq.Add(1), 36)
			ok, err := stripeScript.Run(ctx, c, []string{"stripe:" + key}, inflightLimit, time.Now().Unix(), id).Int()
			if err != nil || ok != 1 {
				return false, err
			}
			return true, c.ZRem(ctx, "stripe:"+key, id).Err()
		}, close: func() {}}
	}},
}

// slotPeer is redislimit's SlotPolicy on c, with lease as given.
func slotPeer(b *testing.B, c *redis.Client, lease redislimit.Lease) redisPeer {
	s, err := redislimit.NewStore(c, redislimit.Config{Timeout: time.Second, FailureMode: redislimit.FailClosed, Lease: lease})
	if err != nil {
		b.Fatal(err)
	}
	p, err := s.SlotPolicy("conc", inflightLimit)
	if err != nil {
		b.Fatal(err)
	}
	return redisPeer{
		check: func(ctx context.Context, key string) (bool, error) {
			sl, ok, err := p.Acquire(ctx, key)
			sl.Release()
			return ok, err
		},
		calls: func() int64 { return s.Stats().Calls },
		close: func() {
			if err := s.Close(); err != nil {
				b.Error(err)
			}
		},
	}
}

// BenchmarkInFlightRedis times a slot of an in-flight limit taken and
// given back on one redis-server that it starts on loopback (issue 44):
// floodgate's redislimit SlotPolicy (its calls in flight pipelined
// together; floodgate-lease with Lease.Slots 4) beside the Stripe-style sorted-set script (a go-redis
// EVALSHA, then a ZREM), from 64 goroutines on random clients of 1,000
// (1K-keys) or one client (hotkey). Each figure is rounds: ns/op is wall
// time per round, checks/s rounds per second, and rt/op the round trips a
// round made (floodgate's Calls; the script's two). Then it measures
// floodgate's renewals: 1,000 slots held, over 1,000 clients or over 10,
// on a SlotTTL of 300 ms (a renewal every 100 ms), for 2 s, and reports
// the renewal commands a second per thousand slots held, and the
// pipelines (round trips) a second, scaled to the default SlotTTL of
// 10 s (renewal-cmds/s/1000slots, renewal-rt/s). Without redis-server it
// skips.
func BenchmarkInFlightRedis(b *testing.B) {
	if _, err := redistest.Find(); err != nil {
		b.Skip(err)
	}
	srv := redistest.Start(b)
	keys := make([]string, redisKeys)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	for _, sc := range []struct {
		name string
		keys []string
	}{{"1K-keys", keys}, {"hotkey", keys[:1]}} {
		for _, peer := range inflightRedisPeers {
			b.Run("scenario="+sc.name+"/impl="+peer.name+"/g=64", func(b *testing.B) {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 64})
				defer c.Close()
				p := peer.make(b, c)
				defer p.close()
				var before int64
				if p.calls != nil {
					before = p.calls()
				}
				rounds := benchRedis(b, 64, p.check, nil, sc.keys)
				rt := 2.0
				if p.calls != nil {
					rt = float64(p.calls()-before) / float64(rounds)
				}
				b.ReportMetric(rt, "rt/op")
			})
		}
	}
	for _, clients := range []int{1000, 10} {
		b.Run("scenario=renewal-1000-slots-"+strconv.Itoa(clients)+"-clients/impl=floodgate", func(b *testing.B) {
			benchRenewals(b, srv.Addr, clients)
		})
	}
}

// benchRenewals holds 1,000 slots over clients clients on a Store with a
// SlotTTL of 300 ms for 2 s, and reports its renewal commands and
// pipelines a second, scaled to the default SlotTTL.
func benchRenewals(b *testing.B, addr string, clients int) {
	const held, ttl, span = 1000, 300 * time.Millisecond, 2 * time.Second
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer c.Close()
	s, err := redislimit.NewStore(c, redislimit.Config{Timeout: 100 * time.Millisecond, SlotTTL: ttl, FailureMode: redislimit.FailClosed})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	p, err := s.SlotPolicy("renewed", held)
	if err != nil {
		b.Fatal(err)
	}
	slots := make([]floodgate.Slot, 0, held)
	for i := range held {
		sl, ok, err := p.Acquire(context.Background(), "client-"+strconv.Itoa(i%clients))
		if !ok || err != nil {
			b.Fatalf("slot %d: %v, %v", i, ok, err)
		}
		slots = append(slots, sl)
	}
	// One run of the span, whatever b.N (the first, of 1, outlasts any
	// bench time a pass uses): the renewals run on the Store's own timer.
	before := s.Stats()
	start := time.Now()
	time.Sleep(span)
	elapsed := time.Since(start)
	after := s.Stats()
	for _, sl := range slots {
		sl.Release()
	}
	scale := float64(ttl) / float64(10*time.Second) // to the default SlotTTL's rate
	cmds := float64(after.SlotRenewCommands-before.SlotRenewCommands) / elapsed.Seconds() * scale
	b.ReportMetric(cmds*1000/held, "renewal-cmds/s/1000slots")
	b.ReportMetric(float64(after.SlotRenewals-before.SlotRenewals)/elapsed.Seconds()*scale, "renewal-rt/s")
}
