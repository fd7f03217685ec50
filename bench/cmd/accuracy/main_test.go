package main

import (
	"testing"
	"testing/synctest"
	"time"
)

// measure counts the calls that complete before the window ends: with calls
// of exactly 1 ms each, those ending at 1 ms … 999 ms, not the one ending at
// 1 s. synctest's fake clock makes the sleeps exact and instant.
func TestMeasure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := measure(func() { time.Sleep(time.Millisecond) }, time.Second)
		if n != 999 {
			t.Errorf("measure counted %d calls of 1 ms in 1 s, want 999", n)
		}
	})
}

func TestCell(t *testing.T) {
	if got, want := cell([]float64{0.999, 0.998, 1.0}), "0.9990 (0.9980–1.0000)"; got != want {
		t.Errorf("cell = %q, want %q", got, want)
	}
	if got, want := cell([]float64{0.5}), "**0.5000**"; got != want {
		t.Errorf("cell = %q, want %q", got, want)
	}
}
