package rlsbench

import (
	"fmt"
	"slices"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// Mismatch is one field that differs between the reference's answer and
// another server's, named as in rls.proto (statuses[1].limit_remaining).
type Mismatch struct {
	Field    string
	Ref, Got string
}

func (m Mismatch) String() string {
	return fmt.Sprintf("%s: reference %s, got %s", m.Field, m.Ref, m.Got)
}

// Diff compares two answers to the same call field by field: the gRPC
// status, overall_code, each status's code, current_limit (name,
// requests_per_unit, unit), limit_remaining, duration_until_reset (seconds
// and nanos apart), quota, and the headers to add; whatever else differs
// (dynamic metadata, raw body) is reported as one "other fields" mismatch.
func Diff(ref *pb.RateLimitResponse, refErr error, got *pb.RateLimitResponse, gotErr error) []Mismatch {
	var ms []Mismatch
	add := func(field string, r, g any) {
		ms = append(ms, Mismatch{Field: field, Ref: fmt.Sprint(r), Got: fmt.Sprint(g)})
	}
	if refErr != nil || gotErr != nil {
		rc, gc := "OK", "OK"
		if refErr != nil {
			rc = status.Code(refErr).String()
		}
		if gotErr != nil {
			gc = status.Code(gotErr).String()
		}
		if rc != gc {
			add("grpc_status", fmt.Sprintf("%s (%v)", rc, refErr), fmt.Sprintf("%s (%v)", gc, gotErr))
		}
		return ms
	}
	if ref.GetOverallCode() != got.GetOverallCode() {
		add("overall_code", ref.GetOverallCode(), got.GetOverallCode())
	}
	rs, gs := ref.GetStatuses(), got.GetStatuses()
	if len(rs) != len(gs) {
		add("len(statuses)", len(rs), len(gs))
	}
	for i := range min(len(rs), len(gs)) {
		r, g := rs[i], gs[i]
		f := fmt.Sprintf("statuses[%d].", i)
		if r.GetCode() != g.GetCode() {
			add(f+"code", r.GetCode(), g.GetCode())
		}
		rl, gl := r.GetCurrentLimit(), g.GetCurrentLimit()
		switch {
		case (rl == nil) != (gl == nil):
			add(f+"current_limit", limitString(rl), limitString(gl))
		case rl != nil:
			if rl.GetName() != gl.GetName() {
				add(f+"current_limit.name", fmt.Sprintf("%q", rl.GetName()), fmt.Sprintf("%q", gl.GetName()))
			}
			if rl.GetRequestsPerUnit() != gl.GetRequestsPerUnit() {
				add(f+"current_limit.requests_per_unit", rl.GetRequestsPerUnit(), gl.GetRequestsPerUnit())
			}
			if rl.GetUnit() != gl.GetUnit() {
				add(f+"current_limit.unit", rl.GetUnit(), gl.GetUnit())
			}
		}
		if r.GetLimitRemaining() != g.GetLimitRemaining() {
			add(f+"limit_remaining", r.GetLimitRemaining(), g.GetLimitRemaining())
		}
		rd, gd := r.GetDurationUntilReset(), g.GetDurationUntilReset()
		switch {
		case (rd == nil) != (gd == nil):
			add(f+"duration_until_reset", durString(rd != nil, rd.GetSeconds(), rd.GetNanos()), durString(gd != nil, gd.GetSeconds(), gd.GetNanos()))
		case rd != nil:
			if rd.GetSeconds() != gd.GetSeconds() {
				add(f+"duration_until_reset.seconds", rd.GetSeconds(), gd.GetSeconds())
			}
			if rd.GetNanos() != gd.GetNanos() {
				add(f+"duration_until_reset.nanos", rd.GetNanos(), gd.GetNanos())
			}
		}
		if !proto.Equal(r.GetQuota(), g.GetQuota()) {
			add(f+"quota", r.GetQuota(), g.GetQuota())
		}
	}
	if r, g := headers(ref.GetResponseHeadersToAdd()), headers(got.GetResponseHeadersToAdd()); !slices.Equal(r, g) {
		add("response_headers_to_add", r, g)
	}
	if r, g := headers(ref.GetRequestHeadersToAdd()), headers(got.GetRequestHeadersToAdd()); !slices.Equal(r, g) {
		add("request_headers_to_add", r, g)
	}
	if len(ms) == 0 && !proto.Equal(ref, got) {
		add("other fields", Text(ref), Text(got))
	}
	return ms
}

// Text is a message on one line.
func Text(m proto.Message) string {
	return strings.Join(strings.Fields(prototext.MarshalOptions{}.Format(m)), " ")
}

func limitString(l *pb.RateLimitResponse_RateLimit) string {
	if l == nil {
		return "none"
	}
	return fmt.Sprintf("{name %q, %d per %s}", l.GetName(), l.GetRequestsPerUnit(), l.GetUnit())
}

func durString(set bool, s int64, n int32) string {
	if !set {
		return "none"
	}
	return fmt.Sprintf("%ds+%dns", s, n)
}

func headers(hs []*core.HeaderValue) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.GetKey()+": "+h.GetValue())
	}
	return out
}
