package httplimit

import (
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// routeIndex is the handler that marks a pattern as the i-th route's in the
// Limiter's own ServeMux, which only matches and never serves.
type routeIndex int

func (routeIndex) ServeHTTP(http.ResponseWriter, *http.Request) {}

// handle registers pattern in mux, turning ServeMux's panic on a bad or
// conflicting pattern into an error.
func handle(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

// match returns the route that limits r, the default one, or nil; and,
// rarely, a second route that limits it too.
//
// A request is limited under the route of its cleaned path, as the router
// behind the middleware will serve it, not as it was sent: "//", "/./",
// "/x/../" and a missing trailing slash ("/api" for a Route "/api/", which
// ServeMux would redirect) all count under the route the clean path
// matches, where http.ServeMux alone would answer a redirect and the
// request would pass unlimited to a router that serves it anyway. A path
// with escapes that change its segments ("/api%2Fx", whose decoded path
// is "/api/x") has two clean forms: routers that match the decoded path
// (chi, gorilla/mux) and ServeMux, which matches the escaped one segment
// by segment, may route it apart. When the two forms match different
// routes (or one a route and the other none, which Default then limits),
// the request is charged under both, so that whichever the router
// serves, its limit was applied.
func (l *table) match(r *http.Request) (rt, also *route) {
	if len(l.routes) == 0 {
		return l.deflt, nil
	}
	escaped := r.URL.EscapedPath()
	if r.URL.RawPath == "" && cleanPath(escaped) == escaped {
		return l.lookup(r), nil // the common case: one clean form, no copy
	}
	decoded := l.lookupPath(r, cleanPath(r.URL.Path), "")
	raw := cleanPath(escaped)
	if r.URL.RawPath == "" {
		return decoded, nil
	}
	unescaped, err := url.PathUnescape(raw)
	if err != nil {
		return decoded, nil // EscapedPath is always valid; unreachable
	}
	if other := l.lookupPath(r, unescaped, raw); other != decoded {
		if decoded == nil {
			return other, nil
		}
		return decoded, other
	}
	return decoded, nil
}

// lookupPath is lookup for r with its path replaced by path (and its
// escaped form raw, if it has one of its own).
func (l *table) lookupPath(r *http.Request, path, raw string) *route {
	u := *r.URL
	u.Path, u.RawPath = path, raw
	r2 := *r
	r2.URL = &u
	return l.lookup(&r2)
}

// lookup returns the route the Limiter's ServeMux finds for r, which must
// have a clean path. The one redirect it can answer then is to the same
// path with a trailing slash, for a subtree pattern ("/api" to "/api/"):
// the request counts under that pattern's route.
func (l *table) lookup(r *http.Request) *route {
	h, pattern := l.mux.Handler(r)
	if i, ok := h.(routeIndex); ok {
		return l.routes[i]
	}
	if strings.HasSuffix(pattern, "/") && pattern != r.URL.Path {
		if h, _ := l.mux.Handler(withPath(r, pattern)); h != nil {
			if i, ok := h.(routeIndex); ok {
				return l.routes[i]
			}
		}
	}
	return l.deflt
}

// withPath is r with the decoded path p.
func withPath(r *http.Request, p string) *http.Request {
	u := *r.URL
	u.Path, u.RawPath = p, ""
	r2 := *r
	r2.URL = &u
	return &r2
}

// cleanPath is http.ServeMux's canonical form of a path: rooted, with no
// "." or ".." element and no empty one, and with a trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}
