// Package docstest reads the examples of the documentation in docs/ for
// the tests that hold them true: the fenced code blocks of a Markdown
// file, a YAML block as the JSON that protojson decodes (Envoy's
// configuration, say), and the protos' validation of all of a decoded
// configuration, typed_config included. Its own test type-checks every Go
// block of README.md and docs/*.md against the module; the messages the
// docs quote are checked by the tests of the commands that print them
// (internal/cli/clitest.DocQuote).
package docstest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v2"
)

// Blocks returns the contents of md's fenced code blocks of language
// lang ("yaml", "sh").
func Blocks(md, lang string) []string {
	var out []string
	for _, b := range BlocksAt(md, lang) {
		out = append(out, b.Code)
	}
	return out
}

// Block is a fenced code block of a Markdown file.
type Block struct {
	Line int    // the line of its first line of code, from 1
	Code string // its lines, each ending in a newline
}

// BlocksAt returns md's fenced code blocks of language lang, with where
// they are, for a test to report a problem at the file's own line.
func BlocksAt(md, lang string) []Block {
	var out []Block
	var cur *Block
	n := 0
	for line := range strings.Lines(md) {
		n++
		fence := strings.TrimSpace(line)
		switch {
		case cur == nil && fence == "```"+lang:
			cur = &Block{Line: n + 1}
		case cur != nil && fence == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.Code += strings.TrimSuffix(line, "\n") + "\n"
		}
	}
	return out
}

// JSON converts a YAML document to JSON (map keys as strings).
func JSON(doc string) ([]byte, error) {
	var v any
	if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
		return nil, err
	}
	return json.Marshal(stringKeys(v))
}

// stringKeys turns yaml.v2's maps (keys of any type) into JSON's.
func stringKeys(v any) any {
	switch v := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[fmt.Sprint(k)] = stringKeys(x)
		}
		return m
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = stringKeys(x)
		}
		return out
	}
	return v
}

// ValidateDeep runs the protoc-gen-validate rules (ValidateAll) of m and,
// which ValidateAll does not do, of every message packed in a
// google.protobuf.Any within it (an Envoy filter's typed_config, a
// matcher's input or action), recursively. An Any whose type is not
// linked into the test binary is an error.
func ValidateDeep(m proto.Message) error {
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err)
		}
	}
	var err error
	var walk func(protoreflect.Message)
	walk = func(msg protoreflect.Message) {
		if a, ok := msg.Interface().(*anypb.Any); ok {
			inner, e := a.UnmarshalNew()
			if e != nil {
				err = errors.Join(err, fmt.Errorf("%s: %w", a.GetTypeUrl(), e))
				return
			}
			err = errors.Join(err, ValidateDeep(inner))
			return
		}
		msg.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := 0; i < v.List().Len(); i++ {
					walk(v.List().Get(i).Message())
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walk(mv.Message())
					return true
				})
			case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
				walk(v.Message())
			}
			return true
		})
	}
	walk(m.ProtoReflect())
	return err
}
