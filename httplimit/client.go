package httplimit

import (
	"net/http"

	"github.com/floodgate-go/floodgate/internal/clientip"
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
const InvalidRemote = clientip.InvalidRemote

// MaxProxyHeader bounds how much of the proxy header is read: its last
// MaxProxyHeader bytes (all its lines together), from the right, where
// the trusted proxies append, and never an element the bound cuts
// through. What lies further left is not read at all, so a client that
// pads the header it sends changes nothing.
const MaxProxyHeader = clientip.MaxHeader

// Client returns the key under which the middleware counts r: its client
// address as Config's proxy rules find it, or Config.Key's answer.
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
