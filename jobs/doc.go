// Package jobs runs work items no faster than a rate limiter allows, with
// bounded concurrency: a rate-limited worker pool. Use it to replay requests
// against a service at 50 per second, or to run a command over a list of
// files at 5 per second, two at a time (the "ratelimit run" command is built
// on it).
//
// Each item waits, in this order, for its input, for a free worker slot, and
// then for a permit from the limiter, and starts at once after that. Taking
// the permit last means that the start times, not some earlier booking, are
// what the limiter spaces out: no two items start closer together than the
// limiter allows, however long the slots were busy.
//
// Cancelling the context stops the run cleanly: no item starts after the
// cancellation is seen, items already running get the cancelled context and
// are waited for, and no goroutine outlives Run or Stream.
package jobs
