package httplimit

import (
	"net/http"
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
