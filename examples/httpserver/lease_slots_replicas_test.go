//go:build unix

package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/overlap"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The lease-slots tests' replicas: -inflight leaseLimit, each leasing
// -lease-slots leaseAhead ahead, on one redis-server, driven by 64
// workers as one client, 32 on each replica, each sending GET /hold of
// the run's hold again as soon as it is answered.
const (
	leaseLimit = 6
	leaseAhead = 2
)

// slotRun is one run of them.
type slotRun struct {
	t           *testing.T
	rdb         *redistest.Server
	rc          *redis.Client
	ss          []*server
	ttl, hold   time.Duration
	key         string    // the client's slots on Redis
	prefix      [2]string // each replica's members begin with it
	asked, held [2]overlap.Log
	stop        chan struct{}
	done        sync.WaitGroup
}

// wall is the wall clock's Unix ns, X-Held's clock.
func wall() int64 { return time.Now().UnixNano() }

func startSlotRun(t *testing.T) *slotRun {
	// A renewal must reach Redis within -slot-ttl, or the slots it renews
	// expire while held, which no test of a loss may count on: -slot-ttl
	// is ample beside a loaded machine's round trips, more so under the
	// emulator that -short serves.
	r := &slotRun{t: t, rdb: redistest.Start(t), ttl: 1500 * time.Millisecond, hold: 100 * time.Millisecond, stop: make(chan struct{})}
	timeout := 500 * time.Millisecond
	if testing.Short() {
		r.ttl, timeout, r.hold = 4*time.Second, 1300*time.Millisecond, 200*time.Millisecond
	}
	r.rc = redis.NewClient(&redis.Options{Addr: r.rdb.Addr})
	t.Cleanup(func() { r.rc.Close() })
	for range 2 {
		// Refused while Redis cannot answer (closed): a replica deciding
		// alone (local) would hold leaseLimit of its own.
		r.ss = append(r.ss, launch(t, "-redis", r.rdb.Addr, "-redis-timeout", timeout.String(), "-redis-failure", "closed",
			"-inflight", strconv.Itoa(leaseLimit), "-slot-ttl", r.ttl.String(), "-lease-slots", strconv.Itoa(leaseAhead),
			"-limit", "1000000", "-period", "1h"))
	}
	// Each replica alone takes a slot (and the slots ahead with it), so
	// that the members on Redis name it.
	ctx := context.Background()
	for i, s := range r.ss {
		resp := getHold(t, s.url, 0)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("replica %d: %d", i, resp.StatusCode)
		}
		if r.key == "" {
			keys, err := r.rc.Keys(ctx, "floodgate:*:slots:*").Result()
			if err != nil || len(keys) != 1 {
				t.Fatalf("the client's slots on Redis: %q, %v", keys, err)
			}
			r.key = keys[0]
		}
		ms, err := r.rc.ZRange(ctx, r.key, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if p := prefixOf(m); p != r.prefix[0] {
				r.prefix[i] = p
			}
		}
		if r.prefix[i] == "" {
			t.Fatalf("replica %d held no slot ahead after a request: Redis holds %q", i, ms)
		}
	}
	tr := &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers}
	c := &http.Client{Transport: tr, Timeout: time.Minute}
	for w := range workers {
		r.done.Add(1)
		go r.work(c, w%2)
	}
	t.Cleanup(func() {
		r.end()
		tr.CloseIdleConnections()
	})
	return r
}

// prefixOf is the replica's part of a member's name.
func prefixOf(member string) string {
	p, _, _ := strings.Cut(member, ":")
	return p
}

// getHold sends GET /hold?ms=ms to url, and reads the answer.
func getHold(t *testing.T, url string, ms time.Duration) *http.Response {
	t.Helper()
	return get(t, url+"/hold?ms="+strconv.FormatInt(ms.Milliseconds(), 10), "")
}

// work is one worker on replica i.
func (r *slotRun) work(c *http.Client, i int) {
	defer r.done.Done()
	url := r.ss[i].url + "/hold?ms=" + strconv.FormatInt(r.hold.Milliseconds(), 10)
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		at := wall()
		resp, err := c.Get(url)
		if err != nil {
			r.t.Errorf("replica %d: %v", i, err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusTooManyRequests:
			r.asked[i].Add(at, overlap.Interval{From: at, To: at})
		case http.StatusOK:
			iv, err := heldInterval(resp)
			if err != nil {
				r.t.Error(err)
				return
			}
			r.asked[i].Add(at, iv)
			r.held[i].Add(at, iv)
		default:
			r.t.Errorf("replica %d: %d", i, resp.StatusCode)
			return
		}
	}
}

// end stops the workers, and waits for them.
func (r *slotRun) end() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	r.done.Wait()
}

// served is the intervals of both replicas' requests sent in [from, to).
func (r *slotRun) served(from, to int64) []overlap.Interval {
	return append(r.held[0].AskedIn(from, to), r.held[1].AskedIn(from, to)...)
}

// waitFor waits until cond holds, and fails the test if it has not
// within two minutes: a bound on a broken run, not a speed.
func (r *slotRun) waitFor(what string, cond func() bool) {
	r.t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			r.t.Fatalf("after two minutes, still waiting for %s", what)
		}
	}
}

// members returns the client's members on Redis by replica.
func (r *slotRun) members(ms []string) (by [2][]string) {
	for _, m := range ms {
		for i, p := range r.prefix {
			if prefixOf(m) == p {
				by[i] = append(by[i], m)
			}
		}
	}
	return by
}

// finish waits until the requests sent from x on make a SlotTTL of the
// run and at least 2 × the limit, and until since, the requests of
// replica i sent from since on number at least n; then it stops the
// workers, and fails the test if the requests sent from x on held slots
// that overlap more than the limit deep.
func (r *slotRun) finish(lossAt, x int64, i int, since int64, n int, what string) {
	r.t.Helper()
	r.waitFor("a SlotTTL of requests from the bound on", func() bool {
		return wall() > max(x, since)+int64(r.ttl) && len(r.served(x, 1<<62)) >= 2*leaseLimit && len(r.asked[i].AskedIn(since, 1<<62)) >= n
	})
	r.end()
	after := r.served(x, 1<<62)
	if d := overlap.Deepest(after); d > leaseLimit {
		r.t.Errorf("%s: the requests sent from one -slot-ttl and one hold on held %d slots at once, over -inflight %d", what, d, leaseLimit)
	}
	r.t.Logf("%s: %d served after the loss and before the bound, %d from the bound on; most held at once: %d sent before the loss, %d in between, %d from the bound on, %d of all together (-inflight %d)",
		what, len(r.served(lossAt, x)), len(after), overlap.Deepest(r.served(0, lossAt)), overlap.Deepest(r.served(lossAt, x)),
		overlap.Deepest(after), overlap.Deepest(r.served(0, 1<<62)), leaseLimit)
}

// TestReplicasLeaseSlotsAfterLoss: two replicas with -inflight 6 and
// -lease-slots 2 on one redis-server, 64 workers holding GET /hold as
// one client, and Redis loses the client's slots. The requests sent one
// -slot-ttl and one hold after the loss never hold more than 6 at once.
//
// flushall: one FLUSHALL mid-run, once both replicas hold slots (their
// members on Redis, read in the transaction that flushes them).
//
// sigstop: one replica is stopped (SIGSTOP) while it holds slots, past
// -slot-ttl, until the other has taken every place its members had on
// Redis; then it continues (SIGCONT), and answers requests again.
func TestReplicasLeaseSlotsAfterLoss(t *testing.T) {
	ctx := context.Background()
	warm := func(r *slotRun) {
		r.waitFor("a warm run", func() bool { return len(r.held[0].AskedIn(0, 1<<62)) >= 20 && len(r.held[1].AskedIn(0, 1<<62)) >= 20 })
	}
	t.Run("flushall", func(t *testing.T) {
		r := startSlotRun(t)
		warm(r)
		var lossAt int64
		var atLoss [2][]string
		// One FLUSHALL, once both replicas hold slots: it runs only if the
		// client's slots did not change after they were read (WATCH).
		r.waitFor("a FLUSHALL while both replicas held slots", func() bool {
			err := r.rc.Watch(ctx, func(tx *redis.Tx) error {
				ms, err := tx.ZRange(ctx, r.key, 0, -1).Result()
				if err != nil {
					return err
				}
				if atLoss = r.members(ms); len(atLoss[0]) == 0 || len(atLoss[1]) == 0 {
					return redis.TxFailedErr
				}
				_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error { return p.FlushAll(ctx).Err() })
				return err
			}, r.key)
			if err != nil && err != redis.TxFailedErr {
				t.Fatal(err)
			}
			lossAt = wall()
			return err == nil
		})
		t.Logf("FLUSHALL removed %d members of one replica and %d of the other", len(atLoss[0]), len(atLoss[1]))
		r.finish(lossAt, lossAt+int64(r.ttl+r.hold), 0, 0, 0, "flushall")
	})

	t.Run("sigstop", func(t *testing.T) {
		r := startSlotRun(t)
		const a = 0
		warm(r)
		var stopAt int64
		var theirs []string
		// A test that fails while the replica is stopped lets it continue,
		// so that its workers and its SIGTERM end (cleanups run last first).
		t.Cleanup(func() { _ = r.ss[a].cmd.Process.Signal(syscall.SIGCONT) })
		r.waitFor("a SIGSTOP while the replica held slots", func() bool {
			signalWait(t, r.ss[a], syscall.SIGSTOP)
			stopAt = wall()
			ms, err := r.rc.ZRange(ctx, r.key, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			if theirs = r.members(ms)[a]; len(theirs) > 0 {
				return true
			}
			signalWait(t, r.ss[a], syscall.SIGCONT)
			return false
		})
		r.waitFor("the other replica to take the places of the stopped one's members, past -slot-ttl", func() bool {
			if wall() < stopAt+int64(r.ttl+r.hold) {
				return false
			}
			scores, err := r.rc.ZMScore(ctx, r.key, theirs...).Result()
			if err != nil {
				t.Fatal(err)
			}
			return !slices.ContainsFunc(scores, func(sc float64) bool { return sc != 0 })
		})
		signalWait(t, r.ss[a], syscall.SIGCONT)
		resumeAt := wall()
		t.Logf("replica %d held %d members when it stopped, and was stopped %v", a, len(theirs), time.Duration(resumeAt-stopAt))
		// The stopped replica answers at least leaseAhead+1 requests sent
		// after it continued: as many as it could have served from slots
		// ahead that it held when it stopped.
		r.finish(stopAt, stopAt+int64(r.ttl+r.hold), a, resumeAt, leaseAhead+1, "sigstop")
	})
}

// signalWait sends sig to s's process, and returns once the process is
// stopped (SIGSTOP) or running again (SIGCONT), as its state says.
func signalWait(t *testing.T, s *server, sig syscall.Signal) {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%v: %v", sig, err)
	}
	stopped := sig == syscall.SIGSTOP
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		state, err := processState(s.cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if (state == "T") == stopped {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v: the process's state is still %q after a minute", sig, state)
		}
	}
}

// processState is the one-letter state of process pid: T when stopped.
func processState(pid int) (string, error) {
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		// pid (comm) state ...: comm may hold spaces and parentheses.
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		if f := strings.Fields(rest); len(f) > 0 {
			return f[0], nil
		}
	}
	out, err := exec.Command("ps", "-o", "state=", "-p", strconv.Itoa(pid)).Output()
	if err != nil {
		return "", err
	}
	state := strings.TrimSpace(string(out))
	if state == "" {
		return "", errors.New("ps gave no state")
	}
	return state[:1], nil
}
