package clientip

import (
	"net/netip"
	"strings"
	"testing"
)

// header is which proxy header a Finder reads, in these tables.
type header int

const (
	XForwardedFor header = iota
	Forwarded
)

func newClients(h header, v6bits int, trusted ...string) *Finder {
	c := &Finder{Forwarded: h == Forwarded, V6Bits: v6bits}
	for _, s := range trusted {
		c.Trusted = append(c.Trusted, netip.MustParsePrefix(s))
	}
	return c
}

// TestAddress: the peer is the client unless it is a trusted proxy;
// then the right-most untrusted address of the configured header is. What
// cannot be read falls back to the peer, or, for the peer itself, to the
// fixed InvalidRemote; a client never picks its own key.
func TestAddress(t *testing.T) {
	// A client behind a trusted proxy pads the header it sends past
	// MaxHeader; the proxy appends its address, and that is what counts.
	padded := strings.Repeat("198.51.100.1, ", MaxHeader/14+1) + "203.0.113.9"
	garbage := strings.Repeat("x", 2*MaxHeader) + ", 203.0.113.9"
	// The last MaxHeader bytes hold only trusted hops, and the budget cuts
	// "99.1.2.3" to "9.1.2.3", an address too: a cut element is never read.
	cutTail := strings.Repeat(", 10.0.0.12", 5) + strings.Repeat(", 10.0.0.1", 813)
	cutHeader := "99.1.2.3" + cutTail
	for _, tc := range []struct {
		name    string
		header  header
		trusted []string
		remote  string
		xff     []string
		fwd     []string
		want    string
	}{
		{name: "peer", remote: "192.0.2.1:1234", want: "192.0.2.1"},
		{name: "peer without port", remote: "192.0.2.1", want: "192.0.2.1"},
		{name: "untrusted peer's header ignored", remote: "192.0.2.1:1", xff: []string{"203.0.113.9"}, want: "192.0.2.1"},
		{name: "empty remote", remote: "", want: InvalidRemote},
		{name: "garbage remote", remote: "not an address", want: InvalidRemote},
		{name: "garbage remote behind header", remote: "@", xff: []string{"203.0.113.9"}, want: InvalidRemote},
		{name: "v4-mapped peer", remote: "[::ffff:192.0.2.1]:80", want: "192.0.2.1"},
		{name: "v6 peer grouped by /64", remote: "[2001:db8:1:2:3:4:5:6]:443", want: "2001:db8:1:2::/64"},
		{name: "v6 peer with zone", remote: "[fe80::1%eth0]:443", want: "fe80::/64"},
		{name: "trusted proxy", trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			xff: []string{"203.0.113.9"}, want: "203.0.113.9"},
		{name: "right-most untrusted", trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			xff: []string{"198.51.100.7, 203.0.113.9, 10.0.0.2"}, want: "203.0.113.9"},
		{name: "spoofed left entries ignored", trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			xff: []string{"1.1.1.1", "2.2.2.2, 203.0.113.9"}, want: "203.0.113.9"},
		{name: "several lines in order", trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			xff: []string{"203.0.113.9", "10.0.0.7"}, want: "203.0.113.9"},
		{name: "all trusted: left-most", trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			xff: []string{"10.0.0.9, 10.0.0.8"}, want: "10.0.0.9"},
		{name: "no header behind proxy", trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5", want: "10.1.2.3"},
		{name: "entry with port", trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			xff: []string{"203.0.113.9:4711"}, want: "203.0.113.9"},
		{name: "v6 entry grouped", trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			xff: []string{"2001:db8::1"}, want: "2001:db8::/64"},
		{name: "malformed entry: peer", trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			xff: []string{"203.0.113.9, garbage"}, want: "10.1.2.3"},
		{name: "empty entry: peer", trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			xff: []string{"203.0.113.9,"}, want: "10.1.2.3"},
		{name: "padded past MaxHeader: the proxy's addition", trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			xff: []string{padded}, want: "203.0.113.9"},
		{name: "garbage padding past MaxHeader is never read", trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			xff: []string{garbage}, want: "203.0.113.9"},
		{name: "padding on an earlier line, a proxy chain", trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			xff: []string{garbage, "10.0.0.7"}, want: "203.0.113.9"},
		{name: "padding spread over many lines", trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			xff: append(strings.Split(strings.Repeat("x,", MaxHeader), ","), "203.0.113.9"), want: "203.0.113.9"},
		{name: "only trusted hops in the budget: the left-most read", trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			xff: []string{cutHeader}, want: "10.0.0.12"},
		{name: "NAT64 peer: its IPv4 client", remote: "[64:ff9b::c000:201]:443", want: "192.0.2.1"},
		{name: "NAT64 in the header", trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			xff: []string{"64:ff9b::cb00:7109"}, want: "203.0.113.9"},
		{name: "not NAT64: grouped by /64", remote: "[64:ff9c::c000:201]:443", want: "64:ff9c::/64"},
		{name: "malformed left of the client is never read", trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			xff: []string{"garbage, 203.0.113.9"}, want: "203.0.113.9"},
		{name: "forwarded ignored under XFF", trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			fwd: []string{"for=203.0.113.9"}, want: "10.1.2.3"},
		{name: "forwarded", header: Forwarded, trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			fwd: []string{`for=198.51.100.7;proto=https, for="[2001:db8:cafe::17]:4711";by=10.0.0.1`}, want: "2001:db8:cafe::/64"},
		{name: "forwarded right-most untrusted", header: Forwarded, trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			fwd: []string{"for=203.0.113.9, for=10.0.0.4"}, want: "203.0.113.9"},
		{name: "forwarded unknown: peer", header: Forwarded, trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			fwd: []string{"for=unknown"}, want: "10.1.2.3"},
		{name: "forwarded without for: peer", header: Forwarded, trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			fwd: []string{"proto=https"}, want: "10.1.2.3"},
		{name: "forwarded quoted comma", header: Forwarded, trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			fwd: []string{`for=203.0.113.9;x="a,b"`}, want: "203.0.113.9"},
		{name: "xff ignored under Forwarded", header: Forwarded, trusted: []string{"10.0.0.0/8"}, remote: "10.1.2.3:5",
			xff: []string{"203.0.113.9"}, want: "10.1.2.3"},
		{name: "v6 trusted proxy", trusted: []string{"::1/128"}, remote: "[::1]:80",
			xff: []string{"203.0.113.9"}, want: "203.0.113.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClients(tc.header, 64, tc.trusted...)
			values := tc.xff
			if tc.header == Forwarded {
				values = tc.fwd
			}
			if got := c.Address(tc.remote, values); got != tc.want {
				t.Fatalf("client %q, want %q", got, tc.want)
			}
		})
	}
}

// TestIPv6Prefix: the grouping follows the configured prefix length.
func TestIPv6Prefix(t *testing.T) {
	for bits, want := range map[int]string{48: "2001:db8:1::/48", 64: "2001:db8:1:2::/64", 128: "2001:db8:1:2:3:4:5:6"} {
		c := newClients(XForwardedFor, bits)
		if got := c.Address("[2001:db8:1:2:3:4:5:6]:1", nil); got != want {
			t.Errorf("/%d: %q, want %q", bits, got, want)
		}
	}
}

// FuzzAddress: no header or address makes the middleware panic, and
// behind an untrusted peer the key is always the peer's, whatever the
// headers say.
func FuzzAddress(f *testing.F) {
	f.Add("10.0.0.1:80", "203.0.113.9, 10.0.0.2", `for="[2001:db8::1]:80";by=x`)
	f.Add("[::1]:1", ",,,", `for=";"`)
	f.Add("", `"`, `for="`)
	trusted := newClients(XForwardedFor, 64, "10.0.0.0/8", "::1/128")
	fwd := newClients(Forwarded, 56, "10.0.0.0/8", "::1/128")
	untrusted := newClients(XForwardedFor, 64)
	f.Fuzz(func(t *testing.T, remote, xff, forwarded string) {
		trusted.Address(remote, []string{xff})
		fwd.Address(remote, []string{forwarded})
		got := untrusted.Address(remote, []string{xff})
		if want := untrusted.Address(remote, nil); got != want {
			t.Fatalf("untrusted peer %q keyed %q with headers, %q without", remote, got, want)
		}
	})
}

// TestParseTrusted: CIDRs parse, masked; a v4-mapped prefix is its IPv4
// one; a bare address or garbage is an error.
func TestParseTrusted(t *testing.T) {
	got, err := ParseTrusted([]string{" 10.1.2.3/8", "::ffff:192.0.2.0/120", "::1/128"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.0.2.0/24", "::1/128"}
	for i, p := range got {
		if p.String() != want[i] {
			t.Errorf("prefix %d: %s, want %s", i, p, want[i])
		}
	}
	for _, bad := range []string{"10.0.0.1", "10.0.0.0/33", "nonsense"} {
		if _, err := ParseTrusted([]string{bad}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	for bits, want := range map[int]int{0: 64, 1: 1, 128: 128} {
		if got, err := V6Bits(bits); err != nil || got != want {
			t.Errorf("V6Bits(%d) = %d, %v", bits, got, err)
		}
	}
	for _, bad := range []int{-1, 129} {
		if _, err := V6Bits(bad); err == nil {
			t.Errorf("V6Bits(%d): no error", bad)
		}
	}
}
