package throttle

import (
	"math/bits"
	"math/rand/v2"
	"unsafe"
)

// The MemoryStore's key hash. It is wyhash, as the Go runtime hashes map
// keys on processors without AES instructions (runtime/hash64.go), keyed
// by four secret random words per store: the keys are the callers' (IP
// addresses, user ids, API keys), so they may be chosen by an attacker,
// and a hash an attacker could predict would let him pile keys onto one
// shard's probe sequence. Written out here rather than taken from
// hash/maphash, whose String goes through three calls (maphash.String,
// rthashString, memhash) before the AES code: for the short keys of a
// limiter those calls are a large part of a decision, and the fewer
// instructions a decision runs, the sooner the next one's memory
// references begin (bench/keyed/instructions.sh counts them).

// hashSeed is a store's secret key for keyHash.
type hashSeed [4]uint64

// newHashSeed draws a seed from math/rand/v2's global source (ChaCha8,
// seeded by the operating system: unpredictable).
func newHashSeed() hashSeed {
	return hashSeed{rand.Uint64(), rand.Uint64(), rand.Uint64(), rand.Uint64()}
}

// strHash is wyhash of s under seed.
func strHash(seed *hashSeed, s string) uint64 {
	const m5 = 0x1d8e4e27c47d124f
	h := seed[0]
	n := len(s)
	var a, b uint64
	switch {
	case n == 0:
		return h
	case n < 4:
		a = uint64(s[0]) | uint64(s[n>>1])<<8 | uint64(s[n-1])<<16
	case n <= 8:
		a = uint64(r4(s, 0))
		b = uint64(r4(s, n-4))
	case n <= 16:
		a = r8(s, 0)
		b = r8(s, n-8)
	default:
		p := 0
		l := n
		if l > 48 {
			h1, h2 := h, h
			for ; l > 48; l -= 48 {
				h = mix(r8(s, p)^seed[1], r8(s, p+8)^h)
				h1 = mix(r8(s, p+16)^seed[2], r8(s, p+24)^h1)
				h2 = mix(r8(s, p+32)^seed[3], r8(s, p+40)^h2)
				p += 48
			}
			h ^= h1 ^ h2
		}
		for ; l > 16; l -= 16 {
			h = mix(r8(s, p)^seed[1], r8(s, p+8)^h)
			p += 16
		}
		a = r8(s, p+l-16)
		b = r8(s, p+l-8)
	}
	return mix(m5^uint64(n), mix(a^seed[1], b^h))
}

// A short key, of minShortKey to maxShortKey bytes, is read by wyhash
// into two words that together hold every one of its bytes (shortKeyOf).
const minShortKey, maxShortKey = 4, 16

// shortKey is a short key as wyhash reads it: its length and its two
// words, so that two short keys are equal exactly when their shortKeys
// are. allow hashes a short key from it and find compares it, without a
// call.
type shortKey struct{ a, b, n uint64 }

// shortKeyOf reads key, of minShortKey to maxShortKey bytes, as strHash
// does.
func shortKeyOf(key string) shortKey {
	n := uintptr(len(key))
	p := unsafe.Pointer(unsafe.StringData(key))
	if n > 8 {
		return shortKey{a: load64(p), b: load64(unsafe.Add(p, n-8)), n: uint64(n)}
	}
	return shortKey{a: load32(p), b: load32(unsafe.Add(p, n-4)), n: uint64(n)}
}

// hash is strHash of the key k was read from.
func (k shortKey) hash(seed *hashSeed) uint64 {
	const m5 = 0x1d8e4e27c47d124f
	return mix(m5^k.n, mix(k.a^seed[1], k.b^seed[0]))
}

// mix is the 128-bit product of a and b, folded.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// r8 reads s[i:i+8] as a little-endian word.
func r8(s string, i int) uint64 {
	_ = s[i+7]
	return load64(unsafe.Add(unsafe.Pointer(unsafe.StringData(s)), i))
}

// r4 reads s[i:i+4] as a little-endian word.
func r4(s string, i int) uint32 {
	_ = s[i+3]
	return uint32(load32(unsafe.Add(unsafe.Pointer(unsafe.StringData(s)), i)))
}
