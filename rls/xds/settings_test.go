package xds

import (
	"maps"
	"testing"
)

func TestParseNodeMetadata(t *testing.T) {
	for in, want := range map[string]map[string]string{
		"":                          {},
		"cluster=eg":                {"cluster": "eg"},
		"a=1,b=2=3":                 {"a": "1", "b": "2=3"},
		"key1:val1,key2=val2":       {"key2": "val2"}, // the reference's own example
		"a=,=b,c":                   {"a": "", "": "b"},
		"zone=eu-west-1,zone=other": {"zone": "other"},
	} {
		if got := ParseNodeMetadata(in); !maps.Equal(got, want) {
			t.Errorf("%q: %v, want %v", in, got, want)
		}
	}
}

func TestParseHeaders(t *testing.T) {
	for in, want := range map[string]map[string]string{
		"":                          {},
		"  ":                        {},
		"authorization:Bearer x":    {"authorization": "Bearer x"},
		"a:1, b : 2":                {"a": "1", "b": "2"},
		"x-url:https://example.com": {"x-url": "https://example.com"},
	} {
		got, err := ParseHeaders(in)
		if err != nil || !maps.Equal(got, want) {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"a", "a:1,", ":v", "a:1,b"} {
		if got, err := ParseHeaders(in); err == nil {
			t.Errorf("%q: %v, want an error", in, got)
		}
	}
}
