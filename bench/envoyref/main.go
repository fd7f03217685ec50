// Command envoyref is envoyproxy/ratelimit's own service, built unchanged
// from the Go module proxy at the version pinned in go.mod, so that bench
// can run the reference beside `ratelimit rls` (see bench/rls). It reads
// the reference's environment variables (src/settings/settings.go).
//
// It is a module of its own because the reference pins older versions of
// gRPC and go-control-plane than the project uses. bench/rlsbench builds
// it; by hand:
//
//	cd bench/envoyref && go build -o ../.bin/envoyref .
package main

import (
	"github.com/envoyproxy/ratelimit/src/service_cmd/runner"
	"github.com/envoyproxy/ratelimit/src/settings"
)

func main() {
	r := runner.NewRunner(settings.NewSettings())
	r.Run()
}
