package openai_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-batch/sluice/internal/cputime"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/internal/gen/corpus"
	"github.com/sluice-batch/sluice/internal/wire"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
	"github.com/sluice-batch/sluice/provider/openai"
)

// benchResults is one batch's results as the emulator answers them: the
// output file (and error file, if any) of a batch of benchLines realistic
// chat requests (internal/gen/corpus), fetched once per test binary.
var benchResults struct {
	once  sync.Once
	dir   string
	files []string
	bytes int64
	err   error
}

const benchLines = 50000

func TestMain(m *testing.M) {
	code := m.Run()
	if benchResults.dir != "" {
		os.RemoveAll(benchResults.dir)
	}
	os.Exit(code)
}

func resultFiles(b *testing.B) ([]string, int64) {
	b.Helper()
	r := &benchResults
	r.once.Do(func() { r.dir, r.files, r.bytes, r.err = fetchBenchResults() })
	if r.err != nil {
		b.Fatal(r.err)
	}
	return r.files, r.bytes
}

func fetchBenchResults() (dir string, files []string, size int64, err error) {
	dir, err = os.MkdirTemp("", "sluice-decode-bench-")
	if err != nil {
		return "", nil, 0, err
	}
	// Chat lines of one model (embeddings go to batches of their own);
	// 1% of the lines come back as errors, as in scripts/bench-e2e.sh.
	var in bytes.Buffer
	g := corpus.New(corpus.Options{Seed: 7, Models: 1, MaxLine: 2860})
	n := 0
	for n < benchLines {
		l := g.Next()
		if bytes.Contains(l, []byte(`"/v1/embeddings"`)) {
			continue
		}
		in.Write(l)
		n++
	}
	path := filepath.Join(dir, "chunk.jsonl")
	if err := os.WriteFile(path, in.Bytes(), 0o600); err != nil {
		return dir, nil, 0, err
	}
	s, err := emulator.New(emulator.Options{APIKey: testKey, Seed: 7, LineErrorRate: 0.01})
	if err != nil {
		return dir, nil, 0, err
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	p, err := provider.Lookup("openai")
	if err != nil {
		return dir, nil, 0, err
	}
	c, err := openai.New(openai.Config{Config: provider.Config{Preset: p, BaseURL: srv.URL + "/v1", APIKey: testKey, RateLimit: httpx.RateLimit{PerSecond: -1}}})
	if err != nil {
		return dir, nil, 0, err
	}
	ctx := context.Background()
	ref := sluice.BatchRef{Job: "bench", Chunk: 1, Attempt: 1, URL: "/v1/chat/completions", Model: "gpt-4o-mini",
		Path: path, Requests: n, Bytes: int64(in.Len()), IntentAt: time.Now()}
	fileID, err := c.Upload(ctx, ref)
	if err != nil {
		return dir, nil, 0, err
	}
	bt, err := c.Create(ctx, ref, fileID)
	for err == nil && !bt.Status.Ended() {
		bt, err = c.Poll(ctx, ref, bt.ID)
	}
	if err != nil {
		return dir, nil, 0, err
	}
	files, err = c.Fetch(ctx, ref, bt, dir)
	for _, f := range files {
		if st, serr := os.Stat(f); serr == nil {
			size += st.Size()
		}
	}
	return dir, files, size, err
}

// BenchmarkDecodeFile is the dispatcher's share of ending a batch of
// 50,000 requests (dispatcher/conclude.go): its result files decoded line
// by line (Client.Decode) and each result encoded as the record the
// results file gets (wire.AppendResultLine), written through a buffer.
func BenchmarkDecodeFile(b *testing.B) {
	files, size := resultFiles(b)
	p, err := provider.Lookup("openai")
	if err != nil {
		b.Fatal(err)
	}
	c, err := openai.New(openai.Config{Config: provider.Config{Preset: p, APIKey: testKey}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	benchEnd(b, size, func(fn func(sluice.Result) error) error {
		return c.Decode(ctx, sluice.BatchRef{}, files, nil, fn)
	})
}

// benchBatch serves the benchmark batch's result files (resultFiles) from
// memory over loopback, as an ended batch of the OpenAI API.
func benchBatch(b *testing.B) (*openai.Client, sluice.Batch, int64) {
	b.Helper()
	files, size := resultFiles(b)
	served := map[string]string{}
	bt := sluice.Batch{ID: "batch_bench", Status: sluice.BatchCompleted}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		id := "file-out"
		if strings.HasSuffix(f, ".errors.jsonl") {
			id = "file-err"
			bt.ErrorFileID = id
		} else {
			bt.OutputFileID = id
		}
		served[id] = string(data)
	}
	srv := httptest.NewServer(&resultServer{files: served, gets: map[string]int{}})
	b.Cleanup(srv.Close)
	p, err := provider.Lookup("openai")
	if err != nil {
		b.Fatal(err)
	}
	c, err := openai.New(openai.Config{Config: provider.Config{Preset: p, BaseURL: srv.URL + "/v1", APIKey: testKey, RateLimit: httpx.RateLimit{PerSecond: -1}}})
	if err != nil {
		b.Fatal(err)
	}
	return c, bt, size
}

// benchEnd is the dispatcher's share of ending the benchmark batch
// (dispatcher/poll.go, ended): its results read by read, each encoded as
// the record the results file gets, written through a buffer. It reports
// the process's CPU time per batch (cpu-ns/op), the server's share
// included (the same whatever the client does).
func benchEnd(b *testing.B, size int64, read func(fn func(sluice.Result) error) error) {
	w := bufio.NewWriterSize(io.Discard, 1<<20)
	var buf []byte
	b.SetBytes(size)
	b.ReportAllocs()
	cpu := cputime.Process()
	for b.Loop() {
		n := 0
		err := read(func(r sluice.Result) error {
			var err error
			if buf, err = wire.AppendResultLine(buf[:0], int64(n), r.Kind != sluice.ResultSucceeded, &r.Line); err != nil {
				return err
			}
			n++
			_, err = w.Write(buf)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		if n != benchLines {
			b.Fatalf("%d results, want %d", n, benchLines)
		}
	}
	b.ReportMetric(float64(cputime.Process()-cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkEndFetchDecode ends a batch of 50,000 results as the
// dispatcher did before results were streamed, and still does for
// providers without sluice.ResultStreamer: Fetch downloads its files (temp
// file, fsync, rename), Decode reads them back.
func BenchmarkEndFetchDecode(b *testing.B) {
	c, bt, size := benchBatch(b)
	ctx := context.Background()
	dir := b.TempDir()
	benchEnd(b, size, func(fn func(sluice.Result) error) error {
		files, err := c.Fetch(ctx, sluice.BatchRef{}, bt, dir)
		if err != nil {
			return err
		}
		defer func() {
			for _, f := range files {
				os.Remove(f)
			}
		}()
		return c.Decode(ctx, sluice.BatchRef{}, files, nil, fn)
	})
}

// BenchmarkEndStream ends the same batch as the dispatcher does for the
// OpenAI family: StreamResults decodes the lines as they download.
func BenchmarkEndStream(b *testing.B) {
	c, bt, size := benchBatch(b)
	ctx := context.Background()
	benchEnd(b, size, func(fn func(sluice.Result) error) error {
		return c.StreamResults(ctx, sluice.BatchRef{}, bt, nil, fn)
	})
}
