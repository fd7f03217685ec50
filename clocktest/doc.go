// Package clocktest provides fake clocks that make rate-limited code
// deterministic in tests: schedules become exact numbers instead of sleeps
// and flaky timing.
//
//   - Fake is Guava's FakeStopwatch: Sleep returns at once after moving time
//     forward, and every sleep and advance is recorded as an event string
//     ("R0.20", "U1.00"), the form in which Guava's own RateLimiterTest states
//     its expectations. Use it for single-goroutine schedules.
//   - Manual is a clock whose sleepers really block until the test advances
//     time, with a race-free way to wait until N goroutines are asleep. Use it
//     for concurrent code.
//   - Benbjohnson adapts github.com/benbjohnson/clock (its real clock or its
//     Mock) to ratelimit.Clock, without the Mock's sleep/advance race.
//
// Code that uses the default clock can also be tested with testing/synctest,
// with no injection at all.
package clocktest
