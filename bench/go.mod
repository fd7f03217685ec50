module github.com/smoothrate/ratelimit/bench

go 1.26.8

require (
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/juju/ratelimit v1.0.2
	github.com/redis/go-redis/v9 v9.23.0
	github.com/smoothrate/ratelimit v0.0.0
	go.uber.org/ratelimit v0.3.1
	golang.org/x/time v0.16.0
)

require (
	github.com/benbjohnson/clock v1.3.5 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sys v0.48.0 // indirect
	gopkg.in/check.v1 v1.0.0-20201130134442-10cb98267c6c // indirect
)

replace github.com/smoothrate/ratelimit => ..
