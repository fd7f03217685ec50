// Package layering holds no code for users: its test holds the module to the
// arrows drawn in the README's layout. A library package (the root package,
// smooth, throttle, httplimit, shape, jobs, distributed) never compiles gRPC
// or Envoy's protos, which only rls, rlqs, grpclimit and the CLI need, nor
// the services rls and rlqs themselves; and the
// keyed side (throttle, and httplimit over it) never compiles the Guava side
// (the root package and smooth). The test asks the go command for each
// package's full dependency list, so an import through a third module counts
// as much as a direct one.
//
// The command line's arrows are checked the same way, on every package's
// imports, its tests' included (cli_test.go): cmd/ratelimit → a command
// (internal/cli/pipe, run, …) → what several commands share
// (internal/cli/serve, outage, …) → the library. A command never imports
// another, a shared package never imports a command, and the library never
// imports the command line.
package layering
