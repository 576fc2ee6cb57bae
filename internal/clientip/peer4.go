package clientip

// peer4 reads s as the usual RemoteAddr of an IPv4 peer: "a.b.c.d" or
// "a.b.c.d:port", each octet a decimal from 0 to 255 without a leading
// zero, the port 1 to 5 decimal digits worth at most 65535. It returns
// the host part, which is then the address in the very form
// netip.Addr.String writes, and the address's bytes. Anything else (a
// leading zero, a zone, brackets, an IPv6 or IPv4-mapped address, a
// longer or signed port) is not read, ok is false, and the caller takes
// the general path, which decides it: peer4 only ever accepts what
// ParseAddr reads as the same IPv4 address, so the fast path and the
// general one key every input alike (FuzzPeer4 holds them to it).
func peer4(s string) (host string, a [4]byte, ok bool) {
	k, v, digits := 0, 0, 0 // the octet, its value and digits so far
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if d := c - '0'; d <= 9 {
			if digits == 1 && v == 0 {
				return "", a, false // a leading zero
			}
			// Without a leading zero, a fourth digit makes v above 255.
			if v = 10*v + int(d); v > 255 {
				return "", a, false
			}
			digits++
			continue
		}
		if c != '.' {
			break
		}
		if digits == 0 || k == 3 {
			return "", a, false
		}
		a[k], k, v, digits = byte(v), k+1, 0, 0
	}
	if k != 3 || digits == 0 {
		return "", a, false
	}
	a[3], host = byte(v), s[:i]
	if i == len(s) {
		return host, a, true
	}
	port := s[i+1:]
	if s[i] != ':' || len(port) == 0 || len(port) > 5 {
		return "", a, false
	}
	p := 0
	for j := 0; j < len(port); j++ {
		d := port[j] - '0'
		if d > 9 {
			return "", a, false
		}
		p = 10*p + int(d)
	}
	if p > 65535 {
		return "", a, false
	}
	return host, a, true
}
