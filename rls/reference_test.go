package rls

import (
	"context"
	"fmt"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// referenceSteps state envoyproxy/ratelimit's answers (src/limiter,
// src/redis/fixed_cache_impl.go, src/service/ratelimit.go) as calls in a
// row against testdata/config: each at its instant (seconds after T0), its
// request and the reference's response.
var referenceSteps = []struct {
	name string
	at   int64
	req  *rlsv3.RateLimitRequest
	want *rlsv3.RateLimitResponse
}{
	{"key-only rule, any value", 0, request("test-domain", 0, desc("key2", "something")),
		response(ok, status(ok, "", 20, mnt, 19, 40))},
	{"key_value beats key", 0, request("test-domain", 0, desc("key2", "value2")),
		response(ok, status(ok, "", 30, mnt, 29, 40))},
	{"key_value without a limit allow-lists", 0, request("test-domain", 0, desc("key2", "value3")),
		response(ok, noLimit())},
	{"a level without a limit does not match", 0, request("test-domain", 0, desc("key1", "value1")),
		response(ok, noLimit())},
	{"second level key-only", 0, request("test-domain", 0, desc("key1", "value1", "subkey1", "x")),
		response(ok, status(ok, "", 5, sec, 4, 1))},
	{"second level key_value", 0, request("test-domain", 0, desc("key1", "value1", "subkey1", "subvalue1")),
		response(ok, status(ok, "", 10, sec, 9, 1))},
	{"entries in another order do not match", 0, request("test-domain", 0, desc("subkey1", "x", "key1", "value1")),
		response(ok, noLimit())},
	{"a longer request than the rule does not match", 0, request("test-domain", 0, desc("key2", "x", "sub", "y")),
		response(ok, noLimit())},
	{"a shorter request matches its own level", 0, request("test-domain", 0, desc("key5", "value5")),
		response(ok, status(ok, "", 15, day, 14, 6400))},
	{"the deeper level", 0, request("test-domain", 0, desc("key5", "value5", "subkey5", "subvalue5")),
		response(ok, status(ok, "", 25, day, 24, 6400))},
	{"1 per hour: first", 0, request("test-domain", 0, desc("key3", "a")),
		response(ok, status(ok, "", 1, hr, 0, 2800))},
	{"1 per hour: second is over", 1, request("test-domain", 0, desc("key3", "a")),
		response(over, status(over, "", 1, hr, 0, 2799))},
	{"over stays over (refused hits count)", 2, request("test-domain", 0, desc("key3", "a")),
		response(over, status(over, "", 1, hr, 0, 2798))},
	{"the name is the current limit's", 0, request("test-domain", 0, desc("key4", "a")),
		response(ok, status(ok, "key4_rate_limit", 1, day, 0, 6400))},
	{"hits_addend n", 0, request("test-domain", 3, desc("key2", "n")),
		response(ok, status(ok, "", 20, mnt, 17, 40))},
	{"hits_addend n again", 0, request("test-domain", 3, desc("key2", "n")),
		response(ok, status(ok, "", 20, mnt, 14, 40))},
	{"hits_addend past the limit", 0, request("test-domain", 25, desc("key2", "big")),
		response(over, status(over, "", 20, mnt, 0, 40))},
	{"a descriptor hits_addend of 10^18", 0, request("test-domain", 0, withHits(desc("key2", "huge"), 1e18)),
		response(over, status(over, "", 20, mnt, 0, 40))},
	{"which stays counted", 0, request("test-domain", 0, withHits(desc("key2", "huge"), 0)),
		response(over, status(over, "", 20, mnt, 0, 40))},
	{"descriptor hits_addend 0 checks without counting", 0, request("test-domain", 0, withHits(desc("key2", "peek"), 0)),
		response(ok, status(ok, "", 20, mnt, 20, 40))},
	{"descriptor hits_addend beats the request's", 0, request("test-domain", 7, withHits(desc("key2", "peek"), 2), desc("key2", "peek")),
		response(ok, status(ok, "", 20, mnt, 18, 40), status(ok, "", 20, mnt, 11, 40))},
	{"unknown domain", 0, request("nowhere", 0, desc("key2", "x"), desc("key3", "y")),
		response(ok, noLimit(), noLimit())},
	{"unlimited", 0, request("test-domain", 0, desc("key6", "x")),
		response(ok, unlimitedStatus())},
	{"shadow mode: first", 0, request("test-domain", 0, desc("shadow", "x")),
		response(ok, status(ok, "", 1, sec, 0, 1))},
	{"shadow mode: over but OK", 0, request("test-domain", 0, desc("shadow", "x")),
		response(ok, status(ok, "", 1, sec, 0, 1))},
	{"quota mode: first", 0, request("test-domain", 0, desc("quota", "x")),
		response(ok, status(ok, "", 1, sec, 0, 1))},
	{"quota mode: over, reported OK without reset", 0, request("test-domain", 0, desc("quota", "x")),
		response(ok, &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 1, Unit: sec}})},
	{"requests_per_unit 0 refuses everything", 0, request("test-domain", 0, desc("zero", "x")),
		response(over, status(over, "", 0, sec, 0, 1))},
	{"one over descriptor makes the call over", 0, request("test-domain", 0, desc("key2", "other"), desc("key3", "a"), desc("nothing", "x")),
		response(over, status(ok, "", 20, mnt, 19, 40), status(over, "", 1, hr, 0, 2800), noLimit())},
	{"wildcard: foo1", 0, request("test-domain", 0, desc("wild", "foo1")),
		response(ok, status(ok, "", 2, mnt, 1, 40))},
	{"wildcard: each value its own counter", 0, request("test-domain", 0, desc("wild", "foo2")),
		response(ok, status(ok, "", 2, mnt, 1, 40))},
	{"wildcard: no prefix, no match", 0, request("test-domain", 0, desc("wild", "bar")),
		response(ok, noLimit())},
	{"share_threshold: files/a", 0, request("test-domain", 0, desc("shared", "files/a")),
		response(ok, status(ok, "", 2, mnt, 1, 40))},
	{"share_threshold: files/b shares the counter", 0, request("test-domain", 0, desc("shared", "files/b")),
		response(ok, status(ok, "", 2, mnt, 0, 40))},
	{"share_threshold: files/c is over", 0, request("test-domain", 0, desc("shared", "files/c")),
		response(over, status(over, "", 2, mnt, 0, 40))},
	{"a '*' inside a value is literal", 0, request("test-domain", 0, desc("midwild", "barab"), desc("midwild", "bar*b")),
		response(ok, noLimit(), status(ok, "", 2, mnt, 1, 40))},
	{"week", 0, request("test-domain", 0, desc("week", "x")),
		response(ok, status(ok, "", 3, week, 2, 7*86400-T0%(7*86400)))},
	{"month is 30 days", 0, request("test-domain", 0, desc("month", "x")),
		response(ok, status(ok, "", 3, mon, 2, 30*86400-T0%(30*86400)))},
	{"year is 365 days", 0, request("test-domain", 0, desc("year", "x")),
		response(ok, status(ok, "", 3, year, 2, 365*86400-T0%(365*86400)))},
	{"the request's own limit", 0, request("test-domain", 0, withLimit(desc("nothing", "x"), 1, sec)),
		response(ok, status(ok, "", 1, sec, 0, 1))},
	{"the request's own limit: over", 0, request("test-domain", 0, withLimit(desc("nothing", "x"), 1, sec)),
		response(over, status(over, "", 1, sec, 0, 1))},
	{"the request's own limit beats the rule's", 0, request("test-domain", 0, withLimit(desc("key2", "own"), 100, hr)),
		response(ok, status(ok, "", 100, hr, 99, 2800))},
	{"no own limit in an unknown domain", 0, request("nowhere", 0, withLimit(desc("x", "y"), 1, sec)),
		response(ok, noLimit())},
	{"the next second is a new window", 1, request("test-domain", 0, desc("key1", "value1", "subkey1", "x")),
		response(ok, status(ok, "", 5, sec, 4, 1))},
	{"the next minute is a new window", 40, request("test-domain", 0, desc("wild", "foo1")),
		response(ok, status(ok, "", 2, mnt, 1, 60))},
	{"one second before the window ends", 99, request("test-domain", 0, desc("wild", "foo1")),
		response(ok, status(ok, "", 2, mnt, 0, 1))},
	{"replaces: per_user is not applied beside vip", 0, request("replaces", 0, desc("user", "u"), desc("vip", "v")),
		response(ok, noLimit(), status(ok, "", 5, mnt, 4, 40))},
	{"replaces: per_user alone is applied", 0, request("replaces", 0, desc("user", "u")),
		response(ok, status(ok, "per_user", 2, mnt, 1, 40))},
}

func TestReferenceAnswers(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(*testClock, ...StoreOption) Store) {
		clock := newTestClock(T0)
		svc, err := New(mustLoad(t, "testdata/config"), newStore(clock))
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range referenceSteps {
			clock.set(time.Unix(T0+s.at, 0))
			got, err := svc.ShouldRateLimit(context.Background(), s.req)
			if err != nil {
				t.Fatalf("step %d %s: %v", i, s.name, err)
			}
			checkResponse(t, fmt.Sprintf("step %d %s", i, s.name), got, s.want)
		}
	})
}
