package rls

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/cli/redisflag"
	"github.com/smoothrate/ratelimit/internal/tlsfiles"
)

// This file holds the Redis the reference's variables describe (REDIS_URL,
// REDIS_SOCKET_TYPE, REDIS_TYPE, REDIS_AUTH, REDIS_TLS and its files) and
// the refusal cache's size from LOCAL_CACHE_SIZE_IN_BYTES.

// redisFromEnv builds the Redis client the reference's variables describe:
// REDIS_URL is an address (host:port, or a socket path when
// REDIS_SOCKET_TYPE is unix, the reference's default), a comma-separated
// list of them for REDIS_TYPE=cluster, or the master's name followed by the
// sentinels' addresses for REDIS_TYPE=sentinel. A REDIS_URL in our own URL
// form (redis://, redis+cluster://) is read as --redis reads it.
//
// TLS is on with REDIS_TLS=true (or a rediss:// URL): the client presents
// REDIS_TLS_CLIENT_CERT/_KEY when set, trusts REDIS_TLS_CACERT's CAs (else
// the system's) and, with REDIS_TLS_SKIP_HOSTNAME_VERIFICATION, verifies
// the server's chain but not its name; the --redis-tls-* flags win over
// these variables. A file named while TLS is off is an error, where the
// reference ignores it.
func redisFromEnv(u string, flags redisflag.TLS, given map[string]bool, lookup func(string) (string, bool)) (func() redis.UniversalClient, string, *tlsfiles.KeyPair, error) {
	env := func(name string) string { v, _ := lookup(name); return v }
	files, fromEnv, err := redisTLSFromEnv(flags, given, lookup)
	if err != nil {
		return nil, "", nil, err
	}
	useTLS, err := envBool(lookup, "REDIS_TLS")
	if err != nil {
		return nil, "", nil, err
	}
	isURL := strings.Contains(u, "://")
	if isURL {
		useTLS = strings.HasPrefix(u, "rediss")
	}
	if !useTLS && files.Given() {
		what := cmp.Or(fromEnv, "the --redis-tls-* flags")
		if isURL {
			return nil, "", nil, fmt.Errorf("%s: REDIS_URL %q does not ask for TLS (rediss://)", what, redisflag.Redact(u))
		}
		return nil, "", nil, fmt.Errorf("%s is set but REDIS_TLS is not true: set it (the reference would connect in plain text, ignoring the file)", what)
	}
	var tlsConf *tls.Config
	var cert *tlsfiles.KeyPair
	if useTLS {
		if tlsConf, cert, err = files.Config(); err != nil {
			return nil, "", nil, fmt.Errorf("redis TLS: %w", err)
		}
	}
	if isURL {
		nc, where, err := redisflag.ParseURLTLS(u, env("REDIS_PASSWORD"), tlsConf)
		if err != nil {
			return nil, "", nil, fmt.Errorf("REDIS_URL %q: %v", redisflag.Redact(u), err)
		}
		return nc, where, cert, nil
	}
	socket := strings.ToLower(cmp.Or(env("REDIS_SOCKET_TYPE"), "unix"))
	if socket != "tcp" && socket != "unix" {
		return nil, "", nil, fmt.Errorf("REDIS_SOCKET_TYPE=%q: want tcp or unix", env("REDIS_SOCKET_TYPE"))
	}
	user, pass := auth(env("REDIS_AUTH"))
	addrs := strings.Split(u, ",")
	for _, a := range addrs {
		if a == "" {
			return nil, "", nil, fmt.Errorf("REDIS_URL=%q: an empty address in the list", u)
		}
	}
	switch typ := strings.ToLower(cmp.Or(env("REDIS_TYPE"), "single")); typ {
	case "single":
		if len(addrs) != 1 {
			return nil, "", nil, fmt.Errorf("REDIS_URL=%q: REDIS_TYPE single takes one address (REDIS_TYPE=cluster for a list)", u)
		}
		opt := &redis.Options{Network: socket, Addr: u, Username: user, Password: pass, TLSConfig: tlsConf}
		return redisflag.NewClient(opt), u + unixHint(socket, env("REDIS_SOCKET_TYPE"), u), cert, nil
	case "cluster":
		// Over TCP whatever REDIS_SOCKET_TYPE says, as the reference's
		// cluster client dials (radix's ClusterConfig).
		opt := &redis.ClusterOptions{Addrs: addrs, Username: user, Password: pass, TLSConfig: tlsConf}
		return redisflag.NewClusterClient(opt), u, cert, nil
	case "sentinel":
		if len(addrs) < 2 {
			return nil, "", nil, fmt.Errorf("REDIS_URL=%q: REDIS_TYPE sentinel wants the master's name and the sentinels' addresses: name,host:port,...", u)
		}
		sentinelUser, sentinelPass := auth(env("REDIS_SENTINEL_AUTH"))
		opt := &redis.FailoverOptions{MasterName: addrs[0], SentinelAddrs: addrs[1:], Username: user, Password: pass,
			SentinelUsername: sentinelUser, SentinelPassword: sentinelPass, TLSConfig: tlsConf}
		return redisflag.NewFailoverClient(opt), "sentinel " + u, cert, nil
	default:
		return nil, "", nil, fmt.Errorf("REDIS_TYPE=%q: want single, cluster or sentinel", typ)
	}
}

// auth splits a REDIS_AUTH or REDIS_SENTINEL_AUTH value, [user:]password,
// as the reference does.
func auth(v string) (user, pass string) {
	if u, p, ok := strings.Cut(v, ":"); ok {
		return u, p
	}
	return "", v
}

// unixHint is what an operator who wrote REDIS_URL=host:port without
// REDIS_SOCKET_TYPE needs to read: the address is dialled as a Unix socket
// path (the reference's default socket type), and the variable that
// changes it. Empty when the socket type was chosen, or the address is a
// path.
func unixHint(socket, set, addr string) string {
	if socket != "unix" || set != "" || strings.Contains(addr, "/") {
		return ""
	}
	if _, port, ok := strings.Cut(addr, ":"); !ok || port == "" || strings.Trim(port, "0123456789") != "" {
		return ""
	}
	return " (dialled as a Unix socket path: REDIS_SOCKET_TYPE is unset, and the reference's default is unix; set REDIS_SOCKET_TYPE=tcp for host:port)"
}

// redisTLSFromEnv is the Redis client's TLS files: each --redis-tls-* flag
// given, else its REDIS_TLS_* variable. fromEnv names the first variable
// used, for messages.
func redisTLSFromEnv(flags redisflag.TLS, given map[string]bool, lookup func(string) (string, bool)) (files redisflag.TLS, fromEnv string, err error) {
	files = flags
	_, fromEnv = fillFromEnv(given, lookup,
		flagOrEnv{"redis-tls-cert", "REDIS_TLS_CLIENT_CERT", &files.CertFile},
		flagOrEnv{"redis-tls-key", "REDIS_TLS_CLIENT_KEY", &files.KeyFile},
		flagOrEnv{"redis-tls-ca", "REDIS_TLS_CACERT", &files.CAFile})
	if !given["redis-tls-skip-hostname-verification"] {
		if files.SkipHostnameVerification, err = envBool(lookup, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"); err != nil {
			return files, "", err
		}
		if files.SkipHostnameVerification {
			fromEnv = cmp.Or(fromEnv, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")
		}
	}
	return files, fromEnv, nil
}

// refusalCacheEntryBytes is what one over-limit key costs the reference's
// local cache (freecache): a 24-byte entry header, the key, and a value of
// one byte (it stores none, freecache reserves one); its keys
// (prefix, domain, each descriptor entry's key and value, the window's
// start) are about a hundred bytes under Envoy Gateway, whose keys hold
// route names. So LOCAL_CACHE_SIZE_IN_BYTES / 128 keys, the reference's
// least of 512 KiB (freecache's smallest cache) kept.
const (
	refusalCacheEntryBytes = 128
	refusalCacheMinBytes   = 512 << 10
)

// refusalCacheKeys is the refusal cache's size in keys for the reference's
// LOCAL_CACHE_SIZE_IN_BYTES.
func refusalCacheKeys(bytes int) int {
	return max(bytes, refusalCacheMinBytes) / refusalCacheEntryBytes
}
