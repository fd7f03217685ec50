package rls

import (
	"fmt"
	"strconv"
	"strings"
)

// unsupportedSetting is a setting of the reference (envoyproxy/ratelimit's
// src/settings/settings.go) that ratelimit rls does not implement. Set to
// anything but the reference's default, it asks for behaviour we would
// not give: the command exits 2 saying so, rather than run otherwise than
// the operator expects.
type unsupportedSetting struct {
	name, def, why string
}

// unsupportedSettings are those that change what is decided or where the
// counts live, or how the service is reached (a setting of logging,
// tracing or statsd asks for nothing a decision depends on, and is left
// alone).
var unsupportedSettings = []unsupportedSetting{
	{"BACKEND_TYPE", "redis", "only Redis (REDIS_URL or --redis) and, without one, the memory store are supported"},
	{"MEMCACHE_HOST_PORT", "", "memcache is not supported: use Redis (REDIS_URL or --redis)"},
	{"MEMCACHE_SRV", "", "memcache is not supported: use Redis (REDIS_URL or --redis)"},
	{"REDIS_PERSECOND", "false", "a second Redis for per-second limits is not supported: every limit uses REDIS_URL's"},
	{"REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock", "a second Redis for per-second limits is not supported: every limit uses REDIS_URL's"},
	{"QUOTA_MODE", "false", "quota mode is not supported"},
}

// checkUnsupported returns the error for the first unsupported setting set
// to something else than its default (case and surrounding space aside),
// and for BACKEND_TYPE=redis without a Redis: the reference would use its
// default, a Unix socket of nutcracker; the memory store would share
// nothing, which is not what BACKEND_TYPE=redis asks for.
func checkUnsupported(lookup func(string) (string, bool), haveRedis bool) error {
	for _, s := range unsupportedSettings {
		v, ok := lookup(s.name)
		if !ok || strings.EqualFold(strings.TrimSpace(v), s.def) {
			continue
		}
		// The reference reads its booleans with strconv.ParseBool (through
		// envconfig): "0", "f" and "F" are its default, false, too.
		if s.def == "false" {
			if b, err := strconv.ParseBool(strings.TrimSpace(v)); err == nil && !b {
				continue
			}
		}
		return fmt.Errorf("%s=%q: %s", s.name, v, s.why)
	}
	if v, ok := lookup("BACKEND_TYPE"); ok && !haveRedis && strings.EqualFold(strings.TrimSpace(v), "redis") {
		return fmt.Errorf("BACKEND_TYPE=%q needs REDIS_URL (or --redis): the reference's default, the Unix socket /var/run/nutcracker/ratelimit.sock, is not assumed; without BACKEND_TYPE the memory store is used", v)
	}
	return nil
}
