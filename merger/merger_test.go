package merger

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice/internal/check"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/want*.jsonl")

// Results of several attempts: attempt 1's files lack the requests that were
// retried, whose final records are in attempt 2's files.
func TestMergeAttemptsInputOrder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	recs := synth(3000, 40)
	var a1, a2 []tRec
	for _, r := range recs {
		if r.ord%10 == 4 { // failed in attempt 1 (not in its files), final in attempt 2
			a2 = append(a2, r)
		} else {
			a1 = append(a1, r)
		}
	}
	files := writeFiles(t, filepath.Join(dir, "a1"), a1, 4, 1)
	files = append(files, writeFiles(t, filepath.Join(dir, "a2"), a2, 2, 2)...)
	out := filepath.Join(dir, "out.jsonl")
	sum := mustMerge(t, Config{Output: out, Files: files, Total: 3000, Expected: expectN(3000)})
	wantOut, wantErrs := wantOutput(recs)
	checkEqual(t, "output", readOut(t, out), wantOut)
	checkEqual(t, "errors", readOut(t, filepath.Join(dir, "out.errors.jsonl")), wantErrs)
	nf := int64(strings.Count(wantErrs, "\n"))
	want := Summary{Lines: 3000, Succeeded: 3000 - nf, Failed: nf, OutputBytes: int64(len(wantOut)),
		Output: out, Errors: filepath.Join(dir, "out.errors.jsonl")}
	if *sum != want {
		t.Fatalf("summary %+v, want %+v", *sum, want)
	}
	if l := leftovers(t, dir); l != nil {
		t.Fatalf("left behind: %v", l)
	}
}

// goldenRun merges the golden results files with cfg's other fields.
func goldenRun(t *testing.T, cfg Config) (out, errs string) {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob("testdata/golden/*.results")
	if err != nil || len(files) != 6 {
		t.Fatalf("golden results files: %v %v", files, err)
	}
	req, err := os.ReadFile("testdata/golden/requests.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range strings.Split(strings.TrimSpace(string(req)), "\n") {
		ids = append(ids, gjson.Get(l, "custom_id").Str)
	}
	if cfg.Output == "" {
		cfg.Output = "out.jsonl"
	}
	cfg.Output = filepath.Join(dir, cfg.Output)
	cfg.Files, cfg.Total, cfg.Expected = files, int64(len(ids)), expectIDs(ids)
	sum := mustMerge(t, cfg)
	if sum.Lines != cfg.Total || sum.Failed != 3 {
		t.Fatalf("summary %+v", sum)
	}
	return readOut(t, sum.Output), readOut(t, sum.Errors)
}

// OpenAI, Anthropic and Cloudflare answers in their canonical output shape,
// from attempts 1 and 2, merge byte for byte into the golden files, however
// they are merged.
func TestGoldenProviderShapes(t *testing.T) {
	t.Parallel()
	out, errs := goldenRun(t, Config{})
	if *update {
		os.WriteFile("testdata/golden/want.jsonl", []byte(out), 0o644)
		os.WriteFile("testdata/golden/want.errors.jsonl", []byte(errs), 0o644)
	}
	wantOut, err := os.ReadFile("testdata/golden/want.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	wantErrs, err := os.ReadFile("testdata/golden/want.errors.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "output", out, string(wantOut))
	checkEqual(t, "errors", errs, string(wantErrs))
	for _, cfg := range []Config{
		{MaxOpen: 2},
		{Output: "out.jsonl.gz"},
		{Output: "out.jsonl.zst", MaxOpen: 3},
	} {
		o, e := goldenRun(t, cfg)
		checkEqual(t, fmt.Sprintf("output of %+v", cfg), o, string(wantOut))
		checkEqual(t, fmt.Sprintf("errors of %+v", cfg), e, string(wantErrs))
	}
	o, e := goldenRun(t, Config{Order: "any"})
	checkEqual(t, "output, order any, sorted", strings.Join(sortedLines(o), ""), strings.Join(sortedLines(string(wantOut)), ""))
	checkEqual(t, "errors, order any, sorted", strings.Join(sortedLines(e), ""), strings.Join(sortedLines(string(wantErrs)), ""))
}

// violate merges recs (spread over 3 files) expecting n requests and returns
// the invariant error.
func violate(t *testing.T, order string, recs []tRec, n int64) (*InvariantError, string) {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	files := writeFiles(t, filepath.Join(dir, "in"), recs, 3, 5)
	_, err := Merge(context.Background(), Config{Output: out, Order: order, Files: files, Total: n, Expected: expectN(n)})
	var inv *InvariantError
	if !errors.As(err, &inv) {
		t.Fatalf("order %s: err %v, want *InvariantError", order, err)
	}
	assertNoFile(t, out)
	assertNoFile(t, filepath.Join(dir, "out.errors.jsonl"))
	if l := leftovers(t, dir); l != nil {
		t.Fatalf("left behind: %v", l)
	}
	return inv, err.Error()
}

func TestMissingResult(t *testing.T) {
	t.Parallel()
	recs := synth(500, 10)
	recs = slices.Concat(recs[:123], recs[124:])
	for _, order := range []string{"input", "any"} {
		inv, msg := violate(t, order, recs, 500)
		if inv.MissingCount != 1 || len(inv.Missing) != 1 || inv.Missing[0] != "req-123" || inv.DoubledCount+inv.UnknownCount != 0 {
			t.Fatalf("order %s: %+v", order, inv)
		}
		if !strings.Contains(msg, "req-123") {
			t.Fatalf("error %q does not name req-123", msg)
		}
	}
}

func TestDoubledResult(t *testing.T) {
	t.Parallel()
	recs := synth(500, 10)
	recs = append(recs, recs[77], recs[499]) // same request in another file too
	for _, order := range []string{"input", "any"} {
		inv, msg := violate(t, order, recs, 500)
		if inv.DoubledCount != 2 || inv.MissingCount+inv.UnknownCount != 0 || !strings.Contains(msg, "req-77") || !strings.Contains(msg, "req-499") {
			t.Fatalf("order %s: %+v", order, inv)
		}
	}
}

func TestUnknownAndWrongID(t *testing.T) {
	t.Parallel()
	recs := synth(300, 10)
	recs = append(recs, tRec{300, false, `{"custom_id":"stray","response":null,"error":null}`})
	recs[42].line = strings.Replace(recs[42].line, `"req-42"`, `"req-43"`, 1)
	for _, order := range []string{"input", "any"} {
		inv, msg := violate(t, order, recs, 300)
		if inv.MissingCount != 1 || inv.Missing[0] != "req-42" || inv.UnknownCount != 2 || inv.DoubledCount != 0 {
			t.Fatalf("order %s: %+v", order, inv)
		}
		if !strings.Contains(msg, "stray") || !strings.Contains(msg, "req-43") {
			t.Fatalf("error %q", msg)
		}
	}
}

func TestInvariantNamesCapped(t *testing.T) {
	t.Parallel()
	recs := synth(1000, 1)[:100] // 900 missing
	inv, _ := violate(t, "input", recs, 1000)
	if inv.MissingCount != 900 || len(inv.Missing) != maxNames || inv.Missing[0] != "req-100" {
		t.Fatalf("%d missing, names %v", inv.MissingCount, inv.Missing)
	}
}

// Without Expected, ordinals are still checked and named "#ordinal".
func TestNoExpected(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	recs := synth(200, 5)
	files := writeFiles(t, dir, slices.Concat(recs[:50], recs[51:]), 2, 9)
	for _, order := range []string{"input", "any"} {
		_, err := Merge(context.Background(), Config{Output: filepath.Join(dir, "o.jsonl"), Order: order, Files: files, Total: 200})
		var inv *InvariantError
		if !errors.As(err, &inv) || inv.MissingCount != 1 || inv.Missing[0] != "#50" {
			t.Fatalf("order %s: %v", order, err)
		}
	}
	files = writeFiles(t, dir, recs, 2, 9)
	mustMerge(t, Config{Output: filepath.Join(dir, "o.jsonl"), Files: files, Total: 200})
	wantOut, _ := wantOutput(recs)
	checkEqual(t, "output", readOut(t, filepath.Join(dir, "o.jsonl")), wantOut)
}

// An older complete output stays as it was when a merge fails.
func TestOlderOutputKeptOnViolation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	os.WriteFile(out, []byte("older\n"), 0o644)
	files := writeFiles(t, dir, synth(100, 5)[1:], 2, 3)
	if _, err := Merge(context.Background(), Config{Output: out, Files: files, Total: 100, Expected: expectN(100)}); err == nil {
		t.Fatal("no error")
	}
	if b, _ := os.ReadFile(out); string(b) != "older\n" {
		t.Fatalf("output is %q", b)
	}
}

func TestCompressedOutputs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	recs := synth(20000, 100)
	files := writeFiles(t, filepath.Join(dir, "in"), recs, 5, 4)
	wantOut, wantErrs := wantOutput(recs)
	for _, name := range []string{"out.jsonl", "out.jsonl.gz", "out.jsonl.zst"} {
		sum := mustMerge(t, Config{Output: filepath.Join(dir, name), Files: files, Total: 20000, Expected: expectN(20000)})
		st, err := os.Stat(sum.Output)
		if err != nil || st.Size() != sum.OutputBytes {
			t.Fatalf("%s: OutputBytes %d, file %v %v", name, sum.OutputBytes, st, err)
		}
		if name != "out.jsonl" && sum.OutputBytes*3 > int64(len(wantOut)) {
			t.Errorf("%s: %d bytes for %d: not compressed?", name, sum.OutputBytes, len(wantOut))
		}
		checkEqual(t, name, readOut(t, sum.Output), wantOut)
		checkEqual(t, sum.Errors, readOut(t, sum.Errors), wantErrs)
	}
}

func TestErrorsFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	recs := synth(700, 3)
	files := writeFiles(t, dir, recs, 3, 8)
	_, wantErrs := wantOutput(recs)
	errs := filepath.Join(dir, "sub", "failed.jsonl")
	os.Mkdir(filepath.Dir(errs), 0o755)
	sum := mustMerge(t, Config{Output: filepath.Join(dir, "o.jsonl"), ErrorsPath: errs, Files: files, Total: 700, Expected: expectN(700)})
	got := readOut(t, errs)
	checkEqual(t, "errors", got, wantErrs)
	if sum.Errors != errs || sum.Failed != 100 || int64(strings.Count(got, "\n")) != sum.Failed {
		t.Fatalf("summary %+v", sum)
	}
	for _, l := range strings.Split(strings.TrimSpace(got), "\n") {
		if !strings.Contains(l, `"code":"batch_expired"`) {
			t.Fatalf("errors file holds %s", l)
		}
	}
	// No failures: an empty errors file replaces an older one.
	ok := synth(5, 1)[:3]
	files = writeFiles(t, dir, ok, 1, 1)
	mustMerge(t, Config{Output: filepath.Join(dir, "o.jsonl"), ErrorsPath: errs, Files: files, Total: 3})
	if got := readOut(t, errs); got != "" {
		t.Fatalf("errors file %q, want empty", got)
	}
}

func TestErrorsName(t *testing.T) {
	t.Parallel()
	check.Table(t, "errorsName", errorsName, map[string]string{
		"out.jsonl":          "out.errors.jsonl",
		"d/out.jsonl.zst":    "d/out.errors.jsonl.zst",
		"out.jsonl.gz":       "out.errors.jsonl.gz",
		"out":                "out.errors",
		"d.x/res":            "d.x/res.errors",
		"a.b.c":              "a.b.errors.c",
		"results.zst":        "results.errors.zst",
		"/x/.hidden":         "/x/.hidden.errors",
		"/tmp/run.jsonl.zst": "/tmp/run.errors.jsonl.zst",
	})
}

// MaxOpen 2 with 7 files merges through intermediate runs, which are gone
// afterwards; a small index budget does the same by memory.
func TestIntermediateRuns(t *testing.T) {
	// Not parallel: it lowers indexBudget, which every merge reads.
	dir := t.TempDir()
	tmp := filepath.Join(dir, "tmp")
	os.Mkdir(tmp, 0o755)
	recs := synth(5000, 20)
	files := writeFiles(t, filepath.Join(dir, "in"), recs, 7, 6)
	wantOut, wantErrs := wantOutput(recs)
	for _, maxOpen := range []int{2, 3, 6, 7, 64} {
		sum := mustMerge(t, Config{Output: filepath.Join(dir, "out.jsonl"), Files: files, Total: 5000,
			Expected: expectN(5000), MaxOpen: maxOpen, TempDir: tmp})
		checkEqual(t, fmt.Sprint("output, MaxOpen ", maxOpen), readOut(t, sum.Output), wantOut)
		checkEqual(t, "errors", readOut(t, sum.Errors), wantErrs)
		if l := leftovers(t, tmp); l != nil {
			t.Fatalf("left in TempDir: %v", l)
		}
	}
	defer func(b int64) { indexBudget = b }(indexBudget)
	indexBudget = 1000 * entrySize
	sum := mustMerge(t, Config{Output: filepath.Join(dir, "out.jsonl"), Files: files, Total: 5000, Expected: expectN(5000), MaxOpen: 3})
	checkEqual(t, "output, small budget", readOut(t, sum.Output), wantOut)
	// A violation found through runs.
	files = append(files, writeFile(t, filepath.Join(dir, "in", "dup.results"), recs[10:11]))
	_, err := Merge(context.Background(), Config{Output: filepath.Join(dir, "out2.jsonl"), Files: files, Total: 5000, Expected: expectN(5000), MaxOpen: 2})
	if e, ok := err.(*InvariantError); !ok || e.DoubledCount != 1 || e.Doubled[0] != "req-10" {
		t.Fatalf("got %v", err)
	}
	if l := leftovers(t, dir); l != nil {
		t.Fatalf("left behind: %v", l)
	}
}

// Records served with ReadAt (files not kept in memory), including records
// that lie back to back and records longer than the read buffers.
func TestReadAtPathAndLongRecords(t *testing.T) {
	// Not parallel: it lowers keepMax and keepBudget, which every merge reads.
	dir := t.TempDir()
	recs := synth(3000, 30)
	big := fmt.Sprintf(`{"custom_id":"req-5","response":{"status_code":200,"body":{"text":"%s"}},"error":null}`, strings.Repeat("z", 3<<20))
	recs[5].line = big
	files := writeFiles(t, filepath.Join(dir, "in"), recs[:2000], 3, 11)
	files = append(files, writeFile(t, filepath.Join(dir, "in", "sorted.results"), recs[2000:])) // in order: coalesced reads
	wantOut, wantErrs := wantOutput(recs)
	for _, keep := range []int64{0, 4 << 20, 64 << 20} {
		func() {
			defer func(a, b int64) { keepMax, keepBudget = a, b }(keepMax, keepBudget)
			keepMax, keepBudget = keep, keep
			for _, order := range []string{"input", "any"} {
				sum := mustMerge(t, Config{Output: filepath.Join(dir, "out.jsonl"), Order: order, Files: files, Total: 3000, Expected: expectN(3000)})
				got, gotErrs := readOut(t, sum.Output), readOut(t, sum.Errors)
				if order == "any" {
					got, wantOut := strings.Join(sortedLines(got), ""), strings.Join(sortedLines(wantOut), "")
					checkEqual(t, "output, any", got, wantOut)
					continue
				}
				checkEqual(t, fmt.Sprint("output, keep ", keep), got, wantOut)
				checkEqual(t, "errors", gotErrs, wantErrs)
			}
		}()
	}
}

func TestOrderAny(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	recs := synth(4000, 10)
	files := writeFiles(t, dir, recs, 5, 12)
	sum := mustMerge(t, Config{Output: filepath.Join(dir, "o.jsonl"), Order: "any", Files: files, Total: 4000, Expected: expectN(4000)})
	wantOut, wantErrs := wantOutput(recs)
	got := readOut(t, sum.Output)
	if got == wantOut {
		t.Fatal("order any gave input order from shuffled files")
	}
	checkEqual(t, "sorted lines", strings.Join(sortedLines(got), ""), strings.Join(sortedLines(wantOut), ""))
	checkEqual(t, "sorted errors", strings.Join(sortedLines(readOut(t, sum.Errors)), ""), strings.Join(sortedLines(wantErrs), ""))
	if sum.Lines != 4000 {
		t.Fatalf("summary %+v", sum)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "o.jsonl")
	good := writeFile(t, filepath.Join(dir, "good.results"), synth(3, 1))
	bad := filepath.Join(dir, "bad.results")
	os.WriteFile(bad, []byte("3\ts\t{\"custom_id\":\"req-3\"}\n4\tx\t{}\n"), 0o644)
	for _, order := range []string{"input", "any"} {
		_, err := Merge(context.Background(), Config{Output: out, Order: order, Files: []string{good, bad}, Total: 5})
		if !errors.Is(err, errBadRecord) || !strings.Contains(err.Error(), "bad.results at byte 26") {
			t.Fatalf("order %s: err %v", order, err)
		}
		assertNoFile(t, out)
	}
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{Output: out, Files: []string{good}, Total: 3, Expected: expectN(2)}, "Expected yielded 2 requests, Total is 3"},
		{Config{Output: out, Files: []string{good}, Total: 2, Expected: expectN(3)}, "Expected yielded ordinal 2"},
		{Config{Output: out, Files: []string{good}, Total: 3, Order: "random"}, "unknown order"},
		{Config{Output: out, ErrorsPath: out, Files: []string{good}, Total: 3}, "errors path is the output path"},
		{Config{Output: out, Files: []string{filepath.Join(dir, "nope")}, Total: 3}, "no such file"},
		{Config{Output: filepath.Join(dir, "nodir", "o.jsonl"), Files: []string{good}, Total: 3}, "no such file"},
		{Config{Output: out, ErrorsPath: filepath.Join(dir, "nodir", "e.jsonl"), Files: []string{good}, Total: 3}, "no such file"},
		{Config{Output: out, Files: []string{good}, Total: 3, Expected: func(func(int64, string) bool) error { return errors.New("db gone") }}, "db gone"},
	}
	for _, c := range cases {
		if _, err := Merge(context.Background(), c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c.cfg, err, c.want)
		}
		assertNoFile(t, out)
	}
	if l := leftovers(t, dir); l != nil {
		t.Fatalf("left behind: %v", l)
	}
}

func TestEmptyJobAndCancel(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sum := mustMerge(t, Config{Output: filepath.Join(dir, "o.jsonl")})
	if sum.Lines != 0 || readOut(t, sum.Output) != "" {
		t.Fatalf("%+v", sum)
	}
	files := writeFiles(t, dir, synth(20000, 10), 2, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, order := range []string{"input", "any"} {
		out := filepath.Join(dir, order+".jsonl")
		if _, err := Merge(ctx, Config{Output: out, Order: order, Files: files, Total: 20000}); !errors.Is(err, context.Canceled) {
			t.Fatalf("order %s: err %v", order, err)
		}
		assertNoFile(t, out)
	}
}

func TestStaleTempsRemoved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stale := []string{".o.jsonl.123.tmp", ".o.errors.jsonl.9.tmp", runDirPrefix(filepath.Join(dir, "o.jsonl")) + "77"}
	keep := []string{".o.jsonl.x1.tmp", ".other.jsonl.5.tmp", ".sluice-merge-000000000000-1"}
	for _, n := range append(stale, keep...) {
		if strings.Contains(n, "sluice-merge") {
			os.Mkdir(filepath.Join(dir, n), 0o755)
		} else {
			os.WriteFile(filepath.Join(dir, n), nil, 0o644)
		}
	}
	files := writeFiles(t, filepath.Join(dir, "in"), synth(10, 1), 1, 1)
	mustMerge(t, Config{Output: filepath.Join(dir, "o.jsonl"), Files: files, Total: 10})
	for _, n := range stale {
		assertNoFile(t, filepath.Join(dir, n))
	}
	for _, n := range keep {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Errorf("removed %s: %v", n, err)
		}
	}
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n++; w.n > 2 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

// A write error of the writing goroutine comes back from a later line or
// from close, and nothing blocks.
func TestAsyncWriterError(t *testing.T) {
	t.Parallel()
	a := newAsyncWriter(&failWriter{}, 64, 2)
	line := []byte(strings.Repeat("x", 40))
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		err = a.writeLine(line)
	}
	if e := a.close(); err == nil {
		err = e
	}
	if err == nil || err.Error() != "disk full" {
		t.Fatalf("err %v", err)
	}
	if e := a.close(); e == nil {
		t.Fatal("second close lost the error")
	}
}

// Shuffled files with dense ordinals are read in windows: one window for
// the whole file, several windows (a pass each, copied out of a small
// scratch buffer, records longer than it read alone), and windows refused
// by a full pool (one ReadAt per record). All give the same output as the
// sorted-index path.
func TestWindowedReads(t *testing.T) {
	// Not parallel: it lowers the window sizes, which every merge reads.
	dir := t.TempDir()
	recs := synth(3000, 30)
	recs[17].line = fmt.Sprintf(`{"custom_id":"req-17","response":{"status_code":200,"body":{"text":"%s"}},"error":null}`, strings.Repeat("z", 5000))
	files := writeFiles(t, filepath.Join(dir, "in"), recs, 3, 21)
	wantOut, wantErrs := wantOutput(recs)
	defer func(a, b, c int64, d, e int64, f int) {
		windowMax, windowPoolSize, maxPasses, keepMax, keepBudget, windowScratch = a, b, c, d, e, f
	}(windowMax, windowPoolSize, maxPasses, keepMax, keepBudget, windowScratch)
	keepMax, keepBudget = 0, 0
	for _, c := range []struct {
		name                 string
		window, pool, passes int64
		scratch              int
		windowed             bool
	}{
		{"one window", 1 << 20, 4 << 20, 8, 1 << 20, true},
		{"many windows", 16 << 10, 4 << 20, 1 << 20, 1 << 10, true},
		{"pool too small", 16 << 10, 8 << 10, 1 << 20, 1 << 10, true},
		{"pool for one file", 64 << 10, 64 << 10, 1 << 20, 1 << 10, true},
		{"pool for part of a file", 64 << 10, 20 << 10, 4, 1 << 10, true},
		{"too many passes", 16 << 10, 4 << 20, 2, 1 << 10, false},
	} {
		windowMax, windowPoolSize, maxPasses, windowScratch = c.window, c.pool, c.passes, c.scratch
		fs, err := indexFile(files[0], false, bufio.NewReader(nil), newWindowPool())
		if err != nil {
			t.Fatal(err)
		}
		if got := fs.slots != nil; got != c.windowed {
			t.Fatalf("%s: windowed %v, want %v", c.name, got, c.windowed)
		}
		fs.close()
		sum := mustMerge(t, Config{Output: filepath.Join(dir, "out.jsonl"), Files: files, Total: 3000, Expected: expectN(3000)})
		checkEqual(t, c.name+": output", readOut(t, sum.Output), wantOut)
		checkEqual(t, c.name+": errors", readOut(t, sum.Errors), wantErrs)
	}
}
