package throttle

import (
	"fmt"
	"strings"
	"testing"
)

// TestStrHashReadsEveryByte: for every length up to 200 (every branch of
// strHash and every tail of its loops), changing any one byte of the key
// changes its hash, and the same key hashes the same under the same seed
// and differently under another.
func TestStrHashReadsEveryByte(t *testing.T) {
	seed, other := newHashSeed(), newHashSeed()
	for n := 0; n <= 200; n++ {
		b := []byte(strings.Repeat("k", n))
		for i := range b {
			b[i] = byte('a' + i*7%26)
		}
		s := string(b)
		h := strHash(&seed, s)
		if strHash(&seed, strings.Clone(s)) != h {
			t.Fatalf("len %d: two hashes of the same key differ", n)
		}
		if strHash(&other, s) == h {
			t.Errorf("len %d: two seeds give the same hash", n)
		}
		for i := range b {
			c := b[i]
			b[i] ^= 1 << (i % 8)
			if strHash(&seed, string(b)) == h {
				t.Errorf("len %d: changing byte %d does not change the hash", n, i)
			}
			b[i] = c
		}
	}
}

// TestKeyHashSpreads: 200 000 keys that differ only in a counter, the
// kind an API sees ("user:1", "user:2", ...), spread evenly over 64
// shards (the hash's low bits) and over 64 table positions (its high 32
// bits, the tag, scaled): no bucket strays from the mean by more than
// 5 % (for a uniform hash the standard deviation is 0.9 % of the mean).
func TestKeyHashSpreads(t *testing.T) {
	seed := newHashSeed()
	const keys, buckets = 200_000, 64
	var low, high [buckets]int
	for i := range keys {
		h := keyHash(&seed, GCRA, fmt.Sprintf("user:%d", i))
		low[h%buckets]++
		high[home(tag(h), buckets)]++
	}
	mean := keys / buckets
	for i := range buckets {
		for _, c := range []struct {
			name string
			n    int
		}{{"low bits", low[i]}, {"tag", high[i]}} {
			if d := c.n - mean; d > mean/20 || d < -mean/20 {
				t.Errorf("%s: bucket %d holds %d keys, mean %d", c.name, i, c.n, mean)
			}
		}
	}
}
