// Package rlqs is Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService) as a library:
// a configuration of bucket limits, and a Server that splits each limit
// among the Envoys that report the bucket, as token buckets they apply
// themselves. The command `ratelimit rlqs` serves it; Go programs can
// register a Server on their own grpc.Server.
//
//	cfg, err := rlqs.LoadConfig("/etc/ratelimit/rlqs.yaml")
//	store, err := rlqs.NewRedisStore(redisClient) // or nil: this server alone
//	err = store.Check(ctx)                        // ErrMisconfigured: stop here
//	srv, err := rlqs.New(cfg, store)
//	rlqsv3.RegisterRateLimitQuotaServiceServer(grpcServer, srv)
//	...
//	srv.Shutdown(ctx) // Envoys drop their assignments (TTL 0), then
//	grpcServer.GracefulStop()
//
// # The model
//
// With the classic rate limit service (package rls) Envoy asks for every
// request. With RLQS each Envoy decides every request locally, from a
// token bucket the server assigns it, and reports every reporting
// interval what it allowed and denied per bucket; the server's load grows
// with the number of Envoys and buckets, not with the request rate.
//
// A bucket is one bucket id (a map of strings that Envoy builds from the
// request) under the configuration entry it matches. For each bucket the
// Server measures each Envoy's demand from its reports (allowed + denied
// over time), computes the max-min fair shares of the bucket's limit
// (package internal/fairshare: whoever wants less than an equal split gets
// what it wants, the others split the rest; what nobody wants is spread
// evenly), and assigns each Envoy a token bucket of its share, with a
// time to live of a few reporting intervals that every report renews. A
// new share is sent as soon as it is computed (every
// WithAllocationInterval while demand moves), not only in answer to a
// report.
//
// Rates are lowered before others are raised: a client's lowered rate
// stays committed for the settle time (WithSettleTime), until the new
// assignment has reached it, and a client that left keeps its rate
// committed until its assignment would have expired; only then is the
// difference given to others. So the rates the clients may be running
// never sum above the limit, and all Envoys together admit, over any
// [0, T],
//
//	admitted ≤ R·T + Σ max_tokens of the token buckets they applied
//
// (docs/rlqs.md states the assumptions and proves it). Small changes of a
// share are not sent (a new token bucket starts full in Envoy: churn
// costs), and each Envoy's bucket holds a burst of its share (the file's
// burst, 250 ms by default).
//
// # Several servers, one limit
//
// Replicas on one Redis (RedisStore) share each bucket's limit among all
// their Envoys: each replica claims, per bucket and in one atomic script,
// the rate its own Envoys may run, aimed at their max-min shares among all
// the bucket's Envoys and within what the other replicas' claims leave. A
// claim counts until every assignment it covers would have expired, so a
// replica that dies keeps its part until its Envoys have dropped it. When
// Redis is away each replica goes on with the shares it last had
// (WithStoreHook reports every failed and every successful call, for an
// outage log); a Redis set up wrong is found at start by
// RedisStore.Check.
//
// # Stopping
//
// Shutdown sends every open stream its assignments again with a time to
// live of 0: each Envoy falls back at once to its configured
// expired-assignment behaviour, instead of running a share nobody renews,
// until a server (this one restarted, or another) answers its next report.
// A restarted server builds its shares from those reports.
//
// The behaviour the package is built and tested against is that of Envoy
// 1.36's rate_limit_quota filter (internal/rlqstest copies it); see
// docs/rlqs.md for its details that matter to a server.
package rlqs
