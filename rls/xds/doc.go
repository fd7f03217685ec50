// Package xds takes an rls.Service's configuration from an xDS management
// server, as envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW and as
// Envoy Gateway runs it: go-control-plane's state-of-the-world ADS client,
// a wildcard subscription to RateLimitConfig resources
// (ratelimit.config.ratelimit.v3), every response taken as the whole
// configuration and loaded by rls.ParseConfigProtos with the same checks
// as the YAML files, an ACK when it loads, a NACK with the loader's reason
// when it does not (the previous configuration serving on), and
// reconnection with the reference's backoff. `ratelimit rls` uses it; a Go
// program serving rls.Service on its own grpc.Server can too:
//
//	svc, _ := rls.New(nil, store) // answers an error until the first configuration
//	c, err := xds.NewClient("envoy-gateway:18001", svc,
//		xds.WithNodeID("envoy-ratelimit"), xds.WithTLS(tlsConfig))
//	defer c.Close()
//	go c.Run(ctx)
//	if _, err := c.WaitConfig(ctx); err != nil { … } // unless serving at once
//
// Each option names the reference's environment variable it stands for.
// The proto has no field for the rls additions (algorithm, rate_limits,
// unit_multiplier): they are for configuration files only.
package xds
