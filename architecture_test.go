package sluice_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// archTable reads the table of docs/architecture.md, "Packages and who owns
// what": each package (relative to the module; "sluice" is the root) to the
// packages of the module it imports, nil for "everything" (not checked).
func archTable(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "## Packages and who owns what")
	if start < 0 {
		t.Fatal(`docs/architecture.md has no "## Packages and who owns what"`)
	}
	section := doc[start+3:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	ticked := regexp.MustCompile("`([^`]+)`")
	table := map[string][]string{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 3 {
			t.Fatalf("docs/architecture.md: row %q: want 3 cells", line)
		}
		imports := []string{}
		switch last := cells[2]; last {
		case "everything":
			imports = nil
		case "nothing":
		default:
			for _, m := range ticked.FindAllStringSubmatch(last, -1) {
				imports = append(imports, m[1])
			}
			if len(imports) == 0 {
				t.Fatalf("docs/architecture.md: row %q: imports are `pkg`, ..., nothing or everything", line)
			}
		}
		for _, m := range ticked.FindAllStringSubmatch(cells[0], -1) {
			if _, dup := table[m[1]]; dup {
				t.Errorf("docs/architecture.md: %s has two rows", m[1])
			}
			table[m[1]] = imports
		}
	}
	return table
}

// modulePackages lists the packages of this module (not of a module
// nested below it) with the packages of the module each imports (test
// files aside), named as archTable names them.
func modulePackages(t *testing.T) map[string][]string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go list needs the go command: %v", err)
	}
	mod, err := exec.Command(gobin, "list", "-m").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	module := strings.TrimSpace(string(mod))
	out, err := exec.Command(gobin, "list", "-f", "{{.ImportPath}}\t{{with .Module}}{{.Path}}{{end}}\t{{join .Imports \" \"}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	name := func(path string) (string, bool) {
		switch {
		case path == module:
			return "sluice", true
		case strings.HasPrefix(path, module+"/"):
			return strings.TrimPrefix(path, module+"/"), true
		}
		return "", false
	}
	pkgs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 || f[1] != module {
			continue // a package of a nested module
		}
		pkg, _ := name(f[0])
		imports := []string{}
		for _, imp := range strings.Fields(f[2]) {
			if n, ok := name(imp); ok {
				imports = append(imports, n)
			}
		}
		pkgs[pkg] = imports
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages: %s", len(pkgs), out)
	}
	return pkgs
}

// TestArchitectureTable: docs/architecture.md's table of packages is the
// code's: every package has a row, every row a package, and each row lists
// exactly the packages of the module its package imports.
func TestArchitectureTable(t *testing.T) {
	table, pkgs := archTable(t), modulePackages(t)
	for pkg, imports := range pkgs {
		want, ok := table[pkg]
		switch {
		case !ok:
			t.Errorf("docs/architecture.md has no row for package %s (it imports %s)", pkg, listed(imports))
		case want == nil: // everything
		default:
			slices.Sort(want)
			slices.Sort(imports)
			if !slices.Equal(want, imports) {
				t.Errorf("docs/architecture.md: %s imports %s, the table says %s", pkg, listed(imports), listed(want))
			}
		}
	}
	for pkg := range table {
		if _, ok := pkgs[pkg]; !ok {
			t.Errorf("docs/architecture.md has a row for %s, which is no package of the module", pkg)
		}
	}
}

func listed(pkgs []string) string {
	if len(pkgs) == 0 {
		return "nothing"
	}
	return "`" + strings.Join(pkgs, "`, `") + "`"
}
