package sluice_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// errorCodes returns the ErrorCode constants declared in the root package,
// by name, with their values and doc comments, read from the source so
// that a new constant is checked without being listed here.
func errorCodes(t *testing.T) map[string][2]string {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	codes := map[string][2]string{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				v := s.(*ast.ValueSpec)
				if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "ErrorCode" {
					continue
				}
				for i, n := range v.Names {
					lit, ok := v.Values[i].(*ast.BasicLit)
					if !ok {
						t.Fatalf("%s: not a string literal", n.Name)
					}
					val, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					codes[n.Name] = [2]string{val, v.Doc.Text()}
				}
			}
		}
	}
	return codes
}

// TestErrorCodesDocumented: every ErrorCode constant has a doc comment and
// is listed in docs/contract.md, by value and by name, in a table row of
// its own; and no two constants share a value.
func TestErrorCodesDocumented(t *testing.T) {
	codes := errorCodes(t)
	if len(codes) < 11 {
		t.Fatalf("found %d ErrorCode constants; the parse of the root package missed some", len(codes))
	}
	b, err := os.ReadFile(filepath.Join("docs", "contract.md"))
	if err != nil {
		t.Fatal(err)
	}
	contract := string(b)
	seen := map[string]string{}
	for name, c := range codes {
		val, doc := c[0], c[1]
		if other, ok := seen[val]; ok {
			t.Errorf("%s and %s are both %q", name, other, val)
		}
		seen[val] = name
		if !strings.HasPrefix(doc, name+" ") && !strings.HasPrefix(doc, name+":") {
			t.Errorf("%s has no doc comment starting with its name", name)
		}
		row := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(val) + "` \\| `" + name + "` \\| .+ \\|$")
		if !row.MatchString(contract) {
			t.Errorf("docs/contract.md has no table row for `%s` (%s)", val, name)
		}
	}
}

// TestCommentsCiteTheRepository: code and scripts cite documents in the
// repository (docs/...), never the design notes that are not in it, and
// every docs/ file they cite exists.
func TestCommentsCiteTheRepository(t *testing.T) {
	outside := regexp.MustCompile(`\b(DESIGN|PROVIDERS)\.md\b`)
	cited := regexp.MustCompile(`docs/[A-Za-z0-9_/.-]+\.md`)
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || path == "docs_test.go" {
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".sql", ".sh", ".md":
		default:
			if filepath.Base(path) != "Makefile" {
				return nil
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if m := outside.Find(b); m != nil && !strings.HasPrefix(path, "docs") {
			t.Errorf("%s cites %s, which is not in the repository: cite docs/ instead", path, m)
		}
		for _, m := range cited.FindAll(b, -1) {
			p := strings.TrimSuffix(string(m), ".")
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s cites %s: %v", path, p, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestExitCodesDocumented: docs/contract.md's exit code table names every
// cause the code gives its code: the spend cap (3) and a locked job (1)
// among them.
func TestExitCodesDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("docs", "contract.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\| ([0-4]) \| (.+) \|$`).FindAllStringSubmatch(string(b), -1) {
		rows[m[1]] = m[2]
	}
	for code, wants := range map[string][]string{
		"1": {"bad credentials", "`--http-max-wait`", "being driven by another sluice process", "SLUICE_DB_BUSY_TIMEOUT"},
		"2": {"unreadable input", "`--max-cost` that cannot be kept", "a bad line"},
		"3": {"`--deadline`", "`--once`", "a signal", "`--max-cost`"},
		"4": {"failed for good"},
	} {
		for _, w := range wants {
			if !strings.Contains(rows[code], w) {
				t.Errorf("docs/contract.md: exit code %s's row does not name %q: %q", code, w, rows[code])
			}
		}
	}
}
