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
// kind an API sees ("user:1", "user:2", ...), spread over 64 shards (the
// hash's low bits) and over 64 table positions (its high 32 bits, the tag,
// scaled) as a uniform hash would: Pearson's χ² over the 64 buckets, which
// has 63 degrees of freedom (mean 63, standard deviation 11.2) for a
// uniform hash, stays below 130 (six standard deviations: a uniform hash
// fails about once in a million runs; a hash that ignored a byte, or mixed
// its low bits badly, puts many keys in few buckets: without its final
// multiplication, χ² comes out in the millions).
func TestKeyHashSpreads(t *testing.T) {
	seed := newHashSeed()
	const keys, buckets = 200_000, 64
	var low, high [buckets]float64
	for i := range keys {
		h := keyHash(&seed, GCRA, fmt.Sprintf("user:%d", i))
		low[h%buckets]++
		high[home(tag(h), buckets)]++
	}
	for _, c := range []struct {
		name   string
		counts [buckets]float64
	}{{"low bits", low}, {"tag", high}} {
		const mean = float64(keys) / buckets
		chi2 := 0.0
		for _, n := range c.counts {
			chi2 += (n - mean) * (n - mean) / mean
		}
		if chi2 > 130 {
			t.Errorf("%s: χ² = %.1f over %d buckets (counts %v), want below 130", c.name, chi2, buckets, c.counts)
		}
	}
}

// TestKeyWordsHoldShortKeys: a short key is its words (keyWords.key is
// wordsOf's inverse), and two short keys of one length have the same
// words only if they are the same key, so that comparing words compares
// keys.
func TestKeyWordsHoldShortKeys(t *testing.T) {
	for n := minShortKey; n <= maxShortKey; n++ {
		if !isShort(n) || isShort(minShortKey-1) || isShort(maxShortKey+1) {
			t.Fatalf("isShort is not %d to %d bytes", minShortKey, maxShortKey)
		}
		base := []byte(strings.Repeat("k", n))
		for i := range n {
			for _, c := range []byte{0, 'x', 0xff} {
				b := append([]byte(nil), base...)
				b[i] = c
				key := string(b)
				w := wordsOf(key)
				if got := w.key(n); got != key {
					t.Fatalf("wordsOf(%q).key(%d) = %q", key, n, got)
				}
				if w == wordsOf(string(base)) {
					t.Fatalf("%q and %q have the same words %+v", key, base, w)
				}
			}
		}
	}
}
