package httplimit

import (
	"net/http"
	"net/netip"
	"strings"
)

// ProxyHeader names the header that trusted proxies write the client's
// address into. Only one is read: a client behind a proxy that sets one of
// them could otherwise send the other with an address of its choosing.
type ProxyHeader int

const (
	// XForwardedFor is the de facto X-Forwarded-For list, to which each
	// proxy appends the address it received the request from.
	XForwardedFor ProxyHeader = iota
	// Forwarded is RFC 7239's Forwarded header; each proxy appends an
	// element whose for= parameter is that address.
	Forwarded
)

// InvalidRemote is the key of every request whose connection's address
// cannot be read (an empty or garbage RemoteAddr): they share one
// allowance, and no client can choose another.
const InvalidRemote = "invalid-remote-addr"

// maxProxyHeader bounds how much of the proxy header is read: a header
// longer than this (all its lines together) is not believed, and the
// request is keyed by its peer.
const maxProxyHeader = 8 << 10

// clients finds a request's client.
type clients struct {
	trusted []netip.Prefix
	header  ProxyHeader
	v6bits  int
}

// address returns the request's client address, grouped: an IPv4 address
// as it is, an IPv6 one as its prefix (say "2001:db8::/64"). The client is
// the connection's peer unless the peer is a trusted proxy; then it is the
// right-most address in the proxy header that is not itself trusted (the
// left-most, if all are). A malformed header, or one longer than 8 KiB,
// from a trusted proxy is not believed either: the key is then the peer's.
func (c *clients) address(r *http.Request) string {
	peer, ok := parseAddr(r.RemoteAddr)
	if !ok {
		return InvalidRemote
	}
	if c.isTrusted(peer) {
		if a, ok := c.fromHeader(r.Header); ok {
			peer = a
		}
	}
	return c.group(peer)
}

func (c *clients) isTrusted(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (c *clients) group(a netip.Addr) string {
	if a.Is4() || c.v6bits == 128 {
		return a.String()
	}
	p, _ := a.Prefix(c.v6bits)
	return p.String()
}

// fromHeader walks the proxy header from the right, and reports false if
// it is absent, too long or malformed anywhere it had to read.
func (c *clients) fromHeader(h http.Header) (netip.Addr, bool) {
	name := "X-Forwarded-For"
	if c.header == Forwarded {
		name = "Forwarded"
	}
	lines := h.Values(name)
	total := 0
	for _, l := range lines {
		if total += len(l); total > maxProxyHeader {
			return netip.Addr{}, false
		}
	}
	var last netip.Addr
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		for line != "" {
			var elem string
			line, elem = cutLast(line)
			a, ok := c.node(elem)
			if !ok {
				return netip.Addr{}, false
			}
			if !c.isTrusted(a) {
				return a, true
			}
			last = a
		}
	}
	return last, last.IsValid()
}

// node reads one element of the proxy header: an address in
// X-Forwarded-For, the for= parameter of a Forwarded element.
func (c *clients) node(elem string) (netip.Addr, bool) {
	elem = strings.TrimSpace(elem)
	if c.header == XForwardedFor {
		return parseAddr(elem)
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
		return parseAddr(v) // "unknown" and obfuscated names are not addresses
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

// parseAddr reads an address with or without a port ("192.0.2.1",
// "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]:80"), and returns it
// without zone, an IPv4-mapped IPv6 address as IPv4.
func parseAddr(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
				return parseAddr(s[1 : len(s)-1])
			}
			return netip.Addr{}, false
		}
		a = ap.Addr()
	}
	return a.WithZone("").Unmap(), true
}
