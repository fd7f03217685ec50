// Package redistest starts real redis-server processes for tests: a
// standalone server or a small Redis Cluster, each on a free loopback port in
// the test's temporary directory, with persistence off, stopped when the test
// ends.
//
// The distributed limiter's guarantees depend on Redis behaving like Redis
// (atomic scripts, TIME, NOSCRIPT, cluster slots), which no in-memory fake
// reproduces, so its tests run against the real server. The helpers also
// inject the faults those guarantees must survive: kill -9 and restart on the
// same port, SIGSTOP/SIGCONT (a hung server), and anything redis-cli can send
// (SCRIPT FLUSH, FLUSHALL, keys of the wrong type).
//
// When redis-server or redis-cli is not on PATH the tests that need them are
// skipped with a message saying how to install them, except when the
// environment variable CI is "true": there a missing server is a failure, so
// that a CI run can never pass by skipping.
package redistest
