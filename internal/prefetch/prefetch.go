// Package prefetch asks the processor to start loading a line of memory
// that the caller is about to read, so that the wait for it overlaps work
// the caller does first.
//
// It exists for one hot path: the throttle MemoryStore's decision on a key,
// whose cost on a store of many keys is mostly the wait for the key's
// entry. The store knows where the entry is as soon as it has hashed the
// key, but must read the clock and take its shard's lock before it may
// read it; and on x86 a locked instruction keeps every load after it from
// starting until it completes. Lines starts the entry's load before both,
// and the lock's, for a write: in parallel, another processor often took
// that lock last, and its line then moves here while the clock is read.
//
// A prefetch is a hint: it never faults, whatever the address (it may be
// stale, freed or not mapped at all), and changes nothing a program can
// observe but its speed. Where the architecture has no prefetch in this
// package (anything but amd64 and arm64), Line and Lines do nothing.
package prefetch
