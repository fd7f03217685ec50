// Package rls is Envoy's global rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) as a
// library: the configuration of envoyproxy/ratelimit read as it reads it,
// its descriptor matching, and its answers, over an embedded memory store
// or Redis, with what its users have asked for on top. The command
// `ratelimit rls` serves it; Go programs can register a Service on their
// own grpc.Server.
//
//	cfg, err := rls.LoadConfig("/etc/ratelimit/config") // a file or a directory
//	store, err := rls.NewRedisStore(redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
//	svc, err := rls.New(cfg, store, rls.WithRateLimitHeaders("", "", ""))
//	rlsv3.RegisterRateLimitServiceServer(grpcServer, svc)
//
// A configuration can also come from an xDS server, as Envoy Gateway
// sends it: ParseConfigProtos loads RateLimitConfig resources with the
// files' checks, and package rls/xds keeps a Service's configuration in
// step with the server.
//
// # The reference's behaviour
//
// With no addition configured and no option given, every answer equals
// envoyproxy/ratelimit's for the same calls at the same instants:
//
//   - Configuration: one domain per file (MergeDomains to share one),
//     descriptors nested by key and optional value, a value ending in '*'
//     matching every value with that prefix, and rate_limit {unit,
//     requests_per_unit, unlimited, name, replaces}, shadow_mode,
//     quota_mode, detailed_metric, value_to_metric, share_threshold. Every
//     file the reference rejects is rejected, with its reason: a
//     *ConfigError prints "<file>: <reason>".
//   - Matching, level by level along the request's entries: the exact
//     "key_value" child, else the first wildcard child whose prefix
//     matches, else the "key" child; the last entry must land on a level
//     with a rate limit. A request's own limit (descriptor.limit)
//     replaces the configuration's.
//   - Counting: a fixed window aligned on the Unix epoch (a unit of
//     second, minute, hour, day, week, month = 30 days, year = 365 days),
//     one counter per descriptor and window, to which every hit is added,
//     refused ones too; a descriptor is OVER_LIMIT when its count after
//     the hits exceeds requests_per_unit. limit_remaining is the limit
//     minus the count (0 when over), duration_until_reset the whole
//     seconds to the window's end. hits_addend 0 counts 1; a descriptor's
//     own hits_addend (0 included: a check without counting) wins.
//   - Unmatched descriptors and unknown domains answer OK without a limit;
//     unlimited ones OK with limit_remaining 2^32−1; shadow_mode rules are
//     counted but answer OK; a rule named in another matched rule's
//     replaces is not applied.
//   - Counters per rule (total_hits, over_limit, near_limit at the 0.8
//     ratio, within_limit, shadow_mode), read with AllRuleCounts (and
//     Counts, AllDomainsNotFound for the service's own); `ratelimit rls`
//     serves them under the reference's Prometheus names.
//
// # Additions
//
// Each is off unless configured, and changes no answer of a configuration
// that does not use it.
//
//   - algorithm: on a rate_limit: fixed-window (the default, the reference's
//     counting window), or one of throttle's sliding-window, gcra,
//     token-bucket, leaky-bucket, sliding-log, with throttle's definitions
//     unchanged (requests_per_unit per unit; refused hits never counted;
//     the burst is requests_per_unit). For these, limit_remaining is
//     throttle's Remaining and duration_until_reset the seconds until the
//     key is back to its full allowance, or, when over, until the same
//     request would pass.
//   - unit_multiplier: N on a rate_limit: a window (or period) of N units,
//     e.g. unit: second with unit_multiplier: 30. current_limit still
//     reports the unit; duration_until_reset is exact.
//   - rate_limits: a list of rate limits on one descriptor (10 per second
//     and 300 per minute), all applied: the descriptor is over when any
//     is, and reports the one over (else the one with the fewest
//     remaining). The reference's windows in the list count as usual;
//     the list's other algorithms are decided together by
//     throttle.AllowAll, all counted or none.
//   - WithCountOnlyAdmitted: a call that is refused counts in none of its
//     windows: all of a call's windows are counted or none, atomically
//     (on Redis, in one script), where the reference's
//     STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT reads, then writes (and
//     counts the windows that refuse). The additions' algorithms of such
//     a call are decided after its windows, all or none, and the windows'
//     hits taken back if they refuse.
//   - WithIETFHeaders: RateLimit-Policy and RateLimit fields in
//     response_headers_to_add, as httplimit writes them, beside the
//     reference's RateLimit-Limit/Remaining/Reset (WithRateLimitHeaders).
//   - WithStoreTimeout: a store that fails or takes longer (50 ms by
//     default) gives gRPC UNAVAILABLE at once, so that Envoy's
//     failure_mode_deny decides, instead of a 10 s wait on a dead Redis.
//   - MemoryStore: one instance needs no Redis.
//   - WithMaxDescriptors, WithMaxDescriptorBytes, WithMetricSeriesLimit
//     and the MemoryStore's WithMaxKeys and WithMaxBytes bound what one
//     caller can cost: a call's work, the bytes a long descriptor value
//     takes (it is counted under a digest of it), the metric series that
//     requests name, the memory the counters take. Counts saturate at
//     2^53 − 1, so no hits_addend, however large, leaves a counter that
//     fails a later call.
//   - WithRefusalCache on a RedisStore: over-limit windows are refused in
//     this process until they end, without a round trip.
//
// # Redis
//
// A RedisStore adds to all of a call's windows with one Lua script in one
// round trip (in a Cluster, one pipeline: one script per key, sent to each
// node at once), setting a counter's TTL only when it creates it. On one
// server, the calls that arrive while a round trip is in flight go
// together in the next one, one script for all their windows, with no
// delay added: a busy store makes fewer, larger round trips. A call of
// more than 256 windows never joins them: it runs on its own, in scripts
// of 256 keys one after the other (one script when counted whole), and
// stops between two once its context ends, so that no call waits for a
// large one. The additions' algorithms use throttle's RedisStore: all of
// a call's descriptors that use them are decided by one throttle.AllowAll,
// one script, when they all fit (when one does not, nothing is counted,
// it is answered, and the others are asked again: one round trip more per
// refusal), 256 checks at most to a script. In a Cluster each such
// descriptor is one script of its own, its limits' keys sharing a hash
// tag. The additions' script runs at the same time as the windows' one,
// so a call waits for about one round trip (counted whole, for two: the
// additions are decided after the windows).
//
// # Where it differs from the reference on purpose
//
//   - A store that fails or exceeds WithStoreTimeout (50 ms by default)
//     answers gRPC UNAVAILABLE at once; the reference waits for its Redis
//     timeout (10 s by default).
//   - A request whose own limit has no valid unit is refused with
//     INVALID_ARGUMENT; it crashes the reference.
//   - LoadConfig skips files and directories whose names start with '.'
//     (editors' swap files, a Kubernetes ConfigMap's ..data), which the
//     reference reads unless RUNTIME_IGNOREDOTFILES is set.
//   - The MemoryStore, which the reference lacks, is bounded (WithMaxKeys,
//     WithMaxBytes).
//   - The counters' TTL is the time left in the window, not a whole unit.
//   - A call of more than WithMaxDescriptors descriptors is refused with
//     INVALID_ARGUMENT; the reference takes any number.
//   - A descriptor longer than WithMaxDescriptorBytes is counted under a
//     digest of it, not under its values.
//   - A count saturates at 2^53 − 1; past 2^63 − 1 the reference's INCRBY
//     fails, and with it every later call on that counter.
//   - Metric series named by requests past WithMetricSeriesLimit are
//     counted together, under their domain's OtherRuleKey
//     ("domain.(other)"), and unknown domains under "(other)".
package rls
