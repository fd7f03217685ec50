package xds

import (
	"fmt"
	"strings"
)

// ParseNodeMetadata parses CONFIG_GRPC_XDS_NODE_METADATA as the reference
// does: comma-separated key=value pairs, the value being everything after
// the first '='; an item without '=' is ignored (the reference's own
// example, "key1:val1,key2=val2", keeps only key2).
func ParseNodeMetadata(s string) map[string]string {
	md := map[string]string{}
	for item := range strings.SplitSeq(s, ",") {
		if k, v, ok := strings.Cut(item, "="); ok {
			md[k] = v
		}
	}
	return md
}

// ParseHeaders parses CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS:
// comma-separated name:value pairs, spaces around them ignored. The
// value is everything after the first ':' (the reference, through
// envconfig, refuses a value with a ':' of its own); an item without ':'
// or with an empty name is an error, as it is for the reference.
func ParseHeaders(s string) (map[string]string, error) {
	h := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return h, nil
	}
	for item := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(item, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("invalid header %q: want name:value", item)
		}
		h[k] = v
	}
	return h, nil
}
