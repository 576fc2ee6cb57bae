package memcachelimit

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
)

// maxKey is memcached's longest key, in bytes.
const maxKey = 250

// legalKey reports whether memcached's text protocol takes k as a key
// (or a piece of one): no space, control byte or DEL, at most maxKey
// bytes.
func legalKey(k string) bool {
	if len(k) > maxKey {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] <= ' ' || k[i] == 0x7f {
			return false
		}
	}
	return true
}

// keyHead is the start of every key of a policy named name of algorithm
// alg: the prefix, the algorithm, and the name, its length first, so
// that the client's key that follows can be told from the name whatever
// the bytes of either: ("a", "bc") and ("ab", "c") are apart.
func keyHead(prefix, alg, name string) string {
	return prefix + alg + ":" + strconv.Itoa(len(name)) + ":" + name + ":"
}

// itemKey is the memcached key of client's state under head: head and
// client as they are when memcached can hold them as a key; else the
// prefix, '#', and the SHA-256 of head and client in base64url (43
// bytes). An algorithm's name never begins with '#', so the two forms
// never meet; two hashed keys meet only if SHA-256 collides, a chance of
// about 2^-128 for any two keys among 2^64.
func itemKey(prefix, head, client string) string {
	if len(head)+len(client) <= maxKey && legalKey(client) && legalKey(head) {
		return head + client
	}
	h := sha256.New()
	h.Write([]byte(head))
	h.Write([]byte(client))
	var sum [sha256.Size]byte
	var b strings.Builder
	b.Grow(len(prefix) + 1 + base64.RawURLEncoding.EncodedLen(sha256.Size))
	b.WriteString(prefix)
	b.WriteByte('#')
	var enc [44]byte
	base64.RawURLEncoding.Encode(enc[:], h.Sum(sum[:0]))
	b.Write(enc[:base64.RawURLEncoding.EncodedLen(sha256.Size)])
	return b.String()
}
