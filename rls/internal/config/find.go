package config

import (
	"encoding/binary"
	"strings"
	"unsafe"
)

// This file finds the rule for a request's descriptor (Find, AppendKey)
// and the rule that a reload made of one (Same), and writes and reads the
// fields of the keys that they count under.

// AppendField appends s to dst as AppendKey writes each field of a key:
// its length as a uvarint, then its bytes, so that no two sequences of
// fields make one key.
func AppendField(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// CutField splits the first field off key, a key AppendKey or
// AppendField wrote; ok is false for an empty key or one they did not
// write.
func CutField(key string) (field, rest string, ok bool) {
	n, w := binary.Uvarint([]byte(key[:min(len(key), binary.MaxVarintLen64)]))
	if w <= 0 || uint64(len(key)-w) < n {
		return "", key, false
	}
	return key[w : w+int(n)], key[w+int(n):], true
}

// Same returns c's rule at the place l holds in its own Config's
// descriptor tree (the same domain, and the same key or key_value at
// every level), or nil: after a reload, the rule that l became.
func (c *Config) Same(l *Limit) *Limit {
	domain, p, _ := CutField(l.path)
	n := c.domains[domain]
	for n != nil {
		kv, rest, ok := CutField(p)
		if !ok {
			return n.limit
		}
		n, p = n.child(kv), rest
	}
	return nil
}

// Find returns the rule for a descriptor of domain, or nil: each entry
// is looked up at its level as key_value, then against the level's
// wildcard values in file order, then as its key alone; a rule applies
// only to a descriptor whose last entry reaches it.
func (c *Config) Find(domain string, entries []Entry) *Limit {
	l, _ := c.AppendKey(nil, domain, entries)
	return l
}

// AppendKey is Find that also appends to dst the key under which the
// rule counts this descriptor, when there is a rule (dst is returned
// unchanged when there is none): each entry's key and value, each
// prefixed by its length so that no two descriptors share a key by
// their separators, except that an entry matched by a share_threshold
// wildcard contributes the pattern, so that every value it matches
// shares one count.
func (c *Config) AppendKey(dst []byte, domain string, entries []Entry) (*Limit, []byte) {
	n := c.domains[domain]
	if n == nil {
		return nil, dst
	}
	start := len(dst)
	var buf [1 << 10]byte
	for i, e := range entries {
		kv := keyValue(&buf, e) // valid until the next entry: nothing keeps it
		next := n.child(kv)
		if next == nil {
			for _, w := range n.wild {
				if wildMatch(w.parts, kv) {
					next = n.child(w.key)
					break
				}
			}
		}
		if next == nil {
			next = n.child(e.Key)
		}
		if next == nil {
			return nil, dst[:start]
		}
		value := e.Value
		if next.shared != "" {
			value = next.shared
		}
		dst = AppendField(AppendField(dst, e.Key), value)
		if i == len(entries)-1 {
			if next.limit == nil {
				return nil, dst[:start]
			}
			return next.limit, dst
		}
		if next.one == nil && len(next.children) == 0 {
			return nil, dst[:start]
		}
		n = next
	}
	return nil, dst[:start]
}

// keyValue returns e's key_value, built in buf when it fits, so that a
// lookup allocates nothing. The string shares buf's bytes: it must not be
// kept past buf's next use.
func keyValue(buf *[1 << 10]byte, e Entry) string {
	if len(e.Key)+1+len(e.Value) > len(buf) {
		return e.Key + "_" + e.Value
	}
	kv := append(append(append(buf[:0], e.Key...), '_'), e.Value...)
	return unsafe.String(&kv[0], len(kv))
}

// wildMatch reports whether s matches the pattern split into parts at
// each *.
func wildMatch(parts []string, s string) bool {
	if len(parts) == 1 {
		return parts[0] == s
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	rest := s[len(first) : len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}
