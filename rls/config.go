package rls

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"gopkg.in/yaml.v2"

	"github.com/smoothrate/ratelimit/internal/regularfile"
	"github.com/smoothrate/ratelimit/throttle"
)

// Config is a loaded and validated rate limit configuration: one or more
// domains, each a tree of descriptors, as envoyproxy/ratelimit reads its
// runtime directory. Make one with LoadConfig or ParseConfig; it is
// immutable and safe to share between goroutines and Services.
type Config struct {
	domains map[string]*node
	files   []string
}

// node is one level of a domain's descriptor tree.
type node struct {
	// children are keyed by the reference's composite key: "key" for a
	// key-only descriptor, "key_value" otherwise.
	children map[string]*node
	// wildcards are the children's composite keys that end in '*', in the
	// order they were loaded (the first whose prefix matches wins).
	wildcards []string
	rule      *descRule

	valueToMetric   bool
	shareThreshold  bool
	wildcardPattern string // the composite key, when shareThreshold
}

// descRule is the rate_limit (or, an addition, the rate_limits) of one
// descriptor of the configuration.
type descRule struct {
	// FullKey names the rule in metrics: "domain.key_value.key".
	FullKey        string
	Unlimited      bool
	ShadowMode     bool
	QuotaMode      bool
	DetailedMetric bool
	// Limits has one element for the reference's rate_limit, one per
	// entry of rate_limits, none when Unlimited.
	Limits []*limitSpec
}

// limitSpec is one limit of a descRule.
type limitSpec struct {
	Name            string
	RequestsPerUnit uint32
	Unit            rlsv3.RateLimitResponse_RateLimit_Unit
	// UnitMultiplier is unit_multiplier (an addition): the window or
	// period is UnitMultiplier units. 1 when not given.
	UnitMultiplier int64
	// Algorithm is algorithm (an addition); 0 is the reference's counting
	// fixed window (fixed-window).
	Algorithm throttle.Algorithm
	Replaces  []string

	index int // position in its rule's Limits: part of its store key
}

// referenceWindow reports whether the limit counts as the reference does:
// an epoch-aligned fixed window that counts refused hits too.
func (l *limitSpec) referenceWindow() bool { return l.Algorithm == 0 }

// seconds is the limit's window or period in seconds.
func (l *limitSpec) seconds() int64 { return unitSeconds(l.Unit) * l.UnitMultiplier }

// period is seconds as a Duration.
func (l *limitSpec) period() time.Duration { return time.Duration(l.seconds()) * time.Second }

// unitSeconds is the reference's divider of each unit (a month is 30 days,
// a year 365).
func unitSeconds(u rlsv3.RateLimitResponse_RateLimit_Unit) int64 {
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return 1
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return 60
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return 3600
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return 86400
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		return 7 * 86400
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		return 30 * 86400
	case rlsv3.RateLimitResponse_RateLimit_YEAR:
		return 365 * 86400
	}
	return 0
}

// Domains returns the configuration's domains, sorted.
func (c *Config) Domains() []string {
	ds := make([]string, 0, len(c.domains))
	for d := range c.domains {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	return ds
}

// Files returns the files the configuration was read from, in load order
// (for ParseConfigProtos, the resources' names).
func (c *Config) Files() []string { return append([]string(nil), c.files...) }

// ConfigError is a rejected configuration: the file and the reason, which
// Error prints as the reference does, "<file>: <reason>", on one line.
type ConfigError struct {
	File   string
	Reason string
}

func (e *ConfigError) Error() string { return e.File + ": " + e.Reason }

// A LoadOption changes how LoadConfig and ParseConfig read files.
type LoadOption interface{ applyLoad(*loadConfig) }

type loadConfig struct{ merge bool }

type loadOptionFunc func(*loadConfig)

func (f loadOptionFunc) applyLoad(c *loadConfig) { f(c) }

// MergeDomains lets several files share a domain, their descriptors
// merged (the reference's MERGE_DOMAIN_CONFIG); by default a second file
// with the same domain is rejected.
func MergeDomains(merge bool) LoadOption {
	return loadOptionFunc(func(c *loadConfig) { c.merge = merge })
}

func buildLoadConfig(opts []LoadOption) loadConfig {
	var lc loadConfig
	for _, o := range opts {
		if o != nil {
			o.applyLoad(&lc)
		}
	}
	return lc
}

// File is one configuration file's name (as errors name it) and contents.
type File struct {
	Name    string
	Content []byte
}

// Bounds on what LoadConfig reads: the largest configurations known
// (thousands of descriptors) take a few hundred KiB.
const (
	MaxConfigFileBytes = 16 << 20 // one file
	MaxConfigBytes     = 64 << 20 // all the files of a directory together
)

// LoadConfig reads path, a YAML file or a directory of them, as
// envoyproxy/ratelimit reads its runtime directory: every regular file
// below the directory, recursively, in lexical order, whatever its name,
// except names that start with '.' (editors' swap files, Kubernetes'
// ..data links of a mounted ConfigMap). A rejected configuration is a
// *ConfigError naming the file. Only regular files are read (a link to one
// is followed): a named pipe, a socket or a device is refused without being
// opened for a wait, and a file over MaxConfigFileBytes, or files over
// MaxConfigBytes together, are refused too.
func LoadConfig(path string, opts ...LoadOption) (*Config, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &ConfigError{File: path, Reason: err.Error()}
	}
	var files []File
	var total int64
	read := func(p string) error {
		b, _, err := regularfile.Read(p, min(MaxConfigFileBytes, MaxConfigBytes-total))
		if err != nil {
			return &ConfigError{File: p, Reason: err.Error()}
		}
		total += int64(len(b))
		files = append(files, File{Name: p, Content: b})
		return nil
	}
	if !st.IsDir() {
		if err := read(path); err != nil {
			return nil, err
		}
	} else {
		err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return &ConfigError{File: p, Reason: err.Error()}
			}
			if p != path && strings.HasPrefix(d.Name(), ".") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.IsDir() {
				return nil
			}
			// A symbolic link to a file is read; one to a directory is
			// not followed (as filepath.Walk in the reference).
			if st, err := os.Stat(p); err != nil || st.IsDir() {
				if err != nil {
					return &ConfigError{File: p, Reason: err.Error()}
				}
				return nil
			}
			return read(p)
		})
		if err != nil {
			return nil, err
		}
	}
	return ParseConfig(files, opts...)
}

// ParseConfig builds a configuration from files' contents, in order.
func ParseConfig(files []File, opts ...LoadOption) (*Config, error) {
	lc := buildLoadConfig(opts)
	c := &Config{domains: map[string]*node{}}
	for _, f := range files {
		root, err := parseFile(f.Name, f.Content)
		if err != nil {
			return nil, err
		}
		if err := c.addFile(f.Name, root, lc.merge); err != nil {
			return nil, err
		}
		c.files = append(c.files, f.Name)
	}
	return c, nil
}

// The YAML shapes, as the reference's structs decode them (yaml.v2, not
// strict: validateKeys has already refused unknown keys).
type yamlRoot struct {
	Domain      string
	Descriptors []yamlDescriptor
}

type yamlDescriptor struct {
	Key            string
	Value          string
	RateLimit      *yamlRateLimit  `yaml:"rate_limit"`
	RateLimits     []yamlRateLimit `yaml:"rate_limits"`
	Descriptors    []yamlDescriptor
	ShadowMode     bool `yaml:"shadow_mode"`
	QuotaMode      bool `yaml:"quota_mode"`
	DetailedMetric bool `yaml:"detailed_metric"`
	ValueToMetric  bool `yaml:"value_to_metric"`
	ShareThreshold bool `yaml:"share_threshold"`
}

type yamlRateLimit struct {
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unit            string
	Unlimited       bool
	Name            string
	Replaces        []struct{ Name string }
	UnitMultiplier  *int64 `yaml:"unit_multiplier"`
	Algorithm       string
}

// parseFile decodes one file, refusing what the reference refuses before
// it looks at the descriptors: bad YAML, keys that are not strings or not
// known, lists of something else than maps, leaves that are not strings,
// integers or booleans.
func parseFile(name string, content []byte) (*yamlRoot, error) {
	any := map[interface{}]interface{}{}
	if err := yaml.Unmarshal(content, &any); err != nil {
		return nil, &ConfigError{File: name, Reason: "error loading config file: " + oneLine(err.Error())}
	}
	if reason := validateKeys(any); reason != "" {
		return nil, &ConfigError{File: name, Reason: reason}
	}
	var root yamlRoot
	if err := yaml.Unmarshal(content, &root); err != nil {
		return nil, &ConfigError{File: name, Reason: "error loading config file: " + oneLine(err.Error())}
	}
	return &root, nil
}

// oneLine joins a multi-line error (yaml.v2's unmarshal errors list one
// problem per line after a heading) so that a ConfigError is one line:
// "heading: problem; problem".
func oneLine(s string) string {
	lines := strings.Split(s, "\n")
	if len(lines) == 1 {
		return s
	}
	var rest []string
	for _, l := range lines[1:] {
		if l = strings.TrimSpace(l); l != "" {
			rest = append(rest, l)
		}
	}
	return strings.TrimSpace(lines[0]) + " " + strings.Join(rest, "; ")
}

// validKeys are the keys the reference knows, anywhere in a file, plus
// ours (the additions: rate_limits, unit_multiplier, algorithm).
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true,
	"rate_limit": true, "unit": true, "requests_per_unit": true,
	"unlimited": true, "shadow_mode": true, "quota_mode": true, "name": true,
	"replaces": true, "detailed_metric": true, "value_to_metric": true,
	"share_threshold": true,
	"rate_limits":     true, "unit_multiplier": true, "algorithm": true,
}

// validateKeys walks the generic decoding as the reference does and
// returns the reason for the first problem, or "". Go's map order is
// random, so when a file has two problems either may be named; the
// reference behaves the same.
func validateKeys(m map[interface{}]interface{}) string {
	// Sorted keys: the same file always gives the same error.
	keys := make([]interface{}, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
	for _, k := range keys {
		ks, ok := k.(string)
		if !ok {
			return fmt.Sprintf("config error, key is not of type string: %v", k)
		}
		if !validKeys[ks] {
			return fmt.Sprintf("config error, unknown key '%s'", ks)
		}
		switch v := m[k].(type) {
		case []interface{}:
			for _, e := range v {
				em, ok := e.(map[interface{}]interface{})
				if !ok {
					return fmt.Sprintf("config error, yaml file contains list of type other than map: %v", e)
				}
				if r := validateKeys(em); r != "" {
					return r
				}
			}
		case map[interface{}]interface{}:
			if r := validateKeys(v); r != "" {
				return r
			}
		case string, int, bool, nil:
		default:
			return "error checking config"
		}
	}
	return ""
}

// addFile loads root's descriptors into c.
func (c *Config) addFile(file string, root *yamlRoot, merge bool) error {
	if root.Domain == "" {
		return &ConfigError{File: file, Reason: "config file cannot have empty domain"}
	}
	d, present := c.domains[root.Domain]
	if present && !merge {
		return &ConfigError{File: file, Reason: fmt.Sprintf("duplicate domain '%s' in config file", root.Domain)}
	}
	if !present {
		d = &node{children: map[string]*node{}}
	}
	if err := d.load(file, root.Domain+".", root.Descriptors); err != nil {
		return err
	}
	c.domains[root.Domain] = d
	return nil
}

// load adds descriptors below n, checking each as the reference does.
func (n *node) load(file, parentKey string, descriptors []yamlDescriptor) error {
	fail := func(format string, a ...any) error {
		return &ConfigError{File: file, Reason: fmt.Sprintf(format, a...)}
	}
	for _, yd := range descriptors {
		if yd.Key == "" {
			return fail("descriptor has empty key")
		}
		finalKey := yd.Key
		if yd.Value != "" {
			finalKey += "_" + yd.Value
		}
		fullKey := parentKey + finalKey
		if _, dup := n.children[finalKey]; dup {
			return fail("duplicate descriptor composite key '%s'", fullKey)
		}
		rule, err := newRule(yd, fullKey)
		if err != nil {
			return fail("%s", err.Error())
		}
		wildcard := strings.HasSuffix(finalKey, "*")
		if yd.ShareThreshold && !wildcard {
			return fail("share_threshold can only be used with wildcard values (ending with '*'), but found key '%s'", finalKey)
		}
		child := &node{
			children:       map[string]*node{},
			rule:           rule,
			valueToMetric:  yd.ValueToMetric,
			shareThreshold: yd.ShareThreshold,
		}
		if yd.ShareThreshold {
			child.wildcardPattern = finalKey
		}
		if wildcard {
			n.wildcards = append(n.wildcards, finalKey)
		}
		if err := child.load(file, fullKey+".", yd.Descriptors); err != nil {
			return err
		}
		n.children[finalKey] = child
	}
	return nil
}

// newRule checks and converts a descriptor's rate_limit or rate_limits;
// nil when it has neither.
func newRule(yd yamlDescriptor, fullKey string) (*descRule, error) {
	if yd.RateLimit == nil && len(yd.RateLimits) == 0 {
		return nil, nil
	}
	if yd.RateLimit != nil && len(yd.RateLimits) > 0 {
		return nil, fmt.Errorf("descriptor '%s' has both rate_limit and rate_limits", fullKey)
	}
	r := &descRule{FullKey: fullKey, ShadowMode: yd.ShadowMode, QuotaMode: yd.QuotaMode, DetailedMetric: yd.DetailedMetric}
	if yd.RateLimit != nil {
		l, unlimited, err := newLimit(yd.RateLimit, false)
		if err != nil {
			return nil, err
		}
		// An unlimited rule keeps its limit for its name and replaces;
		// it is never counted.
		r.Unlimited = unlimited
		r.Limits = []*limitSpec{l}
		return r, nil
	}
	names := map[string]bool{}
	for i := range yd.RateLimits {
		l, _, err := newLimit(&yd.RateLimits[i], true)
		if err != nil {
			return nil, err
		}
		l.index = i
		r.Limits = append(r.Limits, l)
		if l.Name != "" {
			names[l.Name] = true
		}
	}
	// The limits of a list are one descriptor's: a limit that replaced
	// another would be the reference's "replaces should not contain name
	// of same descriptor" (and two that replace each other would leave
	// the descriptor unlimited).
	for _, l := range r.Limits {
		for _, name := range l.Replaces {
			if names[name] {
				return nil, fmt.Errorf("replaces should not contain name of same descriptor: '%s' is in its rate_limits", name)
			}
		}
	}
	return r, nil
}

// newLimit checks one rate_limit. In a rate_limits list (inList) every
// limit must be a real one: unlimited is refused there.
func newLimit(y *yamlRateLimit, inList bool) (*limitSpec, bool, error) {
	value, present := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(y.Unit)]
	validUnit := present && value != int32(rlsv3.RateLimitResponse_RateLimit_UNKNOWN)
	if y.Unlimited {
		if inList {
			return nil, false, fmt.Errorf("unlimited is not allowed in rate_limits")
		}
		if validUnit {
			return nil, false, fmt.Errorf("should not specify rate limit unit when unlimited")
		}
	} else if !validUnit {
		return nil, false, fmt.Errorf("invalid rate limit unit '%s'", y.Unit)
	}
	l := &limitSpec{
		Name:            y.Name,
		RequestsPerUnit: y.RequestsPerUnit,
		Unit:            rlsv3.RateLimitResponse_RateLimit_Unit(value),
		UnitMultiplier:  1,
	}
	for _, r := range y.Replaces {
		l.Replaces = append(l.Replaces, r.Name)
	}
	for _, r := range y.Replaces {
		if r.Name == "" {
			return nil, false, fmt.Errorf("should not have an empty replaces entry")
		}
		if r.Name == y.Name {
			return nil, false, fmt.Errorf("replaces should not contain name of same descriptor")
		}
	}
	if y.UnitMultiplier != nil {
		m := *y.UnitMultiplier
		if y.Unlimited {
			return nil, false, fmt.Errorf("should not specify unit_multiplier when unlimited")
		}
		// The window, in seconds, must stay far from overflowing.
		if m < 1 || m > maxMultiplier/unitSeconds(l.Unit) {
			return nil, false, fmt.Errorf("unit_multiplier %d must be between 1 and %d for unit %s", m, maxMultiplier/unitSeconds(l.Unit), strings.ToLower(l.Unit.String()))
		}
		l.UnitMultiplier = m
	}
	if y.Algorithm != "" {
		if y.Unlimited {
			return nil, false, fmt.Errorf("should not specify algorithm when unlimited")
		}
		a, err := throttle.ParseAlgorithm(y.Algorithm)
		if err != nil {
			return nil, false, fmt.Errorf("invalid algorithm '%s' (want fixed-window, sliding-window, gcra, token-bucket, leaky-bucket or sliding-log)", y.Algorithm)
		}
		if a != throttle.FixedWindow {
			l.Algorithm = a
			// throttle's definitions need a limit of at least one;
			// the reference's window takes 0 (everything refused).
			if l.RequestsPerUnit < 1 {
				return nil, false, fmt.Errorf("algorithm %s needs requests_per_unit of at least 1", a)
			}
			if a == throttle.SlidingLog && l.RequestsPerUnit > throttle.MaxLogCount {
				return nil, false, fmt.Errorf("algorithm sliding-log keeps one entry per request: requests_per_unit %d is above %d", l.RequestsPerUnit, throttle.MaxLogCount)
			}
			if err := (throttle.Limit{Count: int(l.RequestsPerUnit), Period: l.period()}).Validate(a); err != nil {
				return nil, false, fmt.Errorf("algorithm %s: %v", a, err)
			}
		}
	}
	return l, y.Unlimited, nil
}

// maxMultiplier bounds a window at about a hundred years, in seconds.
const maxMultiplier = 100 * 365 * 86400
