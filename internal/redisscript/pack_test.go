package redisscript

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

// packCases are doubles at every edge of the encoding: zeros of both
// signs, the smallest and largest subnormals and normals, infinities,
// integers up to 2^53 (the scripts' values), fractions and random bit
// patterns. (NaN is left out: the pure path cannot see its payload.)
func packCases() []float64 {
	xs := []float64{
		0, math.Copysign(0, -1), 1, -1, 0.5, 0.1, -0.1, 1.5, 3, 1e6, 1.78e15,
		math.SmallestNonzeroFloat64, -math.SmallestNonzeroFloat64,
		math.Float64frombits(0x000fffffffffffff), // largest subnormal
		math.Float64frombits(0x0010000000000000), // smallest normal
		math.MaxFloat64, -math.MaxFloat64, math.Inf(1), math.Inf(-1),
		1 << 52, 1<<53 - 1, 1 << 53, -(1 << 53), 1e300, 1e-300,
	}
	r := rand.New(rand.NewPCG(1, 2))
	for len(xs) < 400 {
		x := math.Float64frombits(r.Uint64())
		if !math.IsNaN(x) {
			xs = append(xs, x)
		}
		xs = append(xs, float64(r.Int64N(1<<53)))
	}
	return xs
}

// packCheck compares, inside the server, the pure-Lua pair with what it
// is given: ARGV[1] holds the doubles as Go packs them. It replies with
// the index of the first double the pure path packs or unpacks otherwise
// (or whose bytes struct, if present, gives otherwise), 0 if none, and
// whether struct was there. Comparisons are on bytes, so -0 and 0 differ.
var packCheck = New(`
local s, n = ARGV[1], #ARGV[1] / 8
for i = 1, n do
  local b = string.sub(s, 8 * i - 7, 8 * i)
  local x, nxt = pureUnpack('<d', s, 8 * i - 7)
  if nxt ~= 8 * i + 1 or purePack('<d', x) ~= b then return {i, 0} end
  local y = unpackd('<d', b)
  if packd('<d', y) ~= b or purePack('<d', y) ~= b then return {i, 1} end
end
local all = {pureUnpack('<' .. string.rep('d', n), s)}
if #all ~= n + 1 or all[n + 1] ~= 8 * n + 1 or purePack('<' .. string.rep('d', n), unpack(all, 1, n)) ~= s then
  return {-1, 0}
end
local ok, st = pcall(function() return struct end)
local has = 0
if ok and st then has = 1 end
return {0, has}
`)

func runPackCheck(t *testing.T, c redis.UniversalClient, wantStruct int64) {
	t.Helper()
	xs := packCases()
	// At most ~250 values a run: unpack of a longer list exceeds Lua's
	// stack in some servers.
	for len(xs) > 0 {
		k := min(len(xs), 200)
		v, err := packCheck.Run(context.Background(), c, nil, string(AppendDoubles(nil, xs[:k]...))).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		if v[0] != 0 {
			i := v[0] - 1
			if i < 0 {
				t.Fatalf("the many-double pack or unpack differs")
			}
			t.Fatalf("double %v (%#016x): pure Lua differs (stage %d)", xs[i], math.Float64bits(xs[i]), v[1])
		}
		if v[1] != wantStruct {
			t.Fatalf("struct present = %d, want %d", v[1], wantStruct)
		}
		xs = xs[k:]
	}
}

// TestPureLuaPackMatchesStruct: on redis-server, which has struct, the
// pure-Lua pair packs every case to the bytes struct.pack and Go give, and
// unpacks them to the same numbers: a state written where struct is
// missing is read where it is present, and the reverse.
func TestPureLuaPackMatchesStruct(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	runPackCheck(t, c, 1)
}

// TestPureLuaPackOnMiniredis: on miniredis, which lacks struct, the
// prelude picks the pure pair and it agrees with Go's encoding.
func TestPureLuaPackOnMiniredis(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	runPackCheck(t, c, 0)
}

func TestDouble(t *testing.T) {
	for _, x := range packCases() {
		s := string(AppendDoubles([]byte("pad....."), 7, x))
		if got := Double(s, 2); math.Float64bits(got) != math.Float64bits(x) {
			t.Fatalf("Double of %v = %v", x, got)
		}
	}
	b := AppendInts(nil, 1<<53, -5)
	if Double(string(b), 0) != 1<<53 || Double(string(b), 1) != -5 {
		t.Fatalf("AppendInts: %x", b)
	}
}

// FuzzPureLuaPack: the pure-Lua pair, on miniredis, unpacks any double's
// bytes to the number Go reads from them and packs it back to the same
// bytes (NaNs aside: their payload is invisible to Lua).
//
//	go test ./internal/redisscript -run XXX -fuzz FuzzPureLuaPack -fuzztime 30s
func FuzzPureLuaPack(f *testing.F) {
	f.Add(uint64(0x8000000000000000))
	f.Add(uint64(0x7fefffffffffffff))
	f.Add(uint64(1))
	mr := miniredis.RunT(f)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	f.Cleanup(func() { _ = c.Close() })
	roundTrip := New(`local x = pureUnpack('<d', ARGV[1]); return {purePack('<d', x), string.format('%.17g', x)}`)
	f.Fuzz(func(t *testing.T, bits uint64) {
		x := math.Float64frombits(bits)
		if math.IsNaN(x) {
			t.Skip()
		}
		in := string(AppendDoubles(nil, x))
		v, err := roundTrip.Run(context.Background(), c, nil, in).Slice()
		if err != nil {
			t.Fatal(err)
		}
		if v[0] != in {
			t.Fatalf("%v (%#016x): packed back as %x", x, bits, v[0])
		}
		if want := strconv.FormatFloat(x, 'g', 17, 64); !sameNumber(v[1].(string), x) {
			t.Fatalf("%v (%#016x): unpacked as %s, want %s", x, bits, v[1], want)
		}
	})
}

// sameNumber reports whether Lua's %.17g text s is x (the infinities and
// the zeros' signs as Lua prints them).
func sameNumber(s string, x float64) bool {
	switch {
	case math.IsInf(x, 1):
		return s == "inf" || s == "+Inf" || s == "Inf"
	case math.IsInf(x, -1):
		return s == "-inf" || s == "-Inf"
	}
	y, err := strconv.ParseFloat(s, 64)
	return err == nil && y == x
}
