package rls

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// validationCases are the reference loader's rules (src/config/
// config_impl.go), one file each in testdata/validate, with the error the
// reference gives ("" when it accepts the file), and our additions' rules.
var validationCases = []struct {
	file, reason string
}{
	// Decoding and key checks (ConfigFileContentToYaml, validateYamlKeys).
	{"bad_yaml.yaml", "error loading config file: yaml: line 2: found unexpected end of stream"},
	{"top_level_list.yaml", "error loading config file: yaml: unmarshal errors: line 1: cannot unmarshal !!seq into map[interface {}]interface {}"},
	{"non_string_key.yaml", "config error, key is not of type string: 0.25"},
	{"unknown_key.yaml", "config error, unknown key 'ratelimit'"},
	{"unknown_nested_key.yaml", "config error, unknown key 'requestsperunit'"},
	{"non_map_list.yaml", "config error, yaml file contains list of type other than map: a"},
	{"float_leaf.yaml", "error checking config"},
	{"negative_requests.yaml", "error loading config file: yaml: unmarshal errors: line 6: cannot unmarshal !!int `-1` into uint32"},
	{"string_requests.yaml", "error loading config file: yaml: unmarshal errors: line 6: cannot unmarshal !!str `5` into uint32"},
	{"yaml11_values.yaml", ""},
	// loadConfig.
	{"empty_domain.yaml", "config file cannot have empty domain"},
	{"empty_file.yaml", "config file cannot have empty domain"},
	// loadDescriptors.
	{"empty_key.yaml", "descriptor has empty key"},
	{"duplicate_key.yaml", "duplicate descriptor composite key 'test-domain.key1_value1'"},
	{"duplicate_composite_key.yaml", "duplicate descriptor composite key 'test-domain.a_b'"},
	{"duplicate_nested_key.yaml", "duplicate descriptor composite key 'test-domain.key1.sub'"},
	{"same_key_other_levels.yaml", ""},
	{"bad_unit.yaml", "invalid rate limit unit 'foo'"},
	{"unknown_unit.yaml", "invalid rate limit unit 'unknown'"},
	{"missing_unit.yaml", "invalid rate limit unit ''"},
	{"unit_any_case.yaml", ""},
	{"unlimited_with_unit.yaml", "should not specify rate limit unit when unlimited"},
	{"unlimited_without_unit.yaml", ""},
	{"replaces_empty.yaml", "should not have an empty replaces entry"},
	{"replaces_self.yaml", "replaces should not contain name of same descriptor"},
	{"replaces_other.yaml", ""},
	{"share_threshold_without_wildcard.yaml", "share_threshold can only be used with wildcard values (ending with '*'), but found key 'files_files/'"},
	{"share_threshold_wildcard.yaml", ""},
	{"null_rate_limit.yaml", ""},
	// Our additions.
	{"list_ok.yaml", ""},
	{"both_rate_limit_and_list.yaml", "descriptor 'test-domain.key1' has both rate_limit and rate_limits"},
	{"list_unlimited.yaml", "unlimited is not allowed in rate_limits"},
	{"list_replaces_sibling.yaml", "replaces should not contain name of same descriptor: 'b' is in its rate_limits"},
	{"bad_algorithm.yaml", "invalid algorithm 'leaky' (want fixed-window, sliding-window, gcra, token-bucket, leaky-bucket or sliding-log)"},
	{"algorithm_zero_requests.yaml", "algorithm token-bucket needs requests_per_unit of at least 1"},
	{"bad_multiplier.yaml", "unit_multiplier 0 must be between 1 and 52560000 for unit minute"},
	{"algorithm_unlimited.yaml", "should not specify algorithm when unlimited"},
}

func TestValidation(t *testing.T) {
	for _, c := range validationCases {
		t.Run(c.file, func(t *testing.T) {
			path := filepath.Join("testdata", "validate", c.file)
			_, err := LoadConfig(path)
			if c.reason == "" {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a *ConfigError", err)
			}
			if want := path + ": " + c.reason; err.Error() != want {
				t.Errorf("got  %q\nwant %q", err.Error(), want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
}

// Every file of testdata/validate has a case.
func TestValidationCasesCoverTestdata(t *testing.T) {
	files, _ := filepath.Glob("testdata/validate/*.yaml")
	have := map[string]bool{}
	for _, c := range validationCases {
		have[c.file] = true
	}
	for _, f := range files {
		if !have[filepath.Base(f)] {
			t.Errorf("%s has no case", f)
		}
	}
}

func TestDuplicateDomainAndMerge(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", "domain: d\ndescriptors:\n  - key: k1\n    value: v1\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")
	b := writeFile(t, dir, "b.yaml", "domain: d\ndescriptors:\n  - key: k2\n    rate_limit: {unit: minute, requests_per_unit: 20}\n")
	if _, err := LoadConfig(dir); err == nil || err.Error() != b+": duplicate domain 'd' in config file" {
		t.Errorf("without merging: %v", err)
	}
	cfg, err := LoadConfig(dir, MergeDomains(true))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k1_v1", "k2"} {
		if cfg.domains["d"].children[k] == nil {
			t.Errorf("merged domain lacks %s", k)
		}
	}
	// A key defined in both files is still a duplicate when merging.
	writeFile(t, dir, "c.yaml", "domain: d\ndescriptors:\n  - key: k1\n    value: v1\n")
	if _, err := LoadConfig(dir, MergeDomains(true)); err == nil || !strings.HasSuffix(err.Error(), "c.yaml: duplicate descriptor composite key 'd.k1_v1'") {
		t.Errorf("duplicate key across merged files: %v", err)
	}
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "one.yaml", "domain: one\n")
	writeFile(t, dir, "sub/two.conf", "domain: two\n") // any name, any depth
	writeFile(t, dir, ".hidden.yaml", "not: [valid")   // dot files are skipped
	writeFile(t, dir, "..data/three.yaml", "domain: one\n")
	cfg, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Domains(), ","); got != "one,two" {
		t.Errorf("domains %s", got)
	}
	if _, err := LoadConfig(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing path loaded")
	}
}
