package splitter_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/gen/corpus"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/splitter"
)

func genInput(t testing.TB, size int64, o corpus.Options) []byte {
	t.Helper()
	o.Size = size
	var b bytes.Buffer
	if _, err := corpus.New(o).WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func gz(t testing.TB, b []byte) []byte {
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	w.Write(b)
	w.Close()
	return out.Bytes()
}

func zst(t testing.TB, b []byte) []byte {
	var out bytes.Buffer
	w, _ := zstd.NewWriter(&out)
	w.Write(b)
	w.Close()
	return out.Bytes()
}

// TestLimitsPerProvider checks every invariant of plans cut under tight
// limits, for each wire format.
func TestLimitsPerProvider(t *testing.T) {
	t.Parallel()
	openai := genInput(t, 600_000, corpus.Options{Seed: 7, Models: 4})
	anth := genInput(t, 400_000, corpus.Options{Seed: 8, Models: 3, Format: "anthropic"})
	cf := cloudflareInput(300)
	cases := []struct {
		prov  string
		input []byte
		lim   sluice.Limits
	}{
		{"openai", openai, sluice.Limits{MaxBatchBytes: 50_000, MaxBatchRequests: 40}},
		{"openai", openai, sluice.Limits{MaxBatchBytes: 9_000, MaxBatchRequests: 1000}},
		{"openai", openai, sluice.Limits{MaxBatchTokens: 8_000}},
		{"openai", openai, sluice.Limits{MaxBatchRequests: 1}},
		{"openai", openai, sluice.Limits{}}, // preset limits: one chunk per group
		{"anthropic", anth, sluice.Limits{MaxBatchBytes: 30_000, MaxBatchRequests: 25}},
		{"cloudflare", cf, sluice.Limits{MaxBatchBytes: 4_000}},
		{"cloudflare", cf, sluice.Limits{MaxBatchBytes: 20_000, MaxBatchTokens: 900}},
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("%d-%s", i, c.prov), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t) // a state directory of its own
			in := e.write(fmt.Sprintf("limits%d.jsonl", i), c.input)
			r := e.mustSplit(in, c.prov, c.lim, nil)
			checkPlan(t, r, validLines(t, r.cfg, c.input))
			bounds := map[string]int{}
			for _, ch := range r.chunks {
				bounds[ch.Bound]++
			}
			t.Logf("%d requests, %d chunks, bounds %v", r.res.Requests, len(r.chunks), bounds)
		})
	}
}

// cloudflareInput mixes /ai/run/{model} and /ai/run with body.model.
func cloudflareInput(n int) []byte {
	var b bytes.Buffer
	models := []string{"@cf/meta/llama-3.1-8b-instruct", "@cf/baai/bge-base-en-v1.5"}
	for i := range n {
		text := strings.Repeat("word ", 10+i%50) + "東京 🙂 caf\\u00e9"
		switch i % 3 {
		case 0:
			fmt.Fprintf(&b, `{"custom_id":"cf-%d","method":"POST","url":"/ai/run/%s","body":{"prompt":"%s"}}`+"\n", i, models[0], text)
		case 1:
			fmt.Fprintf(&b, `{"custom_id":"cf-%d","method":"POST","url":"/ai/run/%s","body":{"text":["%s"]}}`+"\n", i, models[1], text)
		default:
			fmt.Fprintf(&b, `{"custom_id":"cf-%d","method":"POST","url":"/ai/run","body":{"model":"%s","prompt":"%s"}}`+"\n", i, models[0], text)
		}
	}
	return b.Bytes()
}

// TestCompressedSamePlan: gzip and zstd inputs give the plan of the plain
// file, byte for byte.
func TestCompressedSamePlan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plain := genInput(t, 3_000_000, corpus.Options{Seed: 3})
	lim := sluice.Limits{MaxBatchBytes: 300_000}
	var plans []string
	for _, f := range []struct {
		name string
		b    []byte
	}{{"in.jsonl", plain}, {"in.jsonl.gz", gz(t, plain)}, {"in.jsonl.zst", zst(t, plain)}} {
		r := e.mustSplit(e.write(f.name, f.b), "openai", lim, nil)
		checkPlan(t, r, validLines(t, r.cfg, plain))
		var sb strings.Builder
		for _, c := range r.chunks {
			b, _ := os.ReadFile(filepath.Join(r.cfg.Dir, c.Path))
			fmt.Fprintf(&sb, "%d %s %s %d %d %d %s %x\n", c.ID, c.URL, c.Model, c.Requests, c.Bytes, c.EstTokens, c.Bound, b[:64])
		}
		for _, q := range r.requests {
			fmt.Fprintf(&sb, "%+v\n", q)
		}
		plans = append(plans, sb.String())
		if r.res.Fingerprint.Size != int64(len(f.b)) || !strings.HasPrefix(r.res.Fingerprint.Hash, "xxh3-128:") {
			t.Errorf("%s: fingerprint %+v", f.name, r.res.Fingerprint)
		}
		fp, err := splitter.FingerprintFile(filepath.Join(e.dir, f.name))
		if err != nil || fp != r.res.Fingerprint {
			t.Errorf("%s: FingerprintFile %+v %v, Split %+v", f.name, fp, err, r.res.Fingerprint)
		}
	}
	if plans[0] != plans[1] || plans[0] != plans[2] {
		t.Error("compressed inputs give another plan than the plain file")
	}
}

// TestTruncatedStream: a cut gzip or zstd file is an error naming the file
// and the last line read, in both modes.
func TestTruncatedStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plain := genInput(t, 2_000_000, corpus.Options{Seed: 4})
	re := regexp.MustCompile(`^(.*): (gzip|zstd) stream is truncated or corrupt after line (\d+): `)
	for _, c := range []struct {
		name string
		b    []byte
	}{{"cut.jsonl.gz", gz(t, plain)}, {"cut.jsonl.zst", zst(t, plain)}} {
		for _, skip := range []bool{false, true} {
			in := e.write(c.name, c.b[:len(c.b)*2/3])
			r := e.split(in, "openai", sluice.Limits{}, func(cfg *splitter.Config) { cfg.SkipInvalid = skip })
			if r.err == nil {
				t.Fatalf("%s: no error", c.name)
			}
			m := re.FindStringSubmatch(r.err.Error())
			if m == nil || m[1] != in {
				t.Fatalf("%s: error %q", c.name, r.err)
			}
			var line int
			fmt.Sscan(m[3], &line)
			if total := bytes.Count(plain, []byte{'\n'}); line < 1 || line >= total {
				t.Errorf("%s: after line %d of %d", c.name, line, total)
			}
		}
	}
}

func TestEmptyInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []struct{ name, content string }{
		{"empty.jsonl", ""}, {"blank.jsonl", "\n \n\t\r\n"}, {"empty.jsonl.zst", ""},
	} {
		b := []byte(c.content)
		if strings.HasSuffix(c.name, ".zst") {
			b = zst(t, b)
		}
		in := e.write(c.name, b)
		for _, skip := range []bool{false, true} {
			r := e.split(in, "openai", sluice.Limits{}, func(cfg *splitter.Config) { cfg.SkipInvalid = skip })
			if !errors.Is(r.err, splitter.ErrNoRequests) || r.err.Error() != in+": no requests: the input is empty" {
				t.Errorf("%s: %v", c.name, r.err)
			}
		}
	}
	in := e.write("allbad.jsonl", []byte("{}\n[]\n"))
	r := e.split(in, "openai", sluice.Limits{}, func(cfg *splitter.Config) { cfg.SkipInvalid = true })
	want := fmt.Sprintf("%s: no requests: all 2 non-blank lines were rejected (see %s)", in, r.cfg.RejectsPath)
	if !errors.Is(r.err, splitter.ErrNoRequests) || r.err.Error() != want {
		t.Errorf("all bad: %v", r.err)
	}
}

// TestRowsStreamed: request rows go to the sink while their chunks are
// still open (chunk ids are given when a chunk opens, and chunks close in
// another order), and a duplicate is found whether the first row is still
// on its way to the sink, already recorded, or in a chunk that closed.
func TestRowsStreamed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	input := genInput(t, 800_000, corpus.Options{Seed: 5, Models: 3})
	r := e.mustSplit(e.write("stream.jsonl", input), "openai", sluice.Limits{MaxBatchRequests: 97}, nil)
	checkPlan(t, r, validLines(t, r.cfg, input))
	lines := bytes.Split(bytes.TrimSuffix(input, []byte{'\n'}), []byte{'\n'})
	if len(lines) < 300 {
		t.Fatalf("only %d lines", len(lines))
	}
	for _, k := range []int{len(lines) - 1, len(lines) - 2, len(lines) / 2, 0} {
		dup := append(append(bytes.Clone(input), lines[k]...), '\n')
		r = e.split(e.write(fmt.Sprintf("dup%d.jsonl", k), dup), "openai", sluice.Limits{MaxBatchRequests: 97}, nil)
		var le *splitter.LineError
		want := fmt.Sprintf("duplicate custom_id, first seen on line %d", k+1)
		if !errors.As(r.err, &le) || le.Reason != want || le.Line != int64(len(lines)+1) {
			t.Fatalf("dup of line %d: %v", k+1, r.err)
		}
	}
}

// TestManyGroups: more (url, model) groups than open file handles.
func TestManyGroups(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var b bytes.Buffer
	for i := range 2000 {
		fmt.Fprintf(&b, `{"custom_id":"g%d","method":"POST","url":"/v1/embeddings","body":{"model":"m%d","input":"text %d"}}`+"\n", i, i%97, i)
	}
	r := e.mustSplit(e.write("groups.jsonl", b.Bytes()), "openai", sluice.Limits{MaxBatchRequests: 7}, nil)
	checkPlan(t, r, validLines(t, r.cfg, b.Bytes()))
}

// TestJobModel: lines without body.model take the job's model, and the
// codec writes it into the item.
func TestJobModel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	content := []byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[]}}` + "\n" +
		`{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"model":"x","messages":[]}}` + "\n")
	r := e.mustSplit(e.write("jm.jsonl", content), "openai", sluice.Limits{}, func(c *splitter.Config) { c.Model = "job-model" })
	checkPlan(t, r, validLines(t, r.cfg, content))
	b, _ := os.ReadFile(filepath.Join(r.cfg.Dir, r.chunks[0].Path))
	if !bytes.Contains(b, []byte(`"model":"job-model"`)) || r.chunks[0].Model != "job-model" {
		t.Errorf("job model not written: %s", b)
	}
}

// TestLongLine: a line over the cap is rejected without being held whole,
// even when it is longer than a read block.
func TestLongLine(t *testing.T) {
	// Not parallel: the line cap it lowers is every split's.
	defer splitter.SetMaxLineForTest(1_500_000)()
	e := newEnv(t)
	good := `{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":"x"}}`
	for _, n := range []int{1_600_000, 3_000_000} {
		long := `{"custom_id":"big","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":"` + strings.Repeat("y", n) + `"}}`
		content := []byte(good + "\n" + long + "\n" + strings.Replace(good, `"a"`, `"c"`, 1) + "\n")
		in := e.write("long.jsonl", content)
		r := e.split(in, "openai", sluice.Limits{}, nil)
		if r.err == nil || r.err.Error() != in+":2: line is longer than 1500000 bytes" {
			t.Fatalf("%d: %v", n, r.err)
		}
		r = e.split(in, "openai", sluice.Limits{}, func(c *splitter.Config) { c.SkipInvalid = true })
		if r.err != nil || r.res.Requests != 2 || r.res.Rejected != 1 || r.res.Lines != 3 {
			t.Fatalf("%d: skip: %v %+v", n, r.err, r.res)
		}
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in := e.write("cancel.jsonl", genInput(t, 2_000_000, corpus.Options{Seed: 9}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	plan, err := e.db.BeginPlan(ctx, &sluice.Job{ID: "cancelled", Provider: "openai", Input: in, Dir: filepath.Join(e.dir, "c")})
	if err == nil {
		_, err = splitter.Split(ctx, splitter.Config{Input: in, Dir: filepath.Join(e.dir, "c"), Codec: openaiCodec()}, plan)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled split: %v", err)
	}
}

func TestProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	content := genInput(t, 1_000_000, corpus.Options{Seed: 10})
	in := e.write("prog.jsonl", content)
	var last splitter.Progress
	calls := 0
	r := e.mustSplit(in, "openai", sluice.Limits{}, func(c *splitter.Config) {
		c.Progress = func(p splitter.Progress) { last = p; calls++ }
	})
	if calls == 0 || last.BytesRead != int64(len(content)) || last.InputSize != int64(len(content)) ||
		last.Decompressed != int64(len(content)) || last.Lines != r.res.Lines {
		t.Errorf("progress %+v after %d calls; result %+v", last, calls, r.res)
	}
}

// BenchmarkSplitFile: the whole splitter with the real tracker as sink on
// a 64 MB generated input (scripts/bench-split.sh does 1 GB and more).
func BenchmarkSplitFile(b *testing.B) {
	e := newEnv(b)
	in := e.write("bench.jsonl", genInput(b, 64<<20, corpus.Options{Seed: 1}))
	st, _ := os.Stat(in)
	b.SetBytes(st.Size())
	for b.Loop() {
		r := e.mustSplit(in, "openai", sluice.Limits{}, nil)
		os.RemoveAll(r.cfg.Dir)
	}
}

// BenchmarkSplitNullSink: the splitter alone (no SQLite).
func BenchmarkSplitNullSink(b *testing.B) {
	e := newEnv(b)
	in := e.write("bench.jsonl", genInput(b, 64<<20, corpus.Options{Seed: 1}))
	st, _ := os.Stat(in)
	b.SetBytes(st.Size())
	for b.Loop() {
		dir := filepath.Join(e.dir, "nulljob")
		cfg := splitter.Config{Input: in, Dir: dir, Codec: openaiCodec(), Limits: sluice.Limits{MaxBatchBytes: 200_000_000, MaxBatchRequests: 50_000}}
		if _, err := splitter.Split(context.Background(), cfg, nullSink{}); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(dir)
	}
}

type nullSink struct{}

func (nullSink) AddRequest(*sluice.Request) error         { return nil }
func (nullSink) AddChunk(*sluice.Chunk) error             { return nil }
func (nullSink) FindCustomID(string) (int64, bool, error) { return 0, false, nil }

// batchSink records through AddRequests only.
type batchSink struct {
	nullSink
	reqs []sluice.Request
}

func (b *batchSink) AddRequest(*sluice.Request) error { panic("AddRequest on a BatchSink") }
func (b *batchSink) AddRequests(rs []sluice.Request) error {
	b.reqs = append(b.reqs, rs...)
	return nil
}

func TestBatchSink(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	content := genInput(t, 2_000_000, corpus.Options{Seed: 11})
	in := e.write("batch.jsonl", content)
	want := e.mustSplit(in, "openai", sluice.Limits{MaxBatchRequests: 700}, nil)
	var s batchSink
	cfg := want.cfg
	cfg.Dir = filepath.Join(e.dir, "batchjob")
	if _, err := splitter.Split(context.Background(), cfg, &s); err != nil {
		t.Fatal(err)
	}
	sort.Slice(s.reqs, func(i, j int) bool { return s.reqs[i].Ordinal < s.reqs[j].Ordinal })
	if fmt.Sprint(s.reqs) != fmt.Sprint(want.requests) {
		t.Error("AddRequests got other rows than AddRequest")
	}
}

// failingSink fails the first time it is given request rows.
type failingSink struct{ calls int }

func (s *failingSink) AddRequest(*sluice.Request) error   { return s.fail() }
func (s *failingSink) AddRequests([]sluice.Request) error { return s.fail() }
func (s *failingSink) AddChunk(*sluice.Chunk) error       { return nil }
func (s *failingSink) FindCustomID(string) (int64, bool, error) {
	return 0, false, nil
}
func (s *failingSink) fail() error { s.calls++; return errors.New("disk full") }

// TestSinkFailureStopsEarly: when the sink fails, the run stops within a
// few batches of rows instead of reading and writing the rest of the input.
func TestSinkFailureStopsEarly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var b bytes.Buffer
	for i := range 200_000 {
		fmt.Fprintf(&b, `{"custom_id":"r%d","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":"some text to embed, line %d"}}`+"\n", i, i)
	}
	in := e.write("fail.jsonl", b.Bytes())
	dir := filepath.Join(e.dir, "jobs", "fail")
	sink := &failingSink{}
	_, err := splitter.Split(e.ctx, splitter.Config{Input: in, Dir: dir, Codec: provider.Presets["openai"].Codec()}, sink)
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Split with a failing sink: %v", err)
	}
	if sink.calls != 1 {
		t.Errorf("the sink was called %d times after it failed", sink.calls-1)
	}
	// The one open chunk's file shows how far the writer got.
	files, _ := filepath.Glob(filepath.Join(dir, "chunks", "*"))
	var written int64
	for _, f := range files {
		st, _ := os.Stat(f)
		written += st.Size()
	}
	if written > int64(b.Len())/10 {
		t.Errorf("wrote %d of %d bytes of chunks after the sink failed", written, b.Len())
	}
}
