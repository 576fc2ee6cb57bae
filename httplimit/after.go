package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/policy"
)

// decide decides r by s for client: by Reserve into the request's meter
// (*m, made on the first such Set) when s has After policies, else by
// Decide.
func decide(w http.ResponseWriter, r *http.Request, s *policy.Set, client string, each []floodgate.Decision, d *floodgate.Decision, m **meter) bool {
	if !s.After() {
		return s.Decide(r.Context(), client, 1, each, d)
	}
	if *m == nil {
		*m = &meter{w: w, key: client}
		for k := range (*m).costs {
			for i := range (*m).costs[k] {
				(*m).costs[k][i] = -1
			}
		}
	}
	mt := *m
	if !s.Reserve(r.Context(), client, 1, each, d, &mt.holds[mt.n]) {
		return false
	}
	mt.sets[mt.n] = s
	mt.n++
	return true
}

// meter is the ResponseWriter a request with After policies is served
// through: it keeps what their Sets reserved (one, or two for a path
// whose escapes route it twice), takes their costs from the handler's
// Report and from their cost headers and trailers, which it removes
// before they are sent, and settles the request when the handler
// returns. It is made per request (some 2.4 KB), as such requests are
// the long ones: a model's stream, a download.
type meter struct {
	w        http.ResponseWriter
	key      string
	n        int
	sets     [2]*policy.Set
	holds    [2]floodgate.Hold
	costs    [2][floodgate.MaxPolicies]int64 // each policy's, from its header; -1 for none
	reported policy.Reported                 // Report's sum
	wrote    bool                            // the header was sent
	settled  bool
}

// Header is the ResponseWriter's.
func (m *meter) Header() http.Header { return m.w.Header() }

// WriteHeader takes the cost headers out, then writes the header.
func (m *meter) WriteHeader(code int) {
	m.take(false)
	if code >= 200 {
		m.wrote = true
	}
	m.w.WriteHeader(code)
}

// Write writes the header first, as WriteHeader(200), if it was not.
func (m *meter) Write(b []byte) (int, error) {
	if !m.wrote {
		m.take(false)
		m.wrote = true
	}
	return m.w.Write(b)
}

// Flush sends what is written, the header first, if the ResponseWriter
// can (as http.Flusher).
func (m *meter) Flush() {
	if !m.wrote {
		m.take(false)
		m.wrote = true
	}
	_ = http.NewResponseController(m.w).Flush()
}

// Unwrap is the ResponseWriter the meter wraps, for
// http.ResponseController.
func (m *meter) Unwrap() http.ResponseWriter { return m.w }

// take reads each After policy's cost header, keeps its value, and
// removes it, with its name from the Trailer header's list; at the end
// (trailers), the trailers set with http.TrailerPrefix too.
func (m *meter) take(end bool) {
	h := m.w.Header()
	for k := range m.n {
		for i, sp := range m.sets[k].Specs {
			name := sp.CostKey
			if name == "" {
				continue
			}
			if vs, ok := h[name]; ok {
				m.costs[k][i] = policy.ParseCost(vs, m.costs[k][i])
				delete(h, name)
			}
			if end {
				for hk, vs := range h {
					if len(hk) > len(http.TrailerPrefix) && strings.HasPrefix(hk, http.TrailerPrefix) && strings.EqualFold(hk[len(http.TrailerPrefix):], name) {
						m.costs[k][i] = policy.ParseCost(vs, m.costs[k][i])
						delete(h, hk)
					}
				}
			}
			if tr, ok := h["Trailer"]; ok {
				h["Trailer"] = dropName(tr, name)
				if len(h["Trailer"]) == 0 {
					delete(h, "Trailer")
				}
			}
		}
	}
}

// dropName returns the Trailer header's values without name.
func dropName(values []string, name string) []string {
	var out []string
	for _, v := range values {
		var keep []string
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n != "" && !strings.EqualFold(n, name) {
				keep = append(keep, n)
			}
		}
		if len(keep) > 0 {
			out = append(out, strings.Join(keep, ", "))
		}
	}
	return out
}

// settle settles what the request reserved, once: each After policy at
// its cost (the one its header carried, else what the handler reported,
// else its estimate stands), or at 0 for a request that was refused
// after a reservation (refused). It runs to the end whether the client
// is still there or not: the cost was spent.
func (m *meter) settle(r *http.Request, refused bool) {
	if m.settled {
		return
	}
	m.settled = true
	if !refused {
		m.take(true)
	}
	reported := m.reported.Load()
	ctx := context.WithoutCancel(r.Context())
	for k := range m.n {
		s := m.sets[k]
		costs := m.costs[k][:len(s.Specs)]
		for i, sp := range s.Specs {
			switch {
			case !sp.After:
			case refused:
				costs[i] = 0
			case sp.CostKey == "":
				costs[i] = reported
			}
		}
		// An error leaves the estimates charged (see policy.Set.Settle).
		_ = s.Settle(ctx, m.key, 1, costs, &m.holds[k])
	}
}

// Report adds cost to the request's cost for its After policies that
// take no CostHeader, from the handler that w serves it to (w, or a
// ResponseWriter that wraps it and has an Unwrap method, as
// http.ResponseController finds). A handler may report as it goes (each
// chunk of a stream) or once; the sum is charged when it returns. A
// request is charged at most 2^52 (some 4.5e15) for an After policy: a
// larger cost, reported or carried, counts as 2^52, and a cost more than
// its key can owe is charged as far as it can owe, which leaves it
// refused for as long as its state can say. Report returns false, and
// counts nothing, when w serves no such request, or for a negative cost.
func Report(w http.ResponseWriter, cost int64) bool {
	if cost < 0 {
		return false
	}
	for w != nil {
		if m, ok := w.(*meter); ok {
			m.reported.Add(cost)
			return true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return false
		}
		w = u.Unwrap()
	}
	return false
}

// reserved are the headers a CostHeader must not name: the middleware's
// own, and those that frame the response, which removing would break.
var reserved = map[string]bool{
	hdrPolicy: true, hdrRateLimit: true, hdrRetryAfter: true, hdrLimit: true, hdrRemaining: true, hdrReset: true,
	"Content-Length": true, "Content-Type": true, "Content-Encoding": true, "Transfer-Encoding": true, "Trailer": true,
	"Connection": true, "Date": true, "Location": true, "Set-Cookie": true, "Upgrade": true, "Keep-Alive": true,
}

// costHeader checks a CostHeader's name, and returns its canonical form.
func costHeader(name string) (string, error) {
	if len(name) > 256 {
		return "", fmt.Errorf("CostHeader of %d bytes: at most 256", len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return "", fmt.Errorf("CostHeader %q is not a header name", name)
		}
	}
	c := http.CanonicalHeaderKey(name)
	if reserved[c] {
		return "", fmt.Errorf("CostHeader %q: the response needs that header; name one of your own", name)
	}
	return c, nil
}
