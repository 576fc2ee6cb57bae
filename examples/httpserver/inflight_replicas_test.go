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
// slots (at least the one of a long hold of the test's own, taken before
// the workers began): they come back within -slot-ttl, and the two
// replicas left then serve 5 at once again (the workers go on until they
// do, however slow the machine).
func TestReplicasHoldAtMostInFlight(t *testing.T) {
	const limit, victim = 5, 0
	// Each replica renews its slots every third of -slot-ttl, and must
	// reach Redis within it, or a held slot expires and another replica
	// takes its place: -slot-ttl is ample beside a loaded machine's round
	// trips, more so under the emulator that -short serves.
	slotTTL, timeout := 2*time.Second, 500*time.Millisecond
	if testing.Short() {
		slotTTL, timeout = 4*time.Second, 1300*time.Millisecond
	}
	rdb := redistest.Start(t)
	var ss []*server
	for range replicas {
		// Refused while Redis cannot answer (closed): a replica deciding
		// alone (local) would hold 5 of its own.
		ss = append(ss, launch(t, "-redis", rdb.Addr, "-redis-timeout", timeout.String(), "-redis-failure", "closed",
			"-inflight", strconv.Itoa(limit), "-slot-ttl", slotTTL.String(), "-limit", "1000000", "-period", "1h"))
	}
	rc := redis.NewClient(&redis.Options{Addr: rdb.Addr})
	defer rc.Close()
	ctx := context.Background()

	// The victim holds a slot until it is killed: a request of a minute,
	// sent before any other, whose slot is then the client's only one on
	// Redis.
	longCtx, cancelLong := context.WithCancel(ctx)
	defer cancelLong()
	longDone := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequestWithContext(longCtx, "GET", ss[victim].url+"/hold?ms="+strconv.FormatInt(maxHold.Milliseconds(), 10), nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		longDone <- resp // nil once the victim is killed
	}()
	var key string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		select {
		case resp := <-longDone:
			t.Fatalf("the victim answered the long hold before it held a slot: %v", resp.Status)
		default:
		}
		if key == "" {
			if keys, _ := rc.Keys(ctx, "floodgate:*:slots:*").Result(); len(keys) == 1 {
				key = keys[0]
			}
		}
		if key != "" && rc.ZCard(ctx, key).Val() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("after a minute, the victim's long hold held no slot on Redis")
		}
	}

	// A watcher reads the client's slots on Redis while the workers run,
	// one ZCARD after another: the most it ever finds held.
	stop := make(chan struct{})
	var most atomic.Int64
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			default:
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
		served  overlap.Log
		refused atomic.Int64
		dead    atomic.Bool
		wg      sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := i % replicas
				if r == victim && dead.Load() {
					continue
				}
				at := time.Now().UnixNano()
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
				served.Add(at, iv)
			}
		}()
	}
	ended := false
	end := func() {
		if !ended {
			ended = true
			close(stop)
			wg.Wait()
			<-watched
		}
	}
	defer end()
	// waitFor waits until cond holds, polling, and fails the test if it
	// has not within two minutes: a bound on a broken run, not a speed.
	waitFor := func(what func() string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
			if t.Failed() {
				t.FailNow()
			}
			if time.Now().After(deadline) {
				t.Fatalf("after two minutes, still waiting for %s", what())
			}
		}
	}
	// Mid-run: the workers' requests have been served, and the victim
	// holds the long hold's slot, perhaps with some of theirs.
	waitFor(func() string { return fmt.Sprintf("20 requests served (%d)", served.Len()) },
		func() bool { return served.Len() >= 20 })
	dead.Store(true)
	if err := ss[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	killedAt := time.Now().UnixNano()
	ss[victim].done = true
	ss[victim].cmd.Wait()
	if resp := <-longDone; resp != nil {
		t.Fatalf("the victim answered the long hold before it was killed: %v", resp.Status)
	}
	// The victim renewed its slots last before it was killed: they expire
	// within -slot-ttl of the kill. The requests sent from then on find
	// every slot free of it, and the two replicas left hold 5 at once
	// again, as soon as the workers' demand fills them.
	expired := killedAt + int64(slotTTL)
	deepest := 0
	waitFor(func() string {
		return fmt.Sprintf("the replicas left to hold %d at once after the victim's slots expired (at most %d)", limit, deepest)
	}, func() bool {
		deepest = overlap.Deepest(served.AskedIn(expired, 1<<62))
		return deepest >= limit
	})
	end()
	all := served.AskedIn(0, 1<<62)
	if d := overlap.Deepest(all); d > limit {
		t.Errorf("the served intervals overlap %d deep, over -inflight %d", d, limit)
	}
	if m := most.Load(); m > limit {
		t.Errorf("Redis held %d of the client's slots at once, over %d", m, limit)
	}
	after := served.AskedIn(expired, 1<<62)
	t.Logf("%d served (%d sent after the expiry), %d refused; overlap %d deep (%d sent between the kill and the expiry, %d after); Redis held at most %d",
		len(all), len(after), refused.Load(), overlap.Deepest(all), overlap.Deepest(served.AskedIn(killedAt, expired)), overlap.Deepest(after), most.Load())
	for i, s := range ss {
		if i != victim {
			s.stop()
		}
	}
}
