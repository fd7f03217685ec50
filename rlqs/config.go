package rlqs

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v2"
)

// Config is a loaded and validated RLQS configuration: the domain the
// Envoys name in their streams, the bucket rules, and the blanket rule of
// bucket ids that no rule matches. Make one with LoadConfig or
// ParseConfig; it is immutable and safe to share.
//
// The file:
//
//	domain: edge                    # the domain of the Envoys' streams (required)
//	blanket_rule: allow_all         # for bucket ids no entry matches: allow_all (default) or deny_all
//	reporting_interval: 1s          # the Envoys' reporting_interval (default 1s)
//	assignment_ttl: 3s              # how long an assignment lasts unless renewed (default 3 intervals)
//	burst: 250ms                    # each Envoy's token bucket holds this much of its share (default 250ms)
//	abandon_after: 1m               # abandon a bucket reported with no requests for this long (default 1m)
//	buckets:
//	  - bucket_id: {route: api}     # a bucket id with exactly these keys, each value equal or "*"
//	    requests_per_unit: 100      # for all Envoys together; 0 denies all
//	    unit: second                # second, minute, hour or day
//	  - bucket_id: {route: login, user: "*"}   # each user its own limit
//	    requests_per_unit: 5
//	    unit: minute
//	    burst: 0s                   # the four durations may be set per entry too
//	  - bucket_id: {route: health}
//	    blanket_rule: allow_all     # an entry may assign a blanket rule instead of a limit
//
// A bucket id matches an entry when it has exactly the entry's keys and
// each value is the entry's or the entry's is "*"; the entry with the
// fewest "*" wins, then the first in the file. Each distinct bucket id is
// its own limit: {route: login, user: "*"} gives every user 5 a minute.
type Config struct {
	file    string
	domain  string
	blanket Blanket
	rules   []*rule
	// unmatched is the rule of bucket ids no entry matches: the blanket
	// rule, with the file's durations.
	unmatched *rule
	// byKeys indexes the rules by their key set (keySig), most specific
	// first: a bucket id is compared only with the rules of its keys.
	byKeys map[string][]*rule
}

// Blanket is a rule that allows or denies every request of a bucket,
// without a limit (Envoy's RateLimitStrategy.BlanketRule).
type Blanket uint8

const (
	// AllowAll lets every request through.
	AllowAll Blanket = iota
	// DenyAll refuses every request.
	DenyAll
)

func (b Blanket) String() string {
	if b == DenyAll {
		return "deny_all"
	}
	return "allow_all"
}

// rule is one entry of the file's buckets.
type rule struct {
	index int // position in the file, from 0
	// keys are the entry's bucket id; a value of "*" matches any value.
	keys      map[string]string
	wildcards int

	// A limit (limited) or a blanket rule.
	limited         bool
	requestsPerUnit uint64
	unit            string
	unitSeconds     int64
	blanket         Blanket

	reportingInterval time.Duration
	ttl               time.Duration // whole seconds: Envoy reads only the seconds
	burst             time.Duration
	abandonAfter      time.Duration
}

// rate is the rule's limit in requests per second, for all Envoys.
func (r *rule) rate() float64 { return float64(r.requestsPerUnit) / float64(r.unitSeconds) }

// Defaults of the file's durations.
const (
	DefaultReportingInterval = time.Second
	DefaultBurst             = 250 * time.Millisecond
	DefaultAbandonAfter      = time.Minute
	// The assignment TTL defaults to DefaultTTLIntervals reporting
	// intervals, rounded up to whole seconds.
	DefaultTTLIntervals = 3
)

// Bounds the file is checked against.
const (
	// minReportingInterval is the least reporting_interval Envoy accepts.
	minReportingInterval = 100 * time.Millisecond
	maxDuration          = 24 * time.Hour
	// maxRequestsPerUnit keeps every rate, and every sum of rates, exact
	// in a float64.
	maxRequestsPerUnit = 1 << 40
	// MaxBucketIDKeys and MaxBucketIDBytes bound a bucket id, in the file
	// and from a client: longer ones are refused.
	MaxBucketIDKeys  = 32
	MaxBucketIDBytes = 4096
)

var unitSeconds = map[string]int64{"second": 1, "minute": 60, "hour": 3600, "day": 86400}

// Domain returns the configuration's domain.
func (c *Config) Domain() string { return c.domain }

// File returns the name the configuration was read from.
func (c *Config) File() string { return c.file }

// BlanketRule returns the rule of bucket ids that no entry matches.
func (c *Config) BlanketRule() Blanket { return c.blanket }

// Buckets returns how many entries the file has.
func (c *Config) Buckets() int { return len(c.rules) }

// ConfigError is a rejected configuration: the file and the reason, which
// Error prints as "<file>: <reason>" on one line.
type ConfigError struct {
	File   string
	Reason string
}

func (e *ConfigError) Error() string { return e.File + ": " + e.Reason }

// LoadConfig reads and checks the file at path. A rejected configuration
// is a *ConfigError naming the file.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, &ConfigError{File: path, Reason: err.Error()}
	}
	return ParseConfig(path, b)
}

// ParseConfig checks content, a file named name (as errors name it).
func ParseConfig(name string, content []byte) (*Config, error) {
	var root yaml.MapSlice
	if err := yaml.Unmarshal(content, &root); err != nil {
		// yaml.v2's errors may span lines; a ConfigError is one line.
		return nil, &ConfigError{File: name, Reason: "invalid YAML: " + strings.Join(strings.Fields(err.Error()), " ")}
	}
	c, err := parseRoot(root)
	if err != nil {
		return nil, &ConfigError{File: name, Reason: err.Error()}
	}
	c.file = name
	return c, nil
}

// eachKey calls f with each key of m and its value, in order, and
// returns the keys seen; a key that is not a string or appears twice, or
// f's first error, stops it.
func eachKey(m yaml.MapSlice, f func(k string, v any) error) (map[string]bool, error) {
	seen := map[string]bool{}
	for _, item := range m {
		k, ok := item.Key.(string)
		if !ok {
			return nil, fmt.Errorf("key %v is not a string", item.Key)
		}
		if seen[k] {
			return nil, fmt.Errorf("key '%s' appears twice", k)
		}
		seen[k] = true
		if err := f(k, item.Value); err != nil {
			return nil, err
		}
	}
	return seen, nil
}

// defaults are the file-wide durations each entry starts from.
type defaults struct {
	reportingInterval, ttl, burst, abandonAfter time.Duration
	ttlSet                                      bool
}

func parseRoot(root yaml.MapSlice) (*Config, error) {
	c := &Config{byKeys: map[string][]*rule{}}
	d := defaults{reportingInterval: DefaultReportingInterval, burst: DefaultBurst, abandonAfter: DefaultAbandonAfter}
	var buckets []any
	seen, err := eachKey(root, func(k string, v any) error {
		var err error
		switch k {
		case "domain":
			c.domain, err = str(k, v)
			if err == nil && c.domain == "" {
				err = fmt.Errorf("domain must not be empty")
			}
		case "blanket_rule":
			c.blanket, err = blanket(k, v)
		case "buckets":
			if v == nil {
				break
			}
			var ok bool
			if buckets, ok = v.([]any); !ok {
				err = fmt.Errorf("buckets must be a list")
			}
		default:
			err = d.set(k, v)
			if err == errUnknown {
				err = fmt.Errorf("unknown key '%s' (want domain, blanket_rule, reporting_interval, assignment_ttl, burst, abandon_after or buckets)", k)
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if !seen["domain"] {
		return nil, fmt.Errorf("domain is missing")
	}
	if err := d.finish(); err != nil {
		return nil, err
	}
	c.unmatched = &rule{index: -1, blanket: c.blanket, reportingInterval: d.reportingInterval, ttl: d.ttl,
		burst: d.burst, abandonAfter: d.abandonAfter}
	ids := map[string]int{}
	for i, b := range buckets {
		m, ok := b.(yaml.MapSlice)
		if !ok {
			return nil, fmt.Errorf("buckets[%d]: an entry must be a map", i+1)
		}
		r, err := parseRule(m, d)
		if err != nil {
			return nil, fmt.Errorf("buckets[%d]: %w", i+1, err)
		}
		r.index = i
		id := canonicalID(r.keys)
		if j, dup := ids[id]; dup {
			return nil, fmt.Errorf("buckets[%d]: bucket_id %s is also buckets[%d]'s", i+1, displayID(r.keys), j+1)
		}
		ids[id] = i
		c.rules = append(c.rules, r)
		sig := keySig(r.keys)
		c.byKeys[sig] = append(c.byKeys[sig], r)
	}
	for _, rs := range c.byKeys {
		// Fewest wildcards first, then file order (stable).
		slices.SortStableFunc(rs, func(a, b *rule) int { return a.wildcards - b.wildcards })
	}
	return c, nil
}

var errUnknown = fmt.Errorf("unknown key")

// set reads one of the four durations into d.
func (d *defaults) set(k string, v any) error {
	var err error
	switch k {
	case "reporting_interval":
		d.reportingInterval, err = duration(k, v)
	case "assignment_ttl":
		d.ttl, err = duration(k, v)
		d.ttlSet = true
	case "burst":
		d.burst, err = duration(k, v)
	case "abandon_after":
		d.abandonAfter, err = duration(k, v)
	default:
		return errUnknown
	}
	return err
}

// finish fills the TTL's default and checks the durations together.
func (d *defaults) finish() error {
	if d.reportingInterval < minReportingInterval {
		return fmt.Errorf("reporting_interval %v is below Envoy's least, %v", d.reportingInterval, minReportingInterval)
	}
	if !d.ttlSet {
		d.ttl = (DefaultTTLIntervals*d.reportingInterval + time.Second - 1).Truncate(time.Second)
	}
	switch {
	case d.ttl%time.Second != 0:
		return fmt.Errorf("assignment_ttl %v is not a whole number of seconds (Envoy reads only the seconds)", d.ttl)
	case d.ttl <= d.reportingInterval:
		return fmt.Errorf("assignment_ttl %v must be longer than reporting_interval %v, or every assignment expires before it is renewed", d.ttl, d.reportingInterval)
	case d.ttl > maxDuration:
		return fmt.Errorf("assignment_ttl %v is longer than %v", d.ttl, maxDuration)
	}
	if d.abandonAfter < d.ttl {
		return fmt.Errorf("abandon_after %v must be at least assignment_ttl %v", d.abandonAfter, d.ttl)
	}
	return nil
}

func parseRule(m yaml.MapSlice, file defaults) (*rule, error) {
	// The file's durations, which the entry may override; a TTL the file
	// did not set follows the entry's own reporting interval.
	d := file
	r := &rule{}
	var rpu, unit, bl bool
	seen, err := eachKey(m, func(k string, v any) error {
		var err error
		switch k {
		case "bucket_id":
			r.keys, err = bucketIDOf(v)
		case "requests_per_unit":
			rpu = true
			r.requestsPerUnit, err = count(k, v)
		case "unit":
			unit = true
			var u string
			if u, err = str(k, v); err == nil {
				r.unit = strings.ToLower(u)
				var ok bool
				if r.unitSeconds, ok = unitSeconds[r.unit]; !ok {
					err = fmt.Errorf("unit '%s' is not second, minute, hour or day", u)
				}
			}
		case "blanket_rule":
			bl = true
			r.blanket, err = blanket(k, v)
		default:
			err = d.set(k, v)
			if err == errUnknown {
				err = fmt.Errorf("unknown key '%s' (want bucket_id, requests_per_unit, unit, blanket_rule, reporting_interval, assignment_ttl, burst or abandon_after)", k)
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	switch {
	case !seen["bucket_id"]:
		return nil, fmt.Errorf("bucket_id is missing")
	case bl && (rpu || unit):
		return nil, fmt.Errorf("an entry has either blanket_rule or requests_per_unit and unit, not both")
	case rpu && !unit:
		return nil, fmt.Errorf("unit is missing (second, minute, hour or day)")
	case unit && !rpu:
		return nil, fmt.Errorf("requests_per_unit is missing")
	case !bl && !rpu:
		return nil, fmt.Errorf("requests_per_unit (with unit) or blanket_rule is missing")
	}
	if err := d.finish(); err != nil {
		return nil, err
	}
	r.limited = rpu
	r.reportingInterval, r.ttl, r.burst, r.abandonAfter = d.reportingInterval, d.ttl, d.burst, d.abandonAfter
	for _, v := range r.keys {
		if v == "*" {
			r.wildcards++
		}
	}
	return r, nil
}

// bucketIDOf reads an entry's bucket_id: a non-empty map of strings.
func bucketIDOf(v any) (map[string]string, error) {
	m, ok := v.(yaml.MapSlice)
	if !ok || len(m) == 0 {
		return nil, fmt.Errorf("bucket_id must be a map of at least one key")
	}
	id := make(map[string]string, len(m))
	size := 0
	for _, item := range m {
		k, ok := item.Key.(string)
		if !ok || k == "" {
			return nil, fmt.Errorf("bucket_id key %v is not a non-empty string", item.Key)
		}
		if _, dup := id[k]; dup {
			return nil, fmt.Errorf("bucket_id key '%s' appears twice", k)
		}
		s, ok := item.Value.(string)
		if !ok {
			return nil, fmt.Errorf("bucket_id value of '%s' is %v, not a string: quote it (Envoy's values are strings)", k, item.Value)
		}
		id[k] = s
		size += len(k) + len(s)
	}
	if len(id) > MaxBucketIDKeys || size > MaxBucketIDBytes {
		return nil, fmt.Errorf("bucket_id has more than %d keys or %d bytes", MaxBucketIDKeys, MaxBucketIDBytes)
	}
	return id, nil
}

func str(k string, v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s must be a string, not %v", k, v)
	}
	return s, nil
}

func blanket(k string, v any) (Blanket, error) {
	s, err := str(k, v)
	if err != nil {
		return 0, err
	}
	switch strings.ToLower(s) {
	case "allow_all":
		return AllowAll, nil
	case "deny_all":
		return DenyAll, nil
	}
	return 0, fmt.Errorf("%s '%s' is not allow_all or deny_all", k, s)
}

func duration(k string, v any) (time.Duration, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("%s must be a duration such as 1s or 250ms, not %v", k, v)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s '%s' is not a duration such as 1s or 250ms", k, s)
	}
	if d < 0 || d > maxDuration || (d == 0 && k != "burst") {
		return 0, fmt.Errorf("%s %v must be positive and at most %v", k, d, maxDuration)
	}
	return d, nil
}

func count(k string, v any) (uint64, error) {
	var n float64
	switch x := v.(type) {
	case int:
		n = float64(x)
	case int64:
		n = float64(x)
	case uint64:
		n = float64(x)
	default:
		return 0, fmt.Errorf("%s must be a whole number, not %v", k, v)
	}
	if n < 0 || n > maxRequestsPerUnit || math.IsNaN(n) {
		return 0, fmt.Errorf("%s %v must be between 0 and %d", k, v, uint64(maxRequestsPerUnit))
	}
	return uint64(n), nil
}
