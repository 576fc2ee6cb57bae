package httplimit

import (
	"fmt"
	"math"
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/policy"
)

// The header names, in the canonical form http.Header keys take, so that
// an answer sets them without canonicalising them again.
var (
	hdrPolicy     = http.CanonicalHeaderKey("RateLimit-Policy")
	hdrRateLimit  = http.CanonicalHeaderKey("RateLimit")
	hdrRetryAfter = http.CanonicalHeaderKey("Retry-After")
	hdrLimit      = http.CanonicalHeaderKey("X-RateLimit-Limit")
	hdrRemaining  = http.CanonicalHeaderKey("X-RateLimit-Remaining")
	hdrReset      = http.CanonicalHeaderKey("X-RateLimit-Reset")
)

// policyHeader is the RateLimit-Policy value of s: one item per shown
// policy, its name with its quota and window (see quota). It is made once
// per Set, when its Route is built.
func policyHeader(s *policy.Set) string {
	var header strings.Builder
	for k, i := range s.Shown {
		if k > 0 {
			header.WriteString(", ")
		}
		q, w := quota(s.Specs[i].Rule)
		fmt.Fprintf(&header, "%q;q=%d;w=%d", s.Names[i], q, w)
	}
	return header.String()
}

// setLegacy sets X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset from dh, the most restrictive shown answer: the reset
// is the Unix time, in whole seconds rounded up, at which that policy is
// full again.
func setLegacy(h http.Header, dh floodgate.Decision) {
	reset := time.Now().Add(dh.ResetAfter)
	sec := reset.Unix()
	if reset.Nanosecond() > 0 {
		sec++
	}
	h[hdrLimit] = []string{strconv.FormatInt(dh.Limit, 10)}
	h[hdrRemaining] = []string{strconv.FormatInt(dh.Remaining, 10)}
	h[hdrReset] = []string{strconv.FormatInt(sec, 10)}
}

// setRetryAfter sets Retry-After to the wait of a refusal in whole
// seconds, rounded up, and at least 1.
func setRetryAfter(h http.Header, wait time.Duration) {
	h[hdrRetryAfter] = []string{strconv.FormatInt(max(1, ceilSeconds(wait)), 10)}
}

// restrictive is the most restrictive of the shown policies' answers: the
// fewest remaining, the longest ResetAfter among equals.
func restrictive(each []floodgate.Decision, shown []int) floodgate.Decision {
	var best floodgate.Decision
	for k, i := range shown {
		d := each[i]
		if k == 0 || d.Remaining < best.Remaining || d.Remaining == best.Remaining && d.ResetAfter > best.ResetAfter {
			best = d
		}
	}
	return best
}

// maxSF is the largest Integer of RFC 9651's Structured Fields: 15 digits.
// Every number in the RateLimit headers is clamped to it.
const maxSF = 999_999_999_999_999

// quota is a rule's RateLimit-Policy quota and window in seconds: the
// most a client can hold (so that RateLimit's r never exceeds q) and the
// time in which that much refills. For a Burst above Limit that is the
// burst, over Burst × Period / Limit; otherwise Limit over Period. Both
// are clamped to maxSF.
func quota(r floodgate.Rule) (q, w int64) {
	if r.Burst <= r.Limit {
		return min(r.Limit, maxSF), min(ceilSeconds(r.Period), maxSF)
	}
	// Burst × Period / Limit, rounded up: New checked that the burst
	// window fits, so the quotient fits too.
	hi, lo := bits.Mul64(uint64(r.Burst), uint64(r.Period))
	ns, rem := bits.Div64(hi, lo, uint64(r.Limit))
	if rem > 0 {
		ns++
	}
	return min(r.Burst, maxSF), min(ceilSeconds(time.Duration(min(ns, math.MaxInt64))), maxSF)
}

// rateLimit is the RateLimit header: one item per shown policy, what it
// has left and the whole seconds until it is full again, rounded up, each
// clamped to maxSF.
func rateLimit(names []string, each []floodgate.Decision, shown []int) string {
	var buf [256]byte
	b := buf[:0]
	for k, i := range shown {
		d := each[i]
		if k > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '"')
		b = append(b, names[i]...)
		b = append(b, `";r=`...)
		b = strconv.AppendInt(b, min(max(0, d.Remaining), maxSF), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, min(ceilSeconds(d.ResetAfter), maxSF), 10)
	}
	return string(b)
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if d > math.MaxInt64-time.Second {
		return int64(math.MaxInt64 / time.Second)
	}
	return int64((d + time.Second - 1) / time.Second)
}

// denyTooMany is the default Deny: 429 and a body that says only that.
func denyTooMany(w http.ResponseWriter, _ *http.Request, _ floodgate.Decision) {
	http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
}
