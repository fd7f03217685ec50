package docstest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/scanner"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A Go block of the docs is either a whole file (it starts with package) or
// a fragment: statements, with `import "…"` lines and `…` for the parts a
// reader fills in. A fragment is checked as the body of a function
// returning an error, with the names it uses but does not declare (ctx,
// conn, a store made in an earlier block) declared beforehand, and the
// packages it names imported. Declared-and-unused variables, unused
// imports and a missing return are what fragments have, and are not
// reported; everything else is: a name declared twice, a wrong type, a
// method that does not exist, a wrong number of arguments.

// packages are the import paths of the package names fragments use.
var packages = map[string]string{
	"ratelimit":   "github.com/smoothrate/ratelimit",
	"clocktest":   "github.com/smoothrate/ratelimit/clocktest",
	"shape":       "github.com/smoothrate/ratelimit/shape",
	"jobs":        "github.com/smoothrate/ratelimit/jobs",
	"distributed": "github.com/smoothrate/ratelimit/distributed",
	"throttle":    "github.com/smoothrate/ratelimit/throttle",
	"httplimit":   "github.com/smoothrate/ratelimit/httplimit",
	"grpclimit":   "github.com/smoothrate/ratelimit/grpclimit",
	"rls":         "github.com/smoothrate/ratelimit/rls",
	"rlqs":        "github.com/smoothrate/ratelimit/rlqs",
	"xds":         "github.com/smoothrate/ratelimit/rls/xds",
	"redis":       "github.com/redis/go-redis/v9",
	"miniredis":   "github.com/alicebob/miniredis/v2",
	"grpc":        "google.golang.org/grpc",
	"context":     "context",
	"errors":      "errors",
	"fmt":         "fmt",
	"http":        "net/http",
	"io":          "io",
	"log":         "log",
	"net":         "net",
	"os":          "os",
	"synctest":    "testing/synctest",
	"testing":     "testing",
	"time":        "time",
	"tls":         "crypto/tls",
}

// givens are the names fragments use without declaring them: what the
// reader has at hand (a context, a connection) or made in an earlier block
// of the same page. byDoc holds the pages where a name means another thing.
var givens = map[string]string{
	"ctx":         "var ctx context.Context",
	"t":           "var t *testing.T",
	"conn":        "var conn net.Conn",
	"file":        "var file *os.File",
	"jobs":        "var jobs []string",
	"run":         "func run(string) {}",
	"client":      "var client *redis.Client",
	"redisClient": "var redisClient *redis.Client",
	"store":       "var store throttle.Store",
	"perIP":       "var perIP *throttle.Limiter",
	"perRoute":    "var perRoute *throttle.Limiter",
	"dst":         "var dst io.Writer",
	"src":         "var src io.Reader",
	"rlim":        "var rlim ratelimit.Acquirer",
	"wlim":        "var wlim ratelimit.Acquirer",
	"total":       "var total ratelimit.Acquirer",
	"perStream":   "var perStream ratelimit.Acquirer",
	"global":      "var global ratelimit.Acquirer",
	"ln":          "var ln net.Listener",
	"Item":        "type Item = string",
	"items":       "var items []Item",
	"itemsChan":   "var itemsChan chan Item",
	"fn":          "var fn func(context.Context, Item) error",
	"clk":         "var clk *clocktest.Fake",
	"tlsConfig":   "var tlsConfig *tls.Config",
}

var byDoc = map[string]map[string]string{
	"docs/rls.md": {"store": "var store rls.Store"},
}

// block is one Go block of a page.
type block struct {
	doc  string // path from the module's root
	line int    // of the block's first line of code
	code string
}

func TestDocSnippetsCompile(t *testing.T) {
	root := moduleRoot(t)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []block
	for _, doc := range append([]string{filepath.Join(root, "README.md")}, docs...) {
		rel, _ := filepath.Rel(root, doc)
		blocks = append(blocks, goBlocks(t, doc, filepath.ToSlash(rel))...)
	}
	if len(blocks) < 10 {
		t.Fatalf("%d Go blocks in README.md and docs/: the extraction is broken", len(blocks))
	}
	imp := exportImporter(t, root, slices.Sorted(maps.Values(packages)))
	for _, b := range blocks {
		for _, e := range checkBlock(b, imp) {
			t.Errorf("%s:%d: %s", b.doc, e.line, e.msg)
		}
	}
}

// goBlocks returns the ```go blocks of the Markdown file at path.
func goBlocks(t *testing.T, path, rel string) []block {
	t.Helper()
	md, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []block
	for _, b := range BlocksAt(string(md), "go") {
		blocks = append(blocks, block{doc: rel, line: b.Line, code: b.Code})
	}
	return blocks
}

type docError struct {
	line int
	msg  string
}

var (
	importLine  = regexp.MustCompile(`^import\s+"[^"]+"\s*$`)
	qualified   = regexp.MustCompile(`\b([A-Za-z_]\w*)\.[A-Za-z_]`)
	undefined   = regexp.MustCompile(`^undefined: (\w+)$`)
	placeholder = strings.NewReplacer("{ … }", "{}", "{ ... }", "{}", "…", "")
)

// checkBlock type-checks b and returns its errors, at the page's lines.
func checkBlock(b block, imp types.Importer) []docError {
	if strings.HasPrefix(strings.TrimSpace(b.code), "package ") {
		return typeCheck(b.code, b.line, 1, imp)
	}
	var imports, body []string
	for line := range strings.Lines(b.code) {
		if importLine.MatchString(strings.TrimSpace(line)) {
			imports = append(imports, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "import")))
			body = append(body, "\n") // keeps the lines where they are
			continue
		}
		body = append(body, placeholder.Replace(line))
	}
	code := strings.Join(body, "")
	names := map[string]bool{}
	for _, m := range qualified.FindAllStringSubmatch(code, -1) {
		names[m[1]] = true
	}
	var decls []string
	for round := 0; ; round++ {
		var src strings.Builder
		src.WriteString("package snippet\n")
		for name := range names {
			if path, ok := packages[name]; ok && !slices.Contains(imports, strconv.Quote(path)) {
				fmt.Fprintf(&src, "import %s %q\n", name, path)
			}
		}
		for _, imp := range imports {
			fmt.Fprintf(&src, "import %s\n", imp)
		}
		for _, d := range decls {
			src.WriteString(d + "\n")
		}
		src.WriteString("func _() error {\n")
		first := strings.Count(src.String(), "\n") + 1
		src.WriteString(code + "}\n")
		errs := typeCheck(src.String(), b.line, first, imp)
		// Declare the names the block takes as given, once.
		var more []string
		for _, e := range errs {
			if m := undefined.FindStringSubmatch(e.msg); m != nil && round == 0 {
				if d, ok := givenFor(b.doc, m[1]); ok && !slices.Contains(decls, d) && !slices.Contains(more, d) {
					more = append(more, d)
					for _, m := range qualified.FindAllStringSubmatch(d, -1) {
						names[m[1]] = true
					}
				}
			}
		}
		if len(more) == 0 {
			return errs
		}
		decls = append(decls, more...)
	}
}

func givenFor(doc, name string) (string, bool) {
	if d, ok := byDoc[doc][name]; ok {
		return d, true
	}
	d, ok := givens[name]
	return d, ok
}

// typeCheck checks the Go file src, whose line first is the page's line
// at, and returns its errors at the page's lines; an error outside the
// page's lines (in what was added around a fragment) is at the block's
// first line.
func typeCheck(src string, at, first int, imp types.Importer) []docError {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "snippet.go", src, parser.SkipObjectResolution)
	toDoc := func(line int) int { return at + max(line-first, 0) }
	if err != nil {
		var list scanner.ErrorList
		if errors.As(err, &list) {
			var out []docError
			for _, e := range list {
				out = append(out, docError{toDoc(e.Pos.Line), e.Msg})
			}
			return out
		}
		return []docError{{at, err.Error()}}
	}
	var out []docError
	conf := types.Config{
		Importer: imp,
		Error: func(err error) {
			te := err.(types.Error)
			if te.Soft && (strings.Contains(te.Msg, "declared and not used") || strings.Contains(te.Msg, "imported and not used")) ||
				te.Msg == "missing return" {
				return
			}
			out = append(out, docError{toDoc(te.Fset.Position(te.Pos).Line), te.Msg})
		},
	}
	_, _ = conf.Check("snippet", fset, []*ast.File{f}, nil)
	return out
}

// moduleRoot is the directory of the module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// exportImporter is an importer that reads the export data the go command
// compiled for paths and their dependencies (go list -export), with the
// race detector when the test runs with it, so that what the tests of the
// module already compiled serves again.
func exportImporter(t *testing.T, root string, paths []string) types.Importer {
	t.Helper()
	args := []string{"list", "-export", "-deps", "-json=ImportPath,Export"}
	if raceBuild {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, paths...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v\n%s", err, stderr.Bytes())
	}
	exports := map[string]string{}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p struct{ ImportPath, Export string }
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		exports[p.ImportPath] = p.Export
	}
	fset := token.NewFileSet()
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %s (add it to packages)", path)
		}
		return os.Open(file)
	})
}
