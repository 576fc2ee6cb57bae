package bench

import (
	"bufio"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/memcachetest"
)

// startBenchMemcached starts a memcached for the benchmarks on it and
// returns its address, or "" where memcached is not installed (the
// benchmark says so and runs without it), unless
// FLOODGATE_REQUIRE_MEMCACHED=1, under which memcachetest fails it.
func startBenchMemcached(b *testing.B) string {
	if _, err := memcachetest.Find(); err != nil && os.Getenv(memcachetest.Require) != "1" {
		b.Logf("no memcached scenarios: %v", err)
		return ""
	}
	return memcachetest.Start(b).Addr()
}

// memcachedStats is what the benchmarks read of memcached's "stats":
// its CPU time (rusage_user and rusage_system), and the commands it ran,
// cmd_get (one a key: a get of several keys counts each), cmd_set (set,
// add, cas and the other stores), cmd_touch, and the incr, decr and
// delete commands, hits and misses.
type memcachedStats struct {
	cpu  time.Duration
	cmds int64
}

// readMemcachedStats reads memcached's stats at addr.
func readMemcachedStats(b *testing.B, addr string) memcachedStats {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("stats\r\n")); err != nil {
		b.Fatal(err)
	}
	var st memcachedStats
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 1 && f[0] == "END" {
			return st
		}
		if len(f) != 3 || f[0] != "STAT" {
			continue
		}
		switch f[1] {
		case "rusage_user", "rusage_system":
			sec, err := strconv.ParseFloat(f[2], 64)
			if err != nil {
				b.Fatalf("memcached's %s %q: %v", f[1], f[2], err)
			}
			st.cpu += time.Duration(sec * 1e9)
		case "cmd_get", "cmd_set", "cmd_touch", "incr_hits", "incr_misses", "decr_hits", "decr_misses", "delete_hits", "delete_misses":
			n, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				b.Fatalf("memcached's %s %q: %v", f[1], f[2], err)
			}
			st.cmds += n
		}
	}
	b.Fatalf("memcached's stats at %s ended early: %v", addr, sc.Err())
	return st
}
