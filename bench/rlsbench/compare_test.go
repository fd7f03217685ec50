package rlsbench

import (
	"errors"
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func answer() *pb.RateLimitResponse {
	return &pb.RateLimitResponse{
		OverallCode: pb.RateLimitResponse_OVER_LIMIT,
		Statuses: []*pb.RateLimitResponse_DescriptorStatus{
			{Code: pb.RateLimitResponse_OK},
			{Code: pb.RateLimitResponse_OVER_LIMIT, CurrentLimit: &pb.RateLimitResponse_RateLimit{Name: "n", RequestsPerUnit: 5, Unit: pb.RateLimitResponse_RateLimit_MINUTE},
				DurationUntilReset: durationpb.New(42e9)},
		},
		ResponseHeadersToAdd: []*core.HeaderValue{{Key: "RateLimit-Limit", Value: "5"}},
	}
}

// TestDiff checks that every field the differential compares is reported
// by its name, and that equal answers give nothing.
func TestDiff(t *testing.T) {
	if ms := Diff(answer(), nil, answer(), nil); len(ms) != 0 {
		t.Fatalf("equal answers: %v", ms)
	}
	cases := []struct {
		field  string
		change func(*pb.RateLimitResponse)
	}{
		{"overall_code", func(r *pb.RateLimitResponse) { r.OverallCode = pb.RateLimitResponse_OK }},
		{"len(statuses)", func(r *pb.RateLimitResponse) { r.Statuses = r.Statuses[:1] }},
		{"statuses[1].code", func(r *pb.RateLimitResponse) { r.Statuses[1].Code = pb.RateLimitResponse_OK }},
		{"statuses[0].current_limit", func(r *pb.RateLimitResponse) { r.Statuses[0].CurrentLimit = &pb.RateLimitResponse_RateLimit{} }},
		{"statuses[1].current_limit.name", func(r *pb.RateLimitResponse) { r.Statuses[1].CurrentLimit.Name = "" }},
		{"statuses[1].current_limit.requests_per_unit", func(r *pb.RateLimitResponse) { r.Statuses[1].CurrentLimit.RequestsPerUnit = 6 }},
		{"statuses[1].current_limit.unit", func(r *pb.RateLimitResponse) { r.Statuses[1].CurrentLimit.Unit = pb.RateLimitResponse_RateLimit_SECOND }},
		{"statuses[0].limit_remaining", func(r *pb.RateLimitResponse) { r.Statuses[0].LimitRemaining = 1 }},
		{"statuses[1].duration_until_reset.seconds", func(r *pb.RateLimitResponse) { r.Statuses[1].DurationUntilReset.Seconds = 41 }},
		{"statuses[1].duration_until_reset.nanos", func(r *pb.RateLimitResponse) { r.Statuses[1].DurationUntilReset.Nanos = 1 }},
		{"statuses[0].duration_until_reset", func(r *pb.RateLimitResponse) { r.Statuses[0].DurationUntilReset = durationpb.New(0) }},
		{"response_headers_to_add", func(r *pb.RateLimitResponse) { r.ResponseHeadersToAdd[0].Value = "4" }},
		{"request_headers_to_add", func(r *pb.RateLimitResponse) { r.RequestHeadersToAdd = []*core.HeaderValue{{Key: "a"}} }},
		{"other fields", func(r *pb.RateLimitResponse) { r.RawBody = []byte("x") }},
	}
	for _, c := range cases {
		got := answer()
		c.change(got)
		ms := Diff(answer(), nil, got, nil)
		if !slices.ContainsFunc(ms, func(m Mismatch) bool { return m.Field == c.field }) {
			t.Errorf("%s: got %v", c.field, ms)
		}
	}
	if ms := Diff(nil, status.Error(codes.Unavailable, "x"), nil, status.Error(codes.Unavailable, "y")); len(ms) != 0 {
		t.Errorf("same gRPC code: %v", ms)
	}
	if ms := Diff(nil, status.Error(codes.Unknown, "x"), answer(), nil); len(ms) != 1 || ms[0].Field != "grpc_status" {
		t.Errorf("error against an answer: %v", ms)
	}
	if ms := Diff(answer(), nil, nil, errors.New("boom")); len(ms) != 1 || ms[0].Field != "grpc_status" {
		t.Errorf("answer against an error: %v", ms)
	}
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_incrby:calls=200,usec=300,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_expire:calls=200,usec=100\r\ncmdstat_info:calls=3,usec=9\r\ncmdstat_config|resetstat:calls=1,usec=1\r\n" +
		"cmdstat_evalsha:calls=100,usec=900\r\ncmdstat_ping:calls=2,usec=1\r\n"
	got := ParseCommandStats(info)
	want := map[string]int64{"incrby": 200, "expire": 200, "evalsha": 100, "ping": 2}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %d, want %d", k, got[k], v)
		}
	}
}

func TestParseMonitor(t *testing.T) {
	cases := []struct{ line, src, cmd string }{
		{`+1732550000.123456 [0 127.0.0.1:5555] "INCRBY" "k" "1"` + "\r\n", "127.0.0.1:5555", "incrby"},
		{`+1732550000.123456 [0 lua] "expire" "k" "60"` + "\r\n", "lua", "expire"},
		{`+1732550000.123456 [3 unix:/tmp/r.sock] "evalsha" "abc" "1"` + "\r\n", "unix:/tmp/r.sock", "evalsha"},
	}
	for _, c := range cases {
		src, cmd, ok := parseMonitor(c.line)
		if !ok || src != c.src || cmd != c.cmd {
			t.Errorf("%q: got %q %q %v", c.line, src, cmd, ok)
		}
	}
	if _, _, ok := parseMonitor("+OK\r\n"); ok {
		t.Error("+OK parsed as a command")
	}
}
