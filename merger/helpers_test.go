package merger

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/sluice-batch/sluice/internal/wire"
)

// tRec is one results record of a test.
type tRec struct {
	ord    int64
	failed bool
	line   string
}

func reqID(ord int64) string { return fmt.Sprintf("req-%d", ord) }

// synth makes n records: ordinal i has custom_id req-i; every 7th failed.
func synth(n int64, pad int) []tRec {
	recs := make([]tRec, n)
	for i := range n {
		failed := i%7 == 3
		var line string
		if failed {
			line = fmt.Sprintf(`{"custom_id":"req-%d","response":null,"error":{"code":"batch_expired","message":"expired %s"}}`, i, strings.Repeat("x", int(i)%5))
		} else {
			line = fmt.Sprintf(`{"custom_id":"req-%d","response":{"status_code":200,"body":{"n":%d,"text":"%s"}},"error":null}`, i, i, strings.Repeat("y", pad+int(i)%13))
		}
		recs[i] = tRec{i, failed, line}
	}
	return recs
}

// writeFiles spreads recs over nfiles shuffled files in dir and returns
// their paths.
func writeFiles(t testing.TB, dir string, recs []tRec, nfiles int, seed uint64) []string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	parts := make([][]tRec, nfiles)
	for _, r := range recs {
		i := rng.IntN(nfiles)
		parts[i] = append(parts[i], r)
	}
	var names []string
	for i, p := range parts {
		rng.Shuffle(len(p), func(a, b int) { p[a], p[b] = p[b], p[a] })
		names = append(names, writeFile(t, filepath.Join(dir, fmt.Sprintf("part-%02d.results", i)), p))
	}
	return names
}

func writeFile(t testing.TB, name string, recs []tRec) string {
	t.Helper()
	var b []byte
	for _, r := range recs {
		b = wire.AppendResultRecord(b, r.ord, r.failed, []byte(r.line))
	}
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return name
}

// wantOutput is the output and errors file content for recs in order.
func wantOutput(recs []tRec) (out, errs string) {
	sorted := slices.Clone(recs)
	slices.SortStableFunc(sorted, func(a, b tRec) int { return int(a.ord - b.ord) })
	var o, e strings.Builder
	for _, r := range sorted {
		o.WriteString(r.line + "\n")
		if r.failed {
			e.WriteString(r.line + "\n")
		}
	}
	return o.String(), e.String()
}

func expectIDs(ids []string) func(func(int64, string) bool) error {
	return func(yield func(int64, string) bool) error {
		for i, id := range ids {
			if !yield(int64(i), id) {
				return nil
			}
		}
		return nil
	}
}

func expectN(n int64) func(func(int64, string) bool) error {
	return func(yield func(int64, string) bool) error {
		for i := range n {
			if !yield(i, reqID(i)) {
				return nil
			}
		}
		return nil
	}
}

func mustMerge(t testing.TB, cfg Config) *Summary {
	t.Helper()
	sum, err := Merge(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Merge: %v", err)
	}
	return sum
}

// readOut reads a possibly compressed file whole.
func readOut(t testing.TB, name string) string {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = bufio.NewReader(f)
	switch compression(name) {
	case "gz":
		zr, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	case "zst":
		zr, err := zstd.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		r = zr
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return string(b)
}

func sortedLines(s string) []string {
	l := strings.SplitAfter(s, "\n")
	slices.Sort(l)
	return l
}

// leftovers lists names in dir that a finished merge must not leave:
// temp files and run directories.
func leftovers(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") || strings.HasPrefix(e.Name(), ".sluice-merge-") {
			bad = append(bad, e.Name())
		}
	}
	return bad
}

func assertNoFile(t testing.TB, name string) {
	t.Helper()
	if _, err := os.Stat(name); !os.IsNotExist(err) {
		t.Fatalf("%s exists (err %v), want no file", name, err)
	}
}

func diffFirst(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return fmt.Sprintf("line %d:\n got  %q\n want %q", i+1, al[i], bl[i])
		}
	}
	return fmt.Sprintf("%d lines, want %d", len(al), len(bl))
}

func checkEqual(t testing.TB, what, got, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s differs: %s", what, diffFirst(got, want))
	}
}
