package main

import (
	"testing"
	"time"
)

func TestAnalyze(t *testing.T) {
	at := func(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }
	recs := []record{
		{at(0), 10},
		{at(50), 10},
		{at(120), 30}, // with 150 and 199: 30+40+5 = 75 within [120, 220)
		{at(150), 40},
		{at(199), 5},
		{at(220), 100}, // [150, 250): 40+5+100 = 145, the peak
		{at(300), 7},   // at the end: not counted
		{at(400), 1000},
	}
	total, peak := analyze(recs, at(300), 100*time.Millisecond)
	if total != 195 {
		t.Errorf("total = %d, want 195 (the bytes before 300 ms)", total)
	}
	if peak != 145 {
		t.Errorf("peak = %d, want 145 (150, 199 and 220 ms)", peak)
	}
	if total, peak := analyze(nil, at(300), time.Second); total != 0 || peak != 0 {
		t.Errorf("analyze(nil) = %d, %d; want 0, 0", total, peak)
	}
}
