package rls

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The reference's settings are environment variables, read with
// kelseyhightower/envconfig: these read them as it does, an unset or
// empty variable leaving the default.

// lookupFunc is os.LookupEnv, or a test's map.
type lookupFunc func(string) (string, bool)

// envBool reads a boolean variable (strconv.ParseBool); unset or empty is
// false.
func envBool(lookup lookupFunc, name string) (bool, error) {
	v, ok := lookup(name)
	if !ok || v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false", name, v)
	}
	return b, nil
}

// envDuration reads a duration variable (time.ParseDuration: "24h",
// "500ms") into *d, leaving it alone when unset or empty. It refuses a
// negative duration.
func envDuration(lookup lookupFunc, name string, d *time.Duration) error {
	v, ok := lookup(name)
	if !ok || v == "" {
		return nil
	}
	got, err := time.ParseDuration(v)
	if err != nil || got < 0 {
		return fmt.Errorf("%s=%q: want a duration such as 10s or 1h", name, v)
	}
	*d = got
	return nil
}

// envInt reads an integer variable into *n, leaving it alone when unset or
// empty.
func envInt(lookup lookupFunc, name string, n *int) error {
	v, ok := lookup(name)
	if !ok || v == "" {
		return nil
	}
	got, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("%s=%q: want an integer", name, v)
	}
	*n = got
	return nil
}

// envFloat reads a number variable into *f, leaving it alone when unset or
// empty.
func envFloat(lookup lookupFunc, name string, f *float64) error {
	v, ok := lookup(name)
	if !ok || v == "" {
		return nil
	}
	got, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return fmt.Errorf("%s=%q: want a number", name, v)
	}
	*f = got
	return nil
}

// flagOrEnv is a setting a flag gives or, when the flag is not given, a
// variable.
type flagOrEnv struct {
	flag, env string
	p         *string
}

// fillFromEnv sets each setting whose flag was not given from its
// variable, when that is set. It reports whether any of the flags was
// given, and names the first variable used (for messages).
func fillFromEnv(given map[string]bool, lookup lookupFunc, settings ...flagOrEnv) (flagGiven bool, fromEnv string) {
	for _, s := range settings {
		if given[s.flag] {
			flagGiven = true
			continue
		}
		if v, _ := lookup(s.env); v != "" {
			*s.p = v
			if fromEnv == "" {
				fromEnv = s.env
			}
		}
	}
	return flagGiven, fromEnv
}

// referenceMarkers are settings of envoyproxy/ratelimit that every
// deployment of its image sets (Envoy Gateway's, Istio's and Contour's
// samples, its own docker-compose) and that nothing else is likely to:
// with one of them set, `ratelimit` with no arguments serves rls, as the
// reference's binary does. REDIS_URL alone is not one: it names a Redis
// for many programs.
var referenceMarkers = []string{"RUNTIME_ROOT", "CONFIG_TYPE", "REDIS_SOCKET_TYPE", "BACKEND_TYPE", "USE_STATSD"}

// ReferenceEnvironment reports whether the environment (lookup is
// os.LookupEnv) is one the reference's image runs in, and so whether
// `ratelimit` with no arguments serves rls rather than print its usage.
func ReferenceEnvironment(lookup func(string) (string, bool)) bool {
	for _, name := range referenceMarkers {
		if _, ok := lookup(name); ok {
			return true
		}
	}
	return false
}

// ReferenceMarkers names the variables ReferenceEnvironment looks at, for
// the usage text.
func ReferenceMarkers() []string { return append([]string(nil), referenceMarkers...) }

// additionFlags are the flags of settings the reference does not have,
// which no variable of its sets: each is also read from RLS_ and its name
// in capitals, "-" as "_" (additionVar), when it is not given, so that a
// deployment that runs the image without arguments, as Envoy Gateway
// does, can set them in the container's environment. The other flags
// read the reference's variables (resolve), or are not settings (--check).
var additionFlags = []string{
	"ietf-headers", "max-keys", "max-bytes", "max-descriptors", "max-descriptor-bytes",
	"metric-series", "metric-label-bytes", "max-conns-per-client", "idle-timeout", "read-timeout",
	"max-header-bytes", "drain", "reload-interval", "grpc-max-concurrent-streams",
}

// additionVar is the variable of addition flag name.
func additionVar(name string) string {
	return "RLS_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// additionsFromEnv sets each addition flag that given does not hold from
// its variable, when that is set and not empty, as the flag would be set
// (the same parser). It returns the flags it set, as "--name" to the
// variable, for messages.
func additionsFromEnv(fs *flag.FlagSet, given map[string]bool, lookup lookupFunc) (map[string]string, error) {
	set := map[string]string{}
	for _, name := range additionFlags {
		if given[name] {
			continue
		}
		v, _ := lookup(additionVar(name))
		if v == "" {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			return nil, fmt.Errorf("%s=%q: %v", additionVar(name), v, err)
		}
		set["--"+name] = additionVar(name)
	}
	return set, nil
}

// fromAddition names the variable in err, a message of resolve about a
// flag that additionsFromEnv set ("--max-keys 0: want at least 1").
func fromAddition(err error, set map[string]string) error {
	if err == nil {
		return nil
	}
	for f, v := range set {
		if strings.HasPrefix(err.Error(), f+" ") {
			return fmt.Errorf("%v (from %s)", err, v)
		}
	}
	return err
}
