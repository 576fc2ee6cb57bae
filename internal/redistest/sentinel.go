package redistest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Sentinel is a master, its replica and the Sentinels that watch them
// under MasterName, with a quorum of a majority of them and a master
// declared down after half a second, so that a killed master's replica
// takes over within a few seconds: redis-server processes on loopback,
// with no persistence. They stop when the test ends.
type Sentinel struct {
	Master, Replica, Sentinel *Server   // Sentinel is the first of Sentinels
	Sentinels                 []*Server // every Sentinel
	MasterName                string
}

// StartSentinel starts the master, then its replica, and once the
// replica's link is up, one Sentinel; it returns once the Sentinel knows
// the replica. It skips the test where redis-server is missing, as Start
// does.
func StartSentinel(tb testing.TB) *Sentinel { tb.Helper(); return StartSentinels(tb, 1) }

// StartSentinels is StartSentinel with n Sentinels, whose quorum is
// n/2+1; it returns once every one knows the replica and the others.
func StartSentinels(tb testing.TB, n int) *Sentinel {
	tb.Helper()
	bin := mustFind(tb)
	dir := tb.TempDir() // before the servers: its cleanup runs after theirs
	s := &Sentinel{MasterName: "mymaster"}
	// Each in a folder of its own: a replica writes the master's data
	// there when it syncs.
	s.Master = launch(tb, bin, func(int) []string { return []string{"--dir", tb.TempDir()} })
	s.Replica = launch(tb, bin, func(int) []string {
		return []string{"--dir", tb.TempDir(), "--replicaof", "127.0.0.1", strconv.Itoa(s.Master.port)}
	})
	deadline := time.Now().Add(20 * time.Second)
	waitUntil(tb, deadline, "the replica's link to its master", func() (bool, error) {
		f, err := infoFields(s.Replica.Addr, "INFO", "replication")
		return f["master_link_status"] == "up", err
	})
	for k := range n {
		conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", k)) // the Sentinel rewrites it
		sen := &Server{tb: tb, bin: bin, argv: []string{conf, "--sentinel"}, ready: "+monitor master"}
		for attempt := 0; ; attempt++ {
			sen.port = freePort(tb)
			text := fmt.Sprintf("port %d\nbind 127.0.0.1\nsentinel monitor %s 127.0.0.1 %d %d\nsentinel down-after-milliseconds %[2]s 500\nsentinel failover-timeout %[2]s 5000\n",
				sen.port, s.MasterName, s.Master.port, n/2+1)
			if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
				tb.Fatal(err)
			}
			err := sen.start()
			if err == nil {
				break
			}
			if attempt == 4 {
				tb.Fatalf("redistest: %v", err)
			}
		}
		sen.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(sen.port))
		tb.Cleanup(sen.Stop)
		s.Sentinels = append(s.Sentinels, sen)
	}
	s.Sentinel = s.Sentinels[0]
	for _, sen := range s.Sentinels {
		waitUntil(tb, deadline, "each Sentinel's knowledge of the replica and the other Sentinels", func() (bool, error) {
			v, err := do(sen.Addr, "SENTINEL", "REPLICAS", s.MasterName)
			rs, _ := v.([]any)
			if len(rs) != 1 || err != nil {
				return false, err
			}
			v, err = do(sen.Addr, "SENTINEL", "SENTINELS", s.MasterName)
			others, _ := v.([]any)
			return len(others) == n-1, err
		})
	}
	return s
}

// MasterAddr is the master's address, as the Sentinel names it now.
func (s *Sentinel) MasterAddr() (string, error) {
	v, err := do(s.Sentinel.Addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
	if err != nil {
		return "", err
	}
	hp, ok := v.([]any)
	if !ok || len(hp) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME: %v", v)
	}
	return fmt.Sprintf("%v:%v", hp[0], hp[1]), nil
}

// waitUntil polls cond until it holds, failing tb at deadline with what
// it waited for and cond's last error.
func waitUntil(tb testing.TB, deadline time.Time, what string, cond func() (bool, error)) {
	tb.Helper()
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: %s: not there after 20s (%v)", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Do sends one command to the server at addr, on a connection of its
// own, and returns the reply: a string, an int64, a []any, nil, or an
// error for an error reply.
func Do(addr string, args ...string) (any, error) { return do(addr, args...) }
