package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of three masters, each with one replica: six
// redis-server processes on loopback, with no persistence and a node
// timeout of one second, so that a killed master's replica takes over
// within a few seconds. They stop when the test ends.
type Cluster struct {
	tb      testing.TB
	servers []*Server

	mu     sync.Mutex
	ids    map[string]string   // address → node ID
	killed map[string]bool     // addresses of the killed nodes
	heirs  map[string][]string // a killed master's address → its replicas' IDs when it was killed
}

// clusterNodes is the size of a Cluster: three masters and three replicas.
const clusterNodes = 6

// StartCluster starts six cluster-enabled servers, joins them with
// redis-cli --cluster create (one replica per master), and returns once
// every node reports cluster_state:ok with all 16384 slots assigned, knows
// the five others, and every replica's link to its master is up. It skips
// the test, as Start does, where redis-server or redis-cli is missing
// (FLOODGATE_REQUIRE_REDIS=1: fails it), and stops all six when tb ends.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	bin, err := Find()
	var cli string
	if err == nil {
		if cli, err = exec.LookPath("redis-cli"); err != nil {
			err = fmt.Errorf("redis-cli not found: install Debian's redis-tools package (apt-get install redis-tools) to run the Redis Cluster tests")
		}
	}
	if err != nil {
		if os.Getenv(Require) == "1" {
			tb.Fatalf("%v (%s=1)", err, Require)
		}
		tb.Skip(err)
	}
	dir := tb.TempDir() // before the servers: its cleanup runs after theirs
	c := &Cluster{tb: tb, ids: map[string]string{}, killed: map[string]bool{}, heirs: map[string][]string{}}
	for i := 0; i < clusterNodes; i++ {
		c.servers = append(c.servers, launch(tb, bin, func(port int) []string {
			// The bus gets a port of its own: port+10000, the default,
			// may be taken or beyond 65535.
			// A replica keeps the copy its master sends in dir, not in the
			// test's working directory.
			return []string{"--dir", dir, "--dbfilename", fmt.Sprintf("dump-%d.rdb", port),
				"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(freePort(tb)),
				"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port)),
				"--cluster-node-timeout", "1000",
				// A replica's first sync starts at once, not after the
				// default 5 s wait for other replicas.
				"--repl-diskless-sync-delay", "0"}
		}))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	c.waitReady(time.Now().Add(30 * time.Second))
	return c
}

// waitReady polls every node until the cluster is whole, then records the
// nodes' IDs.
func (c *Cluster) waitReady(deadline time.Time) {
	c.tb.Helper()
	for {
		err := c.ready()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("redistest: the cluster was not ready in time: %v", err)
		}
		time.Sleep(25 * time.Millisecond)
	}
	for _, addr := range c.Addrs() {
		id, err := do(addr, "cluster", "myid")
		if err != nil {
			c.tb.Fatalf("redistest: CLUSTER MYID on %s: %v", addr, err)
		}
		c.ids[addr] = fmt.Sprint(id)
	}
}

// ready returns nil when every node sees the whole cluster, or what it
// still waits for.
func (c *Cluster) ready() error {
	for _, addr := range c.Addrs() {
		info, err := infoFields(addr, "cluster", "info")
		if err != nil {
			return err
		}
		if info["cluster_state"] != "ok" || info["cluster_slots_assigned"] != "16384" || info["cluster_known_nodes"] != strconv.Itoa(clusterNodes) {
			return fmt.Errorf("%s: cluster_state:%s, cluster_slots_assigned:%s, cluster_known_nodes:%s",
				addr, info["cluster_state"], info["cluster_slots_assigned"], info["cluster_known_nodes"])
		}
		// Every node's own view must hold the roles too: a master that
		// has not yet heard by gossip that its replica follows it would
		// name no heir to Kill.
		v, err := do(addr, "cluster", "nodes")
		if err != nil {
			return err
		}
		if err := wholeView(parseNodes(fmt.Sprint(v))); err != nil {
			return fmt.Errorf("%s: %v", addr, err)
		}
		repl, err := infoFields(addr, "info", "replication")
		if err != nil {
			return err
		}
		switch {
		case repl["role"] == "slave" && repl["master_link_status"] != "up":
			return fmt.Errorf("%s: replica with master_link_status:%s", addr, repl["master_link_status"])
		case repl["role"] == "master" && repl["connected_slaves"] != "1":
			return fmt.Errorf("%s: master with connected_slaves:%s", addr, repl["connected_slaves"])
		}
	}
	return nil
}

// Addrs returns the six nodes' addresses, host:port on loopback, the
// killed ones too.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.servers))
	for i, s := range c.servers {
		addrs[i] = s.Addr
	}
	return addrs
}

// Slot returns the hash slot of key (CLUSTER KEYSLOT).
func (c *Cluster) Slot(key string) int {
	c.tb.Helper()
	v, err := c.ask("cluster", "keyslot", key)
	if err != nil {
		c.tb.Fatalf("redistest: CLUSTER KEYSLOT: %v", err)
	}
	n, ok := v.(int64)
	if !ok {
		c.tb.Fatalf("redistest: CLUSTER KEYSLOT answered %v", v)
	}
	return int(n)
}

// MasterFor returns the address of the master that serves key's slot, as
// a live node sees it now.
func (c *Cluster) MasterFor(key string) string {
	c.tb.Helper()
	return c.MasterOf(c.Slot(key))
}

// MasterOf returns the address of the master that serves slot, as a live
// node's CLUSTER SLOTS says.
func (c *Cluster) MasterOf(slot int) string {
	c.tb.Helper()
	for _, r := range c.slotRanges() {
		if r.start <= slot && slot <= r.end {
			return r.master
		}
	}
	c.tb.Fatalf("redistest: no node serves slot %d", slot)
	return ""
}

// Masters returns the addresses of the masters that serve slots now,
// sorted.
func (c *Cluster) Masters() []string {
	c.tb.Helper()
	seen := map[string]bool{}
	var masters []string
	for _, r := range c.slotRanges() {
		if !seen[r.master] {
			seen[r.master] = true
			masters = append(masters, r.master)
		}
	}
	sort.Strings(masters)
	return masters
}

// Replicas returns the addresses of master's replicas that are alive (not
// killed, and not flagged as failing), as a live node sees them now.
func (c *Cluster) Replicas(master string) []string {
	c.tb.Helper()
	c.mu.Lock()
	id := c.ids[master]
	c.mu.Unlock()
	v, err := c.ask("cluster", "nodes")
	if err != nil {
		c.tb.Fatalf("redistest: CLUSTER NODES: %v", err)
	}
	var out []string
	for _, n := range parseNodes(fmt.Sprint(v)) {
		if n.master == id && n.has("slave") && !n.failing() && !c.isKilled(n.addr) {
			out = append(out, n.addr)
		}
	}
	sort.Strings(out)
	return out
}

type slotRange struct {
	start, end int
	master     string
}

// slotRanges reads CLUSTER SLOTS from a live node.
func (c *Cluster) slotRanges() []slotRange {
	c.tb.Helper()
	v, err := c.ask("cluster", "slots")
	if err != nil {
		c.tb.Fatalf("redistest: CLUSTER SLOTS: %v", err)
	}
	rows, _ := v.([]any)
	var out []slotRange
	for _, row := range rows {
		r, _ := row.([]any)
		if len(r) < 3 {
			c.tb.Fatalf("redistest: CLUSTER SLOTS answered %v", v)
		}
		start, _ := r[0].(int64)
		end, _ := r[1].(int64)
		node, _ := r[2].([]any)
		if len(node) < 2 {
			c.tb.Fatalf("redistest: CLUSTER SLOTS answered %v", v)
		}
		out = append(out, slotRange{int(start), int(end), net.JoinHostPort(fmt.Sprint(node[0]), fmt.Sprint(node[1]))})
	}
	return out
}

// Kill ends the node at addr at once (SIGKILL) and waits for its process
// to exit. It first notes the node's replicas, for WaitPromoted.
func (c *Cluster) Kill(addr string) {
	c.tb.Helper()
	s := c.server(addr)
	c.mu.Lock()
	id := c.ids[addr]
	c.mu.Unlock()
	var heirs []string
	if !c.isKilled(addr) {
		v, err := do(addr, "cluster", "nodes")
		if err != nil {
			c.tb.Fatalf("redistest: CLUSTER NODES on %s: %v", addr, err)
		}
		for _, n := range parseNodes(fmt.Sprint(v)) {
			if n.master == id {
				heirs = append(heirs, n.id)
			}
		}
	}
	c.mu.Lock()
	if !c.killed[addr] {
		c.heirs[addr] = heirs
	}
	c.killed[addr] = true
	c.mu.Unlock()
	s.Kill()
}

// WaitPromoted polls the surviving nodes until one of the replicas that
// the master at old had when Kill ended it is a master serving slots, in
// its own view and in every survivor's, and every survivor reports
// cluster_state:ok. It returns that replica's address and when the poll
// saw it, or fails the test at deadline. Call it from the test's
// goroutine, after Kill(old).
func (c *Cluster) WaitPromoted(old string, deadline time.Time) (newMaster string, at time.Time) {
	c.tb.Helper()
	c.mu.Lock()
	heirs, ok := c.heirs[old]
	c.mu.Unlock()
	if !ok {
		c.tb.Fatalf("redistest: WaitPromoted(%s) before Kill(%[1]s)", old)
	}
	if len(heirs) == 0 {
		c.tb.Fatalf("redistest: %s had no replica when it was killed", old)
	}
	for {
		if addr, err := c.promoted(heirs); err == nil {
			return addr, time.Now()
		} else if time.Now().After(deadline) {
			c.tb.Fatalf("redistest: no replica of %s was promoted in time: %v", old, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// promoted returns the address of the heir that every survivor sees as a
// master with slots, with cluster_state:ok, or what is still missing.
func (c *Cluster) promoted(heirs []string) (string, error) {
	found := ""
	for _, addr := range c.Addrs() {
		if c.isKilled(addr) {
			continue
		}
		info, err := infoFields(addr, "cluster", "info")
		if err != nil {
			return "", err
		}
		if info["cluster_state"] != "ok" {
			return "", fmt.Errorf("%s: cluster_state:%s", addr, info["cluster_state"])
		}
		v, err := do(addr, "cluster", "nodes")
		if err != nil {
			return "", err
		}
		seen := ""
		for _, n := range parseNodes(fmt.Sprint(v)) {
			for _, h := range heirs {
				if n.id == h && n.has("master") && !n.failing() && n.slots > 0 {
					seen = n.addr
				}
			}
		}
		if seen == "" || (found != "" && seen != found) {
			return "", fmt.Errorf("%s does not see a replica of the killed master as a master yet", addr)
		}
		found = seen
	}
	if found == "" {
		return "", errors.New("no node survives")
	}
	return found, nil
}

func (c *Cluster) isKilled(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.killed[addr]
}

func (c *Cluster) server(addr string) *Server {
	c.tb.Helper()
	for _, s := range c.servers {
		if s.Addr == addr {
			return s
		}
	}
	c.tb.Fatalf("redistest: %s is not a node of the cluster", addr)
	return nil
}

// ask sends a command to the first live node that answers.
func (c *Cluster) ask(args ...string) (any, error) {
	var err error
	for _, addr := range c.Addrs() {
		if c.isKilled(addr) {
			continue
		}
		var v any
		if v, err = do(addr, args...); err == nil {
			return v, nil
		}
	}
	if err == nil {
		err = errors.New("no node survives")
	}
	return nil, err
}

// node is one line of CLUSTER NODES.
type node struct {
	id, addr, master string
	flags            []string
	slots            int // slot fields (single slots or ranges)
}

func (n node) has(flag string) bool {
	for _, f := range n.flags {
		if f == flag {
			return true
		}
	}
	return false
}

func (n node) failing() bool { return n.has("fail") || n.has("fail?") || n.has("noaddr") }

// wholeView returns nil when a node's CLUSTER NODES shows three masters
// serving slots, each followed by one replica.
func wholeView(nodes []node) error {
	followers := map[string]int{}
	masters := 0
	for _, n := range nodes {
		switch {
		case n.has("master") && n.slots > 0:
			masters++
		case n.has("slave"):
			followers[n.master]++
		}
	}
	for _, n := range nodes {
		if n.has("master") && n.slots > 0 && followers[n.id] != 1 {
			return fmt.Errorf("master %s has %d replicas in this view", n.addr, followers[n.id])
		}
	}
	if masters != clusterNodes/2 {
		return fmt.Errorf("%d masters serve slots in this view", masters)
	}
	return nil
}

// parseNodes reads CLUSTER NODES: "<id> <ip:port@cport[,hostname]>
// <flags> <master> <ping-sent> <pong-recv> <config-epoch> <link-state>
// <slot>...".
func parseNodes(text string) []node {
	var out []node
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr := f[1]
		if i := strings.IndexAny(addr, "@,"); i >= 0 {
			addr = addr[:i]
		}
		out = append(out, node{id: f[0], addr: addr, master: f[3], flags: strings.Split(f[2], ","), slots: len(f) - 8})
	}
	return out
}

// infoFields runs an INFO-like command on addr and returns its
// "field:value" lines.
func infoFields(addr string, args ...string) (map[string]string, error) {
	v, err := do(addr, args...)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(fmt.Sprint(v), "\n") {
		if k, val, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = val
		}
	}
	return m, nil
}

// do sends one command to addr on a connection of its own and returns the
// reply: a string, an int64, a []any, nil, or an error for an error reply.
// It is this package's whole Redis client: the core module depends on no
// Redis library.
func do(addr string, args ...string) (any, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return nil, err
	}
	v, err := readReply(bufio.NewReader(conn))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", addr, strings.Join(args, " "), err)
	}
	return v, nil
}

// readReply reads one RESP2 reply.
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty reply line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, errors.New(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown reply %q", line)
}
