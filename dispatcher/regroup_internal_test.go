package dispatcher

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/check"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/anthropic"
	"github.com/sluice-batch/sluice/provider/openai"
	"github.com/sluice-batch/sluice/splitter"
	"github.com/sluice-batch/sluice/tracker"
)

// TestRegroupCutsLikeTheSplitter: over random request sizes, token counts
// and limits, the chunks regroup makes of a group's requests are the
// chunks the splitter cuts from the same requests (requests, bytes,
// tokens and the bound that closed each), for a JSONL codec and an
// enveloped one: there is one chunk-cutting rule (sluice.Limits.Bound).
func TestRegroupCutsLikeTheSplitter(t *testing.T) {
	t.Parallel() // its own emulator and tracker: beside the other long tests
	ctx := context.Background()
	db := check.Try(tracker.Open(ctx, t.TempDir())).Must(t, "Open")
	t.Cleanup(func() { db.Close() }) // after the parallel cases
	rng := rand.New(rand.NewPCG(12, 34))
	for _, name := range []string{"openai", "anthropic"} {
		p := check.Try(provider.Lookup(name)).Must(t, "Lookup")
		var prov sluice.Provider
		var err error
		if name == "openai" {
			prov, err = openai.New(openai.Config{Config: provider.Config{Preset: p, BaseURL: "http://127.0.0.1:1/v1", APIKey: "k"}})
		} else {
			prov, err = anthropic.New(anthropic.Config{Config: provider.Config{Preset: p, BaseURL: "http://127.0.0.1:1", APIKey: "k"}})
		}
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n < 25; n++ {
			seed := rng.Uint64() // each case its own source: the cases run in parallel
			t.Run(fmt.Sprintf("%s-%d", name, n), func(t *testing.T) {
				t.Parallel()
				rng := rand.New(rand.NewPCG(seed, 34))
				lines := randomLines(rng, name, 20+rng.IntN(150))
				input := filepath.Join(t.TempDir(), "in.jsonl")
				check.NoErr(t, "WriteFile", os.WriteFile(input, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
				whole := planJob(t, db, prov, fmt.Sprintf("%s-%d-whole", name, n), input, p.Limits.Override(sluice.Limits{MaxBatchBytes: 1 << 40}))
				if len(whole) != 1 {
					t.Fatalf("unlimited plan made %d chunks, want 1", len(whole))
				}
				c := whole[0]
				job := check.Try(db.Job(ctx, c.Job)).Must(t, "Job")
				var reqs []sluice.Request
				var idx []int
				if err := db.ChunkRequests(ctx, job.ID, c.ID, func(r *sluice.Request) error {
					idx = append(idx, len(reqs))
					reqs = append(reqs, *r)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				// Limits that bind in turn: bytes, requests, tokens, or
				// several; none below one request (the splitter refuses
				// those). One case in three makes the bytes and requests
				// limits bind on the same request, where the order of the
				// checks names the bound.
				var lim sluice.Limits
				if n%3 == 0 {
					env := sluice.CodecFor(prov.Codec(), c.URL).Envelope()
					var longest int64
					for _, r := range reqs {
						longest = max(longest, int64(r.Length))
					}
					// The first k requests, with k large enough that no
					// request alone is over their size.
					k, b := 0, int64(0)
					for k < len(reqs)-1 && (k == 0 || env.Size(k, b) < env.Size(1, longest) || rng.IntN(3) == 0) {
						b += int64(reqs[k].Length)
						k++
					}
					lim.MaxBatchRequests, lim.MaxBatchBytes = k, env.Size(k, b)
				} else {
					if rng.IntN(2) == 0 {
						lim.MaxBatchBytes = int64(8000 + rng.IntN(30000))
					}
					if rng.IntN(2) == 0 {
						lim.MaxBatchRequests = 2 + rng.IntN(30)
					}
					if rng.IntN(2) == 0 || lim == (sluice.Limits{}) {
						lim.MaxBatchTokens = int64(1500 + rng.IntN(5000))
					}
				}
				cut := planJob(t, db, prov, fmt.Sprintf("%s-%d-cut", name, n), input, lim)
				job.Limits = lim
				d := New(db, prov, job, Options{})
				got, moved, err := d.regroup(ctx, c, reqs, idx, d.retryCut(c))
				if err != nil {
					t.Fatal(err)
				}
				if len(moved) != len(reqs) {
					t.Fatalf("moved %d of %d requests", len(moved), len(reqs))
				}
				if len(got) != len(cut) {
					t.Fatalf("regroup made %d chunks, the splitter %d (limits %+v)", len(got), len(cut), lim)
				}
				for i := range cut {
					checkCut(t, i, job.Dir, got[i], cut[i], lim)
				}
			})
		}
	}
}

// checkCut asserts regroup's chunk g is the splitter's w of the same cut:
// its counts, its file's size and its file digest.
func checkCut(t *testing.T, i int, dir string, g, w *sluice.Chunk, lim sluice.Limits) {
	t.Helper()
	if g.Requests != w.Requests || g.Bytes != w.Bytes || g.EstTokens != w.EstTokens || g.Bound != w.Bound {
		t.Errorf("chunk %d: regroup %d requests %d bytes %d tokens bound %q; splitter %d %d %d %q (limits %+v)",
			i, g.Requests, g.Bytes, g.EstTokens, g.Bound, w.Requests, w.Bytes, w.EstTokens, w.Bound, lim)
	}
	b, err := os.ReadFile(filepath.Join(dir, g.Path))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) != g.Bytes {
		t.Errorf("chunk %d: file has %d bytes, chunk says %d", i, len(b), g.Bytes)
	}
	// Its file digest, taken as it was written, is its bytes' (and the
	// splitter's, for the same cut).
	checkFileDigest(t, dir, g)
	if g.FileDigest != w.FileDigest {
		t.Errorf("chunk %d: regroup's file digest %s, the splitter's %s", i, g.FileDigest, w.FileDigest)
	}
}

// planJob plans input as a new job with limits and returns its chunks.
func planJob(t *testing.T, db *tracker.DB, prov sluice.Provider, id, input string, lim sluice.Limits) []*sluice.Chunk {
	t.Helper()
	ctx := context.Background()
	job := &sluice.Job{ID: id, Provider: prov.Name(), Input: input, Dir: filepath.Join(t.TempDir(), id), Limits: lim, MaxAttempts: 3}
	check.NoErr(t, "MkdirAll", os.MkdirAll(job.Dir, 0o700))
	plan := check.Try(db.BeginPlan(ctx, job)).Must(t, "BeginPlan")
	res, err := splitter.Split(ctx, splitter.Config{Input: input, Dir: job.Dir, Codec: prov.Codec(), Limits: lim}, plan)
	if err != nil {
		plan.Abort(ctx)
		t.Fatal(err)
	}
	check.NoErr(t, "Commit", plan.Commit(ctx, res.Fingerprint, res.Requests, res.Rejected))
	cs := check.Try(db.Chunks(ctx, id)).Must(t, "Chunks")
	for _, c := range cs {
		checkFileDigest(t, job.Dir, c)
	}
	return cs
}

// checkFileDigest asserts c's recorded file digest is its file's.
func checkFileDigest(t *testing.T, dir string, c *sluice.Chunk) {
	t.Helper()
	_, fd, err := sluice.ChunkDigests(filepath.Join(dir, c.Path), false)
	if err != nil || c.FileDigest == "" || fd != c.FileDigest {
		t.Errorf("chunk %d: file digest %q recorded, the file's %q (%v)", c.ID, c.FileDigest, fd, err)
	}
}

// randomLines are n requests of one url and model with bodies from a few
// bytes to a few KB, so sizes and token estimates vary independently.
func randomLines(rng *rand.Rand, family string, n int) []string {
	words := []string{"a", "lorem", "ipsum", "tokenisation", "世界", "é", "1234567", "{}", "the", "quick"}
	var ls []string
	for i := 0; i < n; i++ {
		var sb strings.Builder
		for k := rng.IntN(1 << rng.IntN(10)); k >= 0; k-- {
			sb.WriteString(words[rng.IntN(len(words))])
			if rng.IntN(3) > 0 {
				sb.WriteByte(' ')
			}
		}
		if family == "anthropic" {
			ls = append(ls, fmt.Sprintf(`{"custom_id":"r-%d","method":"POST","url":"/v1/messages","body":{"model":"claude-3-5-haiku-latest","max_tokens":%d,"messages":[{"role":"user","content":%q}]}}`, i, 1+rng.IntN(500), sb.String()))
			continue
		}
		ls = append(ls, fmt.Sprintf(`{"custom_id":"r-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":%q}]}}`, i, sb.String()))
	}
	return ls
}

// The tracker reads one chunk for a claimed step, not every chunk.
var _ chunkGetter = (*tracker.DB)(nil)

// TestRegroupRefusesAnotherFile: a chunk file that is not the one the job
// planned (its recorded file digest is another's: another plan's file in a
// shared store, or one changed under the job) is never cut into next
// attempts: regroup fails naming the chunk, and writes nothing.
func TestRegroupRefusesAnotherFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := tracker.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := provider.Lookup("openai")
	if err != nil {
		t.Fatal(err)
	}
	prov, err := openai.New(openai.Config{Config: provider.Config{Preset: p, BaseURL: "http://127.0.0.1:1/v1", APIKey: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	input := filepath.Join(t.TempDir(), "in.jsonl")
	lines := randomLines(rand.New(rand.NewPCG(5, 6)), "openai", 30)
	if err := os.WriteFile(input, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := planJob(t, db, prov, "j", input, p.Limits)[0]
	job, err := db.Job(ctx, c.Job)
	if err != nil {
		t.Fatal(err)
	}
	// The same size, one byte of a body another.
	path := filepath.Join(job.Dir, c.Path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndex(string(b), `"content":"`) + len(`"content":"`)
	b[i] ^= 1
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	var reqs []sluice.Request
	var idx []int
	db.ChunkRequests(ctx, job.ID, c.ID, func(r *sluice.Request) error {
		idx = append(idx, len(reqs))
		reqs = append(reqs, *r)
		return nil
	})
	d := New(db, prov, job, Options{})
	got, _, err := d.regroup(ctx, c, reqs, idx, d.retryCut(c))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("chunk %d: the chunk file %s is not the one job %s planned", c.ID, c.Path, job.ID)) {
		t.Fatalf("regroup of another file: %v, %v; want the refusal", got, err)
	}
	if m, _ := filepath.Glob(filepath.Join(job.Dir, "chunks", "*-a2-*")); len(m) != 0 {
		t.Fatalf("next attempts written: %v", m)
	}
}
