package rls

import (
	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

// ParseConfigProtos builds a configuration from RateLimitConfig resources
// (ratelimit.config.ratelimit.v3, what an xDS server such as Envoy
// Gateway's sends), in order, as envoyproxy/ratelimit loads them: each
// becomes the structures a YAML file decodes into and goes through the same
// checks, so a resource is refused exactly when a file with the same
// content would be, for the same reason. A *ConfigError names the
// resource by its name; Files returns the names.
//
// The proto has no field for the additions (algorithm, rate_limits,
// unit_multiplier): a configuration that uses them is files-only. A
// descriptor's metadata is ignored (it only feeds the reference's
// RESPONSE_DYNAMIC_METADATA, which this service does not write).
func ParseConfigProtos(cfgs []*rlconfv3.RateLimitConfig, opts ...LoadOption) (*Config, error) {
	lc := buildLoadConfig(opts)
	c := &Config{domains: map[string]*node{}}
	for _, p := range cfgs {
		name := p.GetName()
		root := &yamlRoot{Domain: p.GetDomain(), Descriptors: protoDescriptors(p.GetDescriptors())}
		if err := c.addFile(name, root, lc.merge); err != nil {
			return nil, err
		}
		c.files = append(c.files, name)
	}
	return c, nil
}

// protoDescriptors converts descriptors as the reference's
// rateLimitDescriptorsPbToYaml does. The getters make a nil descriptor an
// empty one (refused for its empty key), never a panic.
func protoDescriptors(ds []*rlconfv3.RateLimitDescriptor) []yamlDescriptor {
	if len(ds) == 0 {
		return nil
	}
	out := make([]yamlDescriptor, len(ds))
	for i, d := range ds {
		out[i] = yamlDescriptor{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			RateLimit:      protoRateLimit(d.GetRateLimit()),
			Descriptors:    protoDescriptors(d.GetDescriptors()),
			ShadowMode:     d.GetShadowMode(),
			QuotaMode:      d.GetQuotaMode(),
			DetailedMetric: d.GetDetailedMetric(),
		}
	}
	return out
}

// protoRateLimit converts a policy as rateLimitPolicyPbToYaml does: the
// unit by its name ("SECOND"; "UNKNOWN" for none, a number for a value
// this proto does not know), which the loader then checks as it checks a
// file's unit.
func protoRateLimit(p *rlconfv3.RateLimitPolicy) *yamlRateLimit {
	if p == nil {
		return nil
	}
	y := &yamlRateLimit{
		RequestsPerUnit: p.GetRequestsPerUnit(),
		Unit:            p.GetUnit().String(),
		Unlimited:       p.GetUnlimited(),
		Name:            p.GetName(),
	}
	for _, r := range p.GetReplaces() {
		y.Replaces = append(y.Replaces, struct{ Name string }{r.GetName()})
	}
	return y
}
