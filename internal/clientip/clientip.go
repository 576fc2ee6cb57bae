package clientip

import (
	"fmt"
	"net/netip"
	"strings"
)

// InvalidRemote is the client of every request whose connection's address
// cannot be read (an empty or garbage RemoteAddr): they share one
// allowance, and no client can choose another.
const InvalidRemote = "invalid-remote-addr"

// MaxHeader bounds how much of the proxy header is read, from its right
// end: what lies further left is not read at all (see Finder.Address).
const MaxHeader = 8 << 10

// Finder finds a request's client. Trusted are the proxies whose header is
// believed; Forwarded says the header is RFC 7239's Forwarded rather than
// X-Forwarded-For; V6Bits is the prefix length IPv6 clients are grouped by.
type Finder struct {
	// Trusted are the proxies whose header is believed.
	Trusted []netip.Prefix
	// Forwarded says the header is RFC 7239's Forwarded.
	Forwarded bool
	// V6Bits is the prefix length IPv6 clients are grouped by.
	V6Bits int
}

// Address returns the client address of a request from remote (its
// peer, with or without a port) and values (the lines of the proxy
// header), grouped: an IPv4 address
// as it is, an IPv6 one as its prefix (say "2001:db8::/64"). The client is
// the connection's peer unless the peer is a trusted proxy; then it is the
// right-most address in the proxy header that is not itself trusted (the
// left-most read, if all are). Only the header's last MaxHeader bytes are
// read, so a client that pads the header it sends changes nothing: the
// proxies append to its right. A header from a trusted proxy that is
// malformed where the walk reads it is not believed: the key is then the
// peer's. A NAT64 address (64:ff9b::/96) is its IPv4 client's: see group.
//
// The common peer, an IPv4 address in canonical form with or without a
// port and not a trusted proxy, is keyed as its host part without a
// parse through netip and without an allocation (see peer4); every other
// input takes the general path, address, whose answer peer4's always
// equals.
func (c *Finder) Address(remote string, values []string) string {
	if host, a, ok := peer4(remote); ok && !c.IsTrusted(netip.AddrFrom4(a)) {
		return host
	}
	return c.address(remote, values)
}

// address is Address for any input: the peer parsed by ParseAddr, the
// header walked if it is trusted, and the result grouped.
func (c *Finder) address(remote string, values []string) string {
	peer, ok := ParseAddr(remote)
	if !ok {
		return InvalidRemote
	}
	if c.IsTrusted(peer) {
		if a, ok := c.fromHeader(values); ok {
			return c.group(a, "")
		}
	}
	return c.group(peer, remote)
}

// IsTrusted reports whether a is a trusted proxy's address.
func (c *Finder) IsTrusted(a netip.Addr) bool {
	for _, p := range c.Trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// nat64 is the well-known NAT64 prefix (RFC 6052): its addresses carry an
// IPv4 client in their last 32 bits.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// group names a's group; from is the text a was read from, if any. When
// from's host part already spells a (a plain IPv4 peer, as most are), the
// name is that substring, and the common case allocates nothing. An
// address in the well-known NAT64 prefix is keyed as the IPv4 address it
// carries: grouped by its /64, every IPv4 client behind one NAT64 gateway
// would share a key.
func (c *Finder) group(a netip.Addr, from string) string {
	if nat64.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte(b[12:16]))
		from = ""
	}
	if a.Is4() {
		host := from
		if i := strings.LastIndexByte(from, ':'); i >= 0 {
			host = from[:i]
		}
		var buf [len("255.255.255.255")]byte
		if string(a.AppendTo(buf[:0])) == host {
			return host
		}
		return a.String()
	}
	// Written into a buffer on the stack, the text is the one allocation
	// (String would make two for a prefix).
	var buf [len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128")]byte
	if c.V6Bits == 128 {
		return string(a.AppendTo(buf[:0]))
	}
	p, _ := a.Prefix(c.V6Bits)
	return string(p.AppendTo(buf[:0]))
}

// fromHeader walks the proxy header from the right, element by element,
// and reads no more than its last MaxHeader bytes: the right-most part is
// what the trusted proxies wrote, so a client that pads the header it
// sends can neither make the rest unreadable nor push the proxies'
// addresses out of reach. It returns the first address that is not a
// trusted proxy's; the left-most address read if all are (the last
// MaxHeader bytes held only trusted hops); and false if the header is
// absent, or malformed where the walk had to read it.
func (c *Finder) fromHeader(lines []string) (netip.Addr, bool) {
	budget := MaxHeader
	var last netip.Addr
	for i := len(lines) - 1; i >= 0 && budget > 0; i-- {
		line := lines[i]
		cut := len(line) > budget
		if cut {
			line = line[len(line)-budget:]
		}
		budget -= len(line)
		for line != "" {
			var elem string
			line, elem = cutLast(line)
			if cut && line == "" {
				break // the element the budget cut through: never read a part of one
			}
			a, ok := c.node(elem)
			if !ok {
				return netip.Addr{}, false
			}
			if !c.IsTrusted(a) {
				return a, true
			}
			last = a
		}
	}
	return last, last.IsValid()
}

// node reads one element of the proxy header: an address in
// X-Forwarded-For, the for= parameter of a Forwarded element.
func (c *Finder) node(elem string) (netip.Addr, bool) {
	elem = strings.TrimSpace(elem)
	if !c.Forwarded {
		return ParseAddr(elem)
	}
	for elem != "" {
		var pair string
		pair, elem = cutPair(elem)
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(k, "for") {
			continue
		}
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		return ParseAddr(v) // "unknown" and obfuscated names are not addresses
	}
	return netip.Addr{}, false
}

// cutLast splits s at its last comma outside a quoted string, returning
// what precedes it and the element after it.
func cutLast(s string) (rest, elem string) {
	quoted := false
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				return s[:i], s[i+1:]
			}
		}
	}
	return "", s
}

// cutPair splits a Forwarded element at its first semicolon outside a
// quoted string.
func cutPair(s string) (pair, rest string) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			quoted = !quoted
		case ';':
			if !quoted {
				return s[:i], s[i+1:]
			}
		}
	}
	return s, ""
}

// ParseAddr reads an address with or without a port ("192.0.2.1",
// "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]:80"), and returns it
// without zone, an IPv4-mapped IPv6 address as IPv4.
func ParseAddr(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil { // a RemoteAddr has a port
		return ap.Addr().WithZone("").Unmap(), true
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
			return ParseAddr(s[1 : len(s)-1])
		}
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

// ParseTrusted parses CIDR prefixes ("10.0.0.0/8", "::1/128"); an
// IPv4-mapped IPv6 prefix is taken as the IPv4 prefix it maps.
func ParseTrusted(cidrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: %w", s, err)
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(0, p.Bits()-96))
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// V6Bits validates an IPv6 grouping prefix length: 0 means 64.
func V6Bits(bits int) (int, error) {
	switch {
	case bits == 0:
		return 64, nil
	case bits < 1 || bits > 128:
		return 0, fmt.Errorf("IPv6Prefix %d is not a prefix length of 1 to 128", bits)
	}
	return bits, nil
}
