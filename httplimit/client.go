package httplimit

import (
	"net/http"
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

// Client returns the key under which the middleware counts r: its client
// address as Config's proxy rules find it, or Config.Key's answer. A
// request whose RemoteAddr cannot be read is keyed "invalid-remote-addr":
// all such requests share one allowance (see the package documentation).
func (l *Limiter) Client(r *http.Request) string {
	var values []string
	if len(l.clients.Trusted) > 0 { // else no header is believed: skip its lookup
		values = r.Header[l.header]
	}
	c := l.clients.Address(r.RemoteAddr, values)
	if l.key != nil {
		return l.key(r, c)
	}
	return c
}
