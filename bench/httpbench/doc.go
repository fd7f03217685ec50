// Package httpbench measures package httplimit against the Go HTTP
// rate-limiting middlewares users choose from (go-chi/httprate,
// ulule/limiter's stdlib middleware, sethvargo/go-limiter's httplimit,
// didip/tollbooth), and the cost of the limiter in a reverse proxy:
//
//	cd bench && go run ./cmd/httpbench -count 5        # the table of docs/performance.md
//	cd bench && go test -run '^$' -bench . -benchmem ./httpbench/
//
// Every middleware runs in process over its in-memory store, keyed by
// client IP, with a limit so high that every request is allowed (the path
// nearly every request takes), for 10 000 client IPs in turn. "Added"
// cost is a middleware's ns/op minus the bare handler's in the same run.
//
// tollbooth is v7: its v8 module is not available from the module proxy
// this machine uses.
package httpbench
