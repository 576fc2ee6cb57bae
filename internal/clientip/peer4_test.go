package clientip

import (
	"net/netip"
	"strconv"
	"testing"
)

// peerSamples are RemoteAddrs at and around the edges of what peer4
// reads: canonical IPv4 peers with and without ports, and each way of
// being almost one (leading zeros, out-of-range octets and ports, zones,
// brackets, IPv4-mapped and NAT64 IPv6, truncations, trailing bytes).
var peerSamples = []string{
	"", ":", ".", "1", "1.2.3", "1.2.3.", "1.2.3.4", "1.2.3.4:", "1.2.3.4:0", "1.2.3.4:1",
	"1.2.3.4:80", "1.2.3.4:65535", "1.2.3.4:65536", "1.2.3.4:99999", "1.2.3.4:100000",
	"1.2.3.4:0080", "1.2.3.4:00080", "1.2.3.4:000080", "1.2.3.4:+80", "1.2.3.4:-1", "1.2.3.4: 80",
	"1.2.3.4:80 ", " 1.2.3.4:80", "1.2.3.4::80", "1.2.3.4:80:80", "1.2.3.4.5", "1.2.3.4.5:80",
	"0.0.0.0", "0.0.0.0:0", "255.255.255.255:65535", "256.1.1.1:1", "1.256.1.1:1", "1.1.1.256:1",
	"1.1.1.255:1", "01.2.3.4:5", "1.02.3.4:5", "1.2.3.04:5", "1.2.3.00:5", "00.0.0.0", "1.2.3.4a",
	"1.2.3.4%eth0", "1.2.3.4%eth0:80", "[1.2.3.4]:80", "[1.2.3.4]", "1.2.3.1234:5", "1234.2.3.4",
	"1..3.4", "1.2.3.-4", "1.2.3.4/32", "1.2.3.4:8a", "1.2.3.4:٣", "١.2.3.4:80", "1.2.3.4\x00:80",
	"10.1.2.3:5", "10.255.255.255:443", "192.0.2.1:1234", "203.0.113.9",
	"[::ffff:1.2.3.4]:80", "::ffff:1.2.3.4", "[::ffff:102:304]:80", "[::ffff:1.2.3.4%eth0]:80",
	"[64:ff9b::c000:201]:443", "64:ff9b::1.2.3.4", "[2001:db8::1]:443", "[2001:db8::1]",
	"2001:db8::1", "[fe80::1%eth0]:443", "fe80::1%eth0", "[::1]:80", "::1", "[::]:0",
	"[2001:db8::1]:65536", "[2001:db8::1]:", "[2001:db8::1", "2001:db8::1]:80", "[[::1]]:80",
	"not an address", "@", "localhost:80", "example.com:443",
}

// finders are Finders of every kind: no trusted proxies, IPv4 and IPv6
// ones (holding some of peerSamples), each header, and several IPv6
// groupings.
func finders() []*Finder {
	return []*Finder{
		newClients(XForwardedFor, 64),
		newClients(XForwardedFor, 128),
		newClients(Forwarded, 48),
		newClients(XForwardedFor, 64, "10.0.0.0/8", "::1/128"),
		newClients(XForwardedFor, 1, "1.2.3.4/32"),
		newClients(Forwarded, 64, "0.0.0.0/0", "::/0"),
		newClients(XForwardedFor, 64, "::ffff:1.2.3.0/120"),
	}
}

// TestPeer4MatchesAddress holds Address, with its fast path, to the
// general path alone over peerSamples and a sweep of IPv4 peers and
// ports, for every kind of Finder, with and without a proxy header.
func TestPeer4MatchesAddress(t *testing.T) {
	remotes := append([]string(nil), peerSamples...)
	for _, o := range []int{0, 1, 9, 10, 99, 100, 199, 200, 249, 250, 255} {
		for _, port := range []string{"", ":0", ":7", ":80", ":443", ":4711", ":65535", ":65536"} {
			o := strconv.Itoa(o)
			remotes = append(remotes, o+"."+o+"."+o+"."+o+port, "10.0."+o+".1"+port, "1.2.3."+o+port)
		}
	}
	fast := 0
	for _, c := range finders() {
		for _, values := range [][]string{nil, {"203.0.113.9"}, {"for=203.0.113.9"}} {
			for _, remote := range remotes {
				got, want := c.Address(remote, values), c.address(remote, values)
				if got != want {
					t.Errorf("Finder %+v, remote %q, header %q: %q, the general path %q", *c, remote, values, got, want)
				}
				if _, _, ok := peer4(remote); ok {
					fast++
				}
			}
		}
	}
	if fast == 0 {
		t.Fatal("no sample took the fast path: the test compared the general path with itself")
	}
}

// TestPeer4 checks peer4's own contract: what it reads is what ParseAddr
// reads as the same IPv4 address, and the host is its canonical form.
func TestPeer4(t *testing.T) {
	for _, tc := range []struct {
		remote, host string
		ok           bool
	}{
		{"192.0.2.1:1234", "192.0.2.1", true},
		{"192.0.2.1", "192.0.2.1", true},
		{"0.0.0.0:0", "0.0.0.0", true},
		{"255.255.255.255:65535", "255.255.255.255", true},
		{"1.2.3.4:0080", "1.2.3.4", true},
		{"1.2.3.4:65536", "", false},
		{"1.2.3.4:000080", "", false}, // ParseAddr reads it: the general path decides
		{"01.2.3.4:5", "", false},
		{"1.2.3.4%eth0:80", "", false},
		{"[::ffff:1.2.3.4]:80", "", false},
		{"1.2.3.4:", "", false},
	} {
		host, _, ok := peer4(tc.remote)
		if host != tc.host || ok != tc.ok {
			t.Errorf("peer4(%q) = %q, %v; want %q, %v", tc.remote, host, ok, tc.host, tc.ok)
		}
	}
	for _, s := range peerSamples {
		checkPeer4(t, s)
	}
}

// checkPeer4 fails t if peer4 reads s as other than ParseAddr does.
func checkPeer4(t *testing.T, s string) {
	host, a, ok := peer4(s)
	if !ok {
		return
	}
	want, wok := ParseAddr(s)
	if !wok || want != netip.AddrFrom4(a) || want.String() != host {
		t.Fatalf("peer4(%q) = %q %v, ParseAddr %v %v", s, host, a, want, wok)
	}
}

// FuzzPeer4 holds the fast path to the general one: for any RemoteAddr
// and proxy header, Address answers as address does, under every kind of
// Finder, and what peer4 reads ParseAddr reads alike.
func FuzzPeer4(f *testing.F) {
	for _, s := range peerSamples {
		f.Add(s, "203.0.113.9, 10.0.0.2")
	}
	f.Add("10.0.0.1:80", `for="[2001:db8::1]:80"`)
	cs := finders()
	f.Fuzz(func(t *testing.T, remote, header string) {
		checkPeer4(t, remote)
		for _, c := range cs {
			if got, want := c.Address(remote, []string{header}), c.address(remote, []string{header}); got != want {
				t.Fatalf("Finder %+v, remote %q, header %q: %q, the general path %q", *c, remote, header, got, want)
			}
		}
	})
}

// TestAddressAllocs: an IPv4 peer in the usual form is keyed without an
// allocation, trusted proxies configured or not.
func TestAddressAllocs(t *testing.T) {
	for _, c := range finders()[:4] {
		if n := testing.AllocsPerRun(1000, func() { c.Address("192.0.2.1:4711", nil) }); n != 0 {
			t.Errorf("Finder %+v: %v allocations per IPv4 peer, want 0", *c, n)
		}
	}
}
