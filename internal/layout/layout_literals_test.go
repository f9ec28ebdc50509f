package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
)

// literalExempt are directories, relative to the module root, whose code
// may spell store-like paths: the drivers' conformance suite writes
// fixtures below a test base of its own, shaped like the store's keys to
// exercise the same names, not the store of any registry.
var literalExempt = []string{
	"internal/storage/driver/testsuite",
}

// TestNoPathLiteralsOutsideLayout: no string literal in the module's
// non-test code outside this package spells a piece of a store path, so
// that layout stays the one place paths are spelt (its package doc). The
// pieces are taken from layout's own constants: its root, every
// repository subdirectory, every path below CairnDir, and the top-level
// directories in the forms that cannot be anything else ("blobs/" and
// "cairn/" alone are also in API URLs and the module's import path).
func TestNoPathLiteralsOutsideLayout(t *testing.T) {
	needles := storePathPieces(t)
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found: %v", err)
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if de.IsDir() {
			name := de.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") ||
				rel == "internal/layout" || contains(literalExempt, rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		f.Imports = nil
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ImportSpec:
				return false // import paths name packages, not storage
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(n.Value)
				if err != nil || strings.Contains(s, "\n") {
					return true // text of many lines is for people (usage), not a path
				}
				for _, needle := range needles {
					if containsPiece(s, needle) {
						pos := fset.Position(n.Pos())
						pos.Filename = rel
						t.Errorf("%s: %s spells %q of a store path; build it with package layout", pos, n.Value, needle)
						break
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// storePathPieces returns the strings that only a store path holds, from
// the string constants layout's own source declares.
func storePathPieces(t *testing.T) []string {
	t.Helper()
	consts := layoutStringConsts(t)
	top := map[string]string{
		// Forms of the top-level directories that are nothing but paths.
		BlobsDir:        relToRoot(BlobsDir) + "/" + string(digest.Canonical),
		RepositoriesDir: relToRoot(RepositoriesDir) + "/",
		CairnDir:        "", // each path below it is a piece of its own
	}
	pieces := []string{strings.TrimPrefix(Root, "/")}
	for name, v := range consts {
		switch {
		case v == Root:
		case strings.HasPrefix(v, "_"):
			pieces = append(pieces, v) // a repository's subdirectory
		case strings.HasPrefix(v, Root+"/"):
			if piece, ok := top[v]; ok {
				if piece != "" {
					pieces = append(pieces, piece)
				}
				continue
			}
			if !strings.HasPrefix(v, CairnDir+"/") {
				t.Fatalf("layout's %s = %q is a new top-level directory: say here how literals of it are found", name, v)
			}
			pieces = append(pieces, relToRoot(v))
		}
	}
	return pieces
}

func relToRoot(p string) string { return strings.TrimPrefix(p, Root+"/") }

// layoutStringConsts evaluates the string constants of this package's
// non-test files: literals, other such constants and their sums.
func layoutStringConsts(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	exprs := map[string]ast.Expr{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if i < len(vs.Values) {
						exprs[id.Name] = vs.Values[i]
					}
				}
			}
		}
	}
	var eval func(ast.Expr) (string, bool)
	eval = func(e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind != token.STRING {
				return "", false
			}
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		case *ast.Ident:
			if x, ok := exprs[e.Name]; ok {
				return eval(x)
			}
		case *ast.ParenExpr:
			return eval(e.X)
		case *ast.BinaryExpr:
			if e.Op == token.ADD {
				a, ok1 := eval(e.X)
				b, ok2 := eval(e.Y)
				return a + b, ok1 && ok2
			}
		}
		return "", false
	}
	out := map[string]string{}
	for name, e := range exprs {
		if s, ok := eval(e); ok {
			out[name] = s
		}
	}
	if out["Root"] != Root || out["BlobsDir"] != BlobsDir {
		t.Fatalf("reading layout's constants failed: %v", out)
	}
	return out
}

// containsPiece reports whether piece is in s as whole path components:
// not a part of a longer name ("dedup_layers_total" holds no "_layers").
func containsPiece(s, piece string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], piece)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(piece)
		if (start == 0 || !nameByte(s[start-1])) && (end == len(s) || !nameByte(s[end]) || strings.HasSuffix(piece, "/")) {
			return true
		}
		i = start + 1
	}
}

// nameByte reports bytes that continue a path component's name.
func nameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.'
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestContainsPiece(t *testing.T) {
	for _, c := range []struct {
		s, piece string
		want     bool
	}{
		{"/_layers", "_layers", true},
		{"_layers", "_layers", true},
		{"x/_layers/y", "_layers", true},
		{"dedup_layers_total", "_layers", false},
		{"_layersx", "_layers", false},
		{"sweep cairn/tmp: %w", "cairn/tmp", true},
		{"/v2/a/blobs/uploads/", "blobs/sha256", false},
		{"/blobs/sha256/ab", "blobs/sha256", true},
		{"a/repositories/b", "repositories/", true},
		{"write cairn/replication/x: %w", "cairn/replication", true},
		{"myrepositories/b", "repositories/", false},
	} {
		if got := containsPiece(c.s, c.piece); got != c.want {
			t.Errorf("containsPiece(%q, %q) = %v", c.s, c.piece, got)
		}
	}
}
