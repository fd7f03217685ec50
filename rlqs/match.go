package rlqs

import (
	"slices"
	"strconv"
	"strings"
)

// match returns the entry a client's bucket id falls under, or nil when
// none does (the blanket rule applies). Key order never matters: a bucket
// id is a map.
func (c *Config) match(id map[string]string) *rule {
	for _, r := range c.byKeys[keySig(id)] {
		if r.matches(id) {
			return r
		}
	}
	return nil
}

// ruleFor returns the entry id falls under, or the rule of unmatched ids.
func (c *Config) ruleFor(id map[string]string) *rule {
	if r := c.match(id); r != nil {
		return r
	}
	return c.unmatched
}

// matches reports whether id, which has r's keys, has r's values (or any,
// where r's is "*").
func (r *rule) matches(id map[string]string) bool {
	for k, want := range r.keys {
		if want != "*" && id[k] != want {
			return false
		}
	}
	return true
}

// sortedKeys returns id's keys in order.
func sortedKeys(id map[string]string) []string {
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// keySig names id's key set: the sorted keys, each preceded by its length,
// so that no two sets share a name.
func keySig(id map[string]string) string {
	var b strings.Builder
	for _, k := range sortedKeys(id) {
		writeLen(&b, k)
	}
	return b.String()
}

// canonicalID names a bucket id whatever the order of its keys: its keys
// sorted, each key and value preceded by its length, so that no two ids
// share a name. It is what a bucket is known by in memory and, hashed, in
// Redis.
func canonicalID(id map[string]string) string {
	var b strings.Builder
	for _, k := range sortedKeys(id) {
		writeLen(&b, k)
		writeLen(&b, id[k])
	}
	return b.String()
}

// writeLen writes s preceded by its length and a colon.
func writeLen(b *strings.Builder, s string) {
	b.WriteString(strconv.Itoa(len(s)))
	b.WriteByte(':')
	b.WriteString(s)
}

// displayID writes a bucket id for people: {k1: v1, k2: v2}, keys sorted,
// values quoted when they need it.
func displayID(id map[string]string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range sortedKeys(id) {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteIfNeeded(k))
		b.WriteString(": ")
		b.WriteString(quoteIfNeeded(id[k]))
	}
	b.WriteByte('}')
	return b.String()
}

func quoteIfNeeded(s string) string {
	for _, r := range s {
		if !(r == '_' || r == '-' || r == '.' || r == '/' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return strconv.Quote(s)
		}
	}
	if s == "" {
		return `""`
	}
	return s
}
