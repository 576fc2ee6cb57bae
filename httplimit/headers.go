package httplimit

import (
	"fmt"
	"math"
	"math/bits"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/plan"
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

// restrictive is the most restrictive of the shown policies' answers
// (see plan.Pick): the fewest remaining, the longest ResetAfter among
// equals, the first of equals; the zero Decision if none is shown. It
// copies only the answer it returns.
func restrictive(each []floodgate.Decision, shown []int) floodgate.Decision {
	var best plan.Pick
	for k, i := range shown {
		best.Offer(k, plan.Answer{Remaining: each[i].Remaining, ResetAfter: each[i].ResetAfter})
	}
	if k := best.Index(); k >= 0 {
		return each[shown[k]]
	}
	return floodgate.Decision{}
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

// rateLimitItems is s.Items: for each shown policy, the start of its
// RateLimit item, `"name";r=`, after ", " for all but the first.
func rateLimitItems(s *policy.Set) []string {
	items := make([]string, len(s.Shown))
	for k, i := range s.Shown {
		sep := ", "
		if k == 0 {
			sep = ""
		}
		items[k] = sep + `"` + s.Names[i] + `";r=`
	}
	return items
}

// rateLimit is the RateLimit header's value for s: one item per shown
// policy, what it has left and the whole seconds until it is full again,
// rounded up, each clamped to maxSF. each holds the answers of s's
// policies.
//
// It makes one allocation, where a []string holding a new string takes
// two: the value is written into a newValue object, which holds the
// string's bytes beside the one-element array that the returned slice
// is. net/http replaces a header's value slice and never writes into one,
// and nothing else holds the object, so the bytes never change once the
// string is made.
func rateLimit(s *policy.Set, each []floodgate.Decision) []string {
	var nums [2 * floodgate.MaxPolicies]int64
	n := 0
	for k, i := range s.Shown {
		r, t := min(max(0, each[i].Remaining), maxSF), min(ceilSeconds(each[i].ResetAfter), maxSF)
		nums[2*k], nums[2*k+1] = r, t
		n += len(s.Items[k]) + digits(uint64(r)) + len(";t=") + digits(uint64(t))
	}
	v, b := newValue(n)
	for k := range s.Shown {
		b = append(b, s.Items[k]...)
		b = appendSF(b, nums[2*k])
		b = append(b, ";t="...)
		b = appendSF(b, nums[2*k+1])
	}
	// n is the value's exact length, so b never outgrows the room
	// newValue gave it; if it did, append would have moved it to an array
	// of its own, which the string would then hold, as correct.
	v[0] = unsafe.String(unsafe.SliceData(b), len(b))
	return v
}

// The objects newValue makes: a header value's one-element slice and the
// bytes of its string, sized so that each object fills one of the
// runtime's size classes (48 to 128 bytes, and 256).
type (
	value48 struct {
		v [1]string
		b [32]byte
	}
	value64 struct {
		v [1]string
		b [48]byte
	}
	value80 struct {
		v [1]string
		b [64]byte
	}
	value96 struct {
		v [1]string
		b [80]byte
	}
	value128 struct {
		v [1]string
		b [112]byte
	}
	value256 struct {
		v [1]string
		b [240]byte
	}
)

// newValue returns a header value of one string and an empty slice of at
// least n bytes' room for that string's bytes: in one allocation, of the
// smallest object above that n fits, or in two past 240 bytes (a RateLimit
// value for up to five policies, each named in up to 8 characters, or for
// one named in 64, fits).
func newValue(n int) ([]string, []byte) {
	switch {
	case n <= len(value48{}.b):
		p := new(value48)
		return p.v[:], p.b[:0]
	case n <= len(value64{}.b):
		p := new(value64)
		return p.v[:], p.b[:0]
	case n <= len(value80{}.b):
		p := new(value80)
		return p.v[:], p.b[:0]
	case n <= len(value96{}.b):
		p := new(value96)
		return p.v[:], p.b[:0]
	case n <= len(value128{}.b):
		p := new(value128)
		return p.v[:], p.b[:0]
	case n <= len(value256{}.b):
		p := new(value256)
		return p.v[:], p.b[:0]
	}
	return make([]string, 1), make([]byte, 0, n)
}

// pairs are the decimals 00 to 99, two bytes each, for appendSF.
const pairs = "00010203040506070809" + "10111213141516171819" + "20212223242526272829" +
	"30313233343536373839" + "40414243444546474849" + "50515253545556575859" +
	"60616263646566676869" + "70717273747576777879" + "80818283848586878889" + "90919293949596979899"

// appendSF appends v, from 0 to maxSF, in decimal: strconv.AppendInt
// without the generality a header's numbers never need, two digits at a
// time, written in place from the right once digits has counted them.
func appendSF(b []byte, v int64) []byte {
	u := uint64(v)
	n, l := digits(u), len(b)
	b = slices.Grow(b, n)[:l+n]
	d := b[l:]
	for i := n; u >= 100; i -= 2 {
		q := u / 100
		r := 2 * (u - 100*q)
		d[i-1], d[i-2] = pairs[r+1], pairs[r]
		u = q
	}
	if u >= 10 {
		d[1], d[0] = pairs[2*u+1], pairs[2*u]
	} else {
		d[0] = byte('0' + u)
	}
	return b
}

// pow10 are the powers of ten that a uint64 holds, for digits.
var pow10 = [...]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9,
	1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19}

// digits is the number of decimal digits of u: its bit length times
// log10(2) (1233/4096) is the count or one less, and one comparison says
// which. u|1 has u's digits and counts 0 as one digit.
func digits(u uint64) int {
	u |= 1
	t := bits.Len64(u) * 1233 >> 12
	if u >= pow10[t] {
		t++
	}
	return t
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
