package redisscript

import (
	"encoding/binary"
	"math"
)

// AppendDoubles appends xs to b as little-endian IEEE doubles, the layout
// the scripts read with unpackd('<dd...'), bit for bit.
func AppendDoubles(b []byte, xs ...float64) []byte {
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return b
}

// AppendInts appends vs to b as little-endian IEEE doubles. Every v must
// be an integer of magnitude at most 2^53, which a double holds exactly.
func AppendInts(b []byte, vs ...int64) []byte {
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(v)))
	}
	return b
}

// Double reads the little-endian IEEE double at s[8*i:].
func Double(s string, i int) float64 {
	return math.Float64frombits(binary.LittleEndian.Uint64([]byte(s[8*i : 8*i+8])))
}
