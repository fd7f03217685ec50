package main

import "testing"

func TestAnalyze(t *testing.T) {
	// Windows of 3 buckets: the sweep adds up 4 consecutive buckets.
	buckets := []int64{10, 0, 0, 0, 10, 30, 40, 5, 100, 0, 0, 7}
	total, peak := analyze(buckets, 3)
	if total != 202 {
		t.Errorf("total = %d, want 202", total)
	}
	if peak != 175 { // 30 + 40 + 5 + 100
		t.Errorf("peak = %d, want 175", peak)
	}
	if total, peak := analyze(nil, 3); total != 0 || peak != 0 {
		t.Errorf("analyze(nil) = %d, %d; want 0, 0", total, peak)
	}
	if _, peak := analyze([]int64{1, 2, 3}, 10); peak != 6 {
		t.Errorf("peak over fewer buckets than a window = %d, want 6", peak)
	}
}

func TestSinkBuckets(t *testing.T) {
	s := newSink(100 * bucketWidth)
	if len(s.buckets) != 100 {
		t.Fatalf("newSink made %d buckets, want 100", len(s.buckets))
	}
}
