package redislimit

import (
	"crypto/sha256"
	"encoding/hex"
)

// redisKey returns the Redis key that holds key's state: the policy's head
// ("<Prefix>:<algorithm>:" for a Limiter, "<Prefix>:<policy>:<algorithm>:"
// for a Store's policy) and 32 hex digits of key's SHA-256, in braces for
// a Store's policy, after its tag's with Config.HashTag.
func (p *policy) redisKey(key string) string {
	return hashedKey(p.keyHead, key, p.tagged, p.tag)
}

// hashedKey is the Redis key under head of client key (see policy.redisKey):
// with tag, the tag's hash in braces, then key's; else key's hash, in
// braces if tagged.
func hashedKey(head, key string, tagged bool, tag func(string) string) string {
	var h [32]byte
	hashInto(&h, key)
	if tag != nil {
		var t [32]byte
		hashInto(&t, tag(key))
		return head + "{" + string(t[:]) + "}:" + string(h[:])
	}
	if tagged {
		return head + "{" + string(h[:]) + "}"
	}
	return head + string(h[:])
}

// keyHash is the 32 hex digits of key's SHA-256 that name its state in
// Redis (see Key).
func keyHash(key string) string {
	var h [32]byte
	hashInto(&h, key)
	return string(h[:])
}

// hashInto writes key's hash (see keyHash) into h.
func hashInto(h *[32]byte, key string) {
	sum := sha256.Sum256([]byte(key))
	hex.Encode(h[:], sum[:16])
}
