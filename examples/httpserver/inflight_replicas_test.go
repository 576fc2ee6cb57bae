package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/overlap"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// heldInterval is when a replica held one GET /hold, as its X-Held
// says: the wall clock's Unix ns at the start and the end of the hold.
func heldInterval(resp *http.Response) (overlap.Interval, error) {
	var iv overlap.Interval
	from, to, ok := strings.Cut(resp.Header.Get("X-Held"), " ")
	iv.From, _ = strconv.ParseInt(from, 10, 64)
	iv.To, _ = strconv.ParseInt(to, 10, 64)
	if !ok || iv.From == 0 || iv.To < iv.From {
		return iv, fmt.Errorf("X-Held %q", resp.Header.Get("X-Held"))
	}
	return iv, nil
}

// TestReplicasHoldAtMostInFlight: three replicas with -inflight 5 on one
// redis-server, 64 workers as one client, each request a GET /hold of
// 200 ms, round-robin over the replicas. The intervals the replicas
// served overlap at most 5 deep, and Redis never holds more than 5 of
// the client's slots. One replica is killed with SIGKILL mid-run, holding
// slots: they come back within -slot-ttl (1 s), after which the two left
// serve 5 at once again.
func TestReplicasHoldAtMostInFlight(t *testing.T) {
	const limit, victim = 5, 0
	slotTTL := time.Second
	rdb := redistest.Start(t)
	var ss []*server
	for range replicas {
		// Refused while Redis cannot answer (closed): a replica deciding
		// alone (local) would hold 5 of its own.
		ss = append(ss, launch(t, "-redis", rdb.Addr, "-redis-timeout", "300ms", "-redis-failure", "closed",
			"-inflight", strconv.Itoa(limit), "-slot-ttl", slotTTL.String(), "-limit", "1000000", "-period", "1h"))
	}
	// A watcher reads the client's slots on Redis while the workers run,
	// one ZCARD after another: the most it ever finds held.
	rc := redis.NewClient(&redis.Options{Addr: rdb.Addr})
	defer rc.Close()
	stop := make(chan struct{})
	var most atomic.Int64
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		ctx := context.Background()
		var key string
		for {
			select {
			case <-stop:
				return
			default:
			}
			if key == "" {
				keys, _ := rc.Keys(ctx, "floodgate:*:slots:*").Result()
				if len(keys) == 1 {
					key = keys[0]
				}
				continue
			}
			n, err := rc.ZCard(ctx, key).Result()
			if err == nil && n > most.Load() {
				most.Store(n)
			}
		}
	}()

	tr := &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: time.Minute}
	var (
		mu       sync.Mutex
		served   []overlap.Interval
		killedAt atomic.Int64
		n        atomic.Int64
		refused  atomic.Int64
		dead     atomic.Bool
		wg       sync.WaitGroup
	)
	const killAfter, total = 20, 90
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; n.Load() < total; i++ {
				r := i % replicas
				if r == victim && dead.Load() {
					continue
				}
				resp, err := c.Get(ss[r].url + "/hold?ms=200")
				if err != nil {
					if r != victim || !dead.Load() {
						t.Errorf("replica %d: %v", r, err)
						return
					}
					continue
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusTooManyRequests:
					refused.Add(1)
					continue
				case http.StatusOK:
				default:
					t.Errorf("replica %d: %d", r, resp.StatusCode)
					return
				}
				iv, err := heldInterval(resp)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				served = append(served, iv)
				mu.Unlock()
				if n.Add(1) == killAfter {
					// Mid-run: the victim's workers are in their holds.
					dead.Store(true)
					killedAt.Store(time.Now().UnixNano())
					if err := ss[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
						t.Errorf("SIGKILL: %v", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-watched
	ss[victim].done = true
	ss[victim].cmd.Wait()
	if !dead.Load() {
		t.Fatal("the run ended before the kill")
	}
	if d := overlap.Deepest(served); d > limit {
		t.Errorf("the served intervals overlap %d deep, over -inflight %d", d, limit)
	}
	if m := most.Load(); m > limit {
		t.Errorf("Redis held %d of the client's slots at once, over %d", m, limit)
	}
	// Once the killed replica's slots have expired, the two left serve 5
	// at once again.
	var after []overlap.Interval
	for _, iv := range served {
		if iv.From > killedAt.Load()+int64(slotTTL)+int64(200*time.Millisecond) {
			after = append(after, iv)
		}
	}
	if d := overlap.Deepest(after); d != limit {
		t.Errorf("after the killed replica's slots expired, the replicas left held %d at once (of %d intervals), want %d", d, len(after), limit)
	}
	var meanwhile []overlap.Interval // begun between the kill and the expiry
	for _, iv := range served {
		if iv.From > killedAt.Load() && iv.From <= killedAt.Load()+int64(slotTTL) {
			meanwhile = append(meanwhile, iv)
		}
	}
	t.Logf("%d served (%d after the expiry), %d refused; overlap %d deep (%d between the kill and the expiry, %d after); Redis held at most %d",
		len(served), len(after), refused.Load(), overlap.Deepest(served), overlap.Deepest(meanwhile), overlap.Deepest(after), most.Load())
	for i, s := range ss {
		if i != victim {
			s.stop()
		}
	}
}
