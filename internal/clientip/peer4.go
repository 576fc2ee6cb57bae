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
	i := 0
	for k := range a {
		if k > 0 {
			if i >= len(s) || s[i] != '.' {
				return "", a, false
			}
			i++
		}
		start, v := i, 0
		for i < len(s) && i-start < 3 && '0' <= s[i] && s[i] <= '9' {
			v = v*10 + int(s[i]-'0')
			i++
		}
		if n := i - start; n == 0 || v > 255 || n > 1 && s[start] == '0' {
			return "", a, false
		}
		a[k] = byte(v)
	}
	host = s[:i]
	if i == len(s) {
		return host, a, true
	}
	port := s[i+1:]
	if s[i] != ':' || len(port) == 0 || len(port) > 5 {
		return "", a, false
	}
	p := 0
	for j := 0; j < len(port); j++ {
		c := port[j]
		if c < '0' || c > '9' {
			return "", a, false
		}
		p = p*10 + int(c-'0')
	}
	if p > 65535 {
		return "", a, false
	}
	return host, a, true
}
