package main

// The provider conformance matrix (issue 11, "A conformance matrix,
// through the binary"): every provider family against `sluice emulate`
// (local: its in-process emulator), from a fresh state directory, in each
// scenario a user meets in the first hour. Each cell is its own subtest,
// TestProviderMatrix/PROVIDER/SCENARIO, so a failure names both; cells run
// in parallel. A new provider family is one row of matrixProviders.

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/internal/testsrv"
)

// matrixProvider is one row of the matrix: how to reach a provider family
// at the emulator and what its input looks like.
type matrixProvider struct {
	name string // --provider
	// input writes n requests of this family and returns the path and the
	// custom_ids in order.
	input func(t *testing.T, dir string, n int) (string, []string)
	// env reaches the emulator at addr with key (nil for local).
	env func(addr, key string) []string
	// reconciles: the provider lists what a killed run created, so nothing
	// is executed twice after crashes (Cloudflare has no listing).
	reconciles bool
	// emu, when set, gives more environment and flags for the emulator
	// (Bedrock's S3 and minimum); args are more flags for every run.
	emu  func(t *testing.T) (env, args []string)
	args []string
	// perBatch is --max-batch-requests in its cells (0: 5).
	perBatch int
}

// batchRequests is the row's requests per batch.
func (p matrixProvider) batchRequests() int { return cmp.Or(p.perBatch, 5) }

// local reports whether the row is the in-process emulator: no endpoint,
// no key.
func (p matrixProvider) local() bool { return p.env == nil }

var matrixProviders = []matrixProvider{
	{name: "openai", input: writeInput, reconciles: true, env: func(addr, key string) []string {
		return []string{"OPENAI_API_KEY=" + key, "OPENAI_BASE_URL=http://" + addr + "/v1"}
	}},
	{name: "azure", input: writeInput, reconciles: true, env: func(addr, key string) []string {
		return []string{"AZURE_OPENAI_API_KEY=" + key, "AZURE_OPENAI_BASE_URL=http://" + addr + "/openai/v1"}
	}},
	{name: "anthropic", input: writeAnthropicInput, reconciles: true, env: func(addr, key string) []string {
		return []string{"ANTHROPIC_API_KEY=" + key, "ANTHROPIC_BASE_URL=http://" + addr}
	}},
	{name: "cloudflare", input: writeCloudflareMatrixInput, reconciles: false, env: func(addr, key string) []string {
		return []string{"CLOUDFLARE_API_TOKEN=" + key, "CLOUDFLARE_ACCOUNT_ID=acct-matrix", "CLOUDFLARE_BASE_URL=http://" + addr + "/client/v4"}
	}},
	{name: "mistral", input: writeMTInput, reconciles: true, env: func(addr, key string) []string {
		return familyEnv("mistral", key, addr)
	}},
	{name: "together", input: writeMTInput, reconciles: true, env: func(addr, key string) []string {
		return familyEnv("together", key, addr)
	}},
	{name: "gemini", input: writeGeminiInput, reconciles: true, env: geminiEnv},
	// xAI takes one batch created a second (the emulator too): batches of
	// 15, so its cells do not wait out 18 creates one after another.
	{name: "xai", input: writeMTInput, reconciles: true, env: func(addr, key string) []string {
		return []string{"XAI_API_KEY=" + key, "XAI_BASE_URL=http://" + addr + "/xai/v1"}
	}, perBatch: 15},
	// Vertex jobs live --batch-time, not the emulator's default least 2 s
	// (18 batches three at a time would wait it out six times over).
	{name: "vertex", input: writeVertexInput, reconciles: true, env: vertexEnv, emu: func(*testing.T) ([]string, []string) {
		return nil, []string{"--vertex-min-batch-time", "100ms"}
	}},
	// Bedrock's jobs read and write a real S3 (versitygw), each cell its
	// own bucket; a minimum of 2 records per job cuts balanced batches.
	{name: "bedrock", input: writeBedrockMatrixInput, reconciles: true, env: func(addr, key string) []string {
		_, bucket, err := testsrv.NewS3Bucket()
		if err != nil {
			panic(err)
		}
		return bedrockEnv(addr, key, bucket)
	}, emu: func(t *testing.T) ([]string, []string) {
		testsrv.S3(t)
		return testsrv.S3Env(), []string{"--bedrock-min-records", "2"}
	},
		args: []string{"--model-map", bedrockModelMap, "--min-batch-requests", "2"}},
	{name: "local", input: writeInput, reconciles: true},
}

// The key the matrix's emulators accept (SLUICE_EMULATOR_API_KEY).
const matrixKey = "sk-matrix-right"

func writeCloudflareMatrixInput(t *testing.T, dir string, n int) (string, []string) {
	t.Helper()
	return writeRequests(t, filepath.Join(dir, "in.jsonl"), n, func(i int) (string, string) {
		id := fmt.Sprintf("cf-%05d", i)
		if i%2 == 0 {
			return id, fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/ai/run/@cf/meta/llama-3.3-70b-instruct-fp8-fast","body":{"prompt":"tell me %d"}}`, id, i)
		}
		return id, fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/ai/run/@cf/baai/bge-m3","body":{"query":"q%d","contexts":[{"text":"a"},{"text":"b"}]}}`, id, i)
	})
}

// cell is one matrix cell's world: a fresh state directory, an emulator
// (none for local) and the command that runs the job.
type cell struct {
	t     *testing.T
	p     matrixProvider
	dir   string
	state string
	emu   *emulatorProc
	in    string
	ids   []string
	out   string
	env   []string
	args  []string // run INPUT --out OUT and the flags of every run
}

// newCell starts an emulator whose batches take batchTime and plans
// nothing yet. extra are flags for `sluice emulate`.
func newCell(t *testing.T, p matrixProvider, n int, batchTime time.Duration, extra ...string) *cell {
	t.Helper()
	c := &cell{t: t, p: p, dir: t.TempDir()}
	c.state = filepath.Join(c.dir, "state")
	c.in, c.ids = p.input(t, c.dir, n)
	c.out = filepath.Join(c.dir, "out.jsonl")
	c.args = []string{"run", c.in, "--out", c.out, "--provider", p.name, "--state", c.state,
		"--max-batch-requests", strconv.Itoa(p.batchRequests()), "--rate", "-1", "--poll-interval", "20ms", "--max-poll-interval", "100ms",
		"--http-max-wait", "3s"}
	c.args = append(c.args, p.args...)
	if p.local() {
		c.args = append(c.args, "--local-batch-time", batchTime.String())
		return c
	}
	var emuEnv []string
	if p.emu != nil {
		var more []string
		emuEnv, more = p.emu(t)
		extra = append(more, extra...)
	}
	c.emu = startEmulatorEnv(t, append([]string{"SLUICE_EMULATOR_API_KEY=" + matrixKey}, emuEnv...),
		append([]string{"--batch-time", batchTime.String()}, extra...)...)
	c.env = p.env(c.emu.addr, matrixKey)
	return c
}

func (c *cell) with(flags ...string) []string {
	return append(append([]string(nil), c.args...), flags...)
}

// stats are the emulator's counters; for local, read from the emulator's
// data in the state directory once no run holds it.
func (c *cell) stats() map[string]int64 {
	c.t.Helper()
	if c.emu != nil {
		return c.emu.stats(c.t)
	}
	srv, err := emulator.New(emulator.Options{DataDir: filepath.Join(c.state, "emulator")})
	if err != nil {
		c.t.Fatal(err)
	}
	defer srv.Close()
	b, _ := json.Marshal(srv.Stats())
	m := map[string]int64{}
	json.Unmarshal(b, &m)
	return m
}

// checkOneBatchPerChunk asserts that the local emulator holds at most one
// batch per chunk attempt: sluice bought nothing twice. (Its counter of
// requests executed twice is no measure here: killed with the run, the
// in-process emulator may execute again, after a restart, a batch whose
// progress it had not saved; that is the emulator's crash, not a second
// purchase.)
func (c *cell) checkOneBatchPerChunk(why string) {
	c.t.Helper()
	srv, err := emulator.New(emulator.Options{DataDir: filepath.Join(c.state, "emulator")})
	if err != nil {
		c.t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	seen := map[[2]int64]string{}
	for id, k := range emulatorBatches(c.t, hs.Listener.Addr().String()) {
		if prev, ok := seen[k]; ok {
			c.t.Errorf("%s: chunk/attempt %d/%d has two batches: %s and %s", why, k[0], k[1], prev, id)
		}
		seen[k] = id
	}
	if len(seen) == 0 {
		c.t.Errorf("%s: the local emulator holds no batch", why)
	}
}

// finish runs the command once more, left alone, and checks the end:
// exit 0, every custom_id once in order and succeeded, nothing executed
// twice where the provider reconciles, no chunk left unsettled, a sound
// database, and (files providers) nothing left at the provider.
func (c *cell) finish(why string) {
	c.t.Helper()
	r := runSluiceWithin(c.t, 2*time.Minute, c.env, c.args...)
	if r.code != 0 {
		c.t.Fatalf("%s: the same command again: exit %d, want 0\n%s", why, r.code, lastBytes(r.stderr, 3000))
	}
	for _, o := range checkOutput(c.t, c.out, c.ids) {
		if o.Error != nil || o.Response == nil || o.Response.StatusCode != 200 {
			c.t.Fatalf("%s: %s: %+v, want a success", why, o.CustomID, o)
		}
	}
	if c.p.local() {
		c.checkOneBatchPerChunk(why)
	} else if twice := c.stats()["requests_processed_more_than_once"]; twice != 0 && c.p.reconciles {
		c.t.Errorf("%s: %d requests executed more than once", why, twice)
	}
	checkIntegrity(c.t, c.state)
	jobs, cs := stateChunks(c.t, c.state)
	if jobs != 1 {
		c.t.Errorf("%s: %d jobs in the state, want 1", why, jobs)
	}
	for _, ch := range cs {
		if !ch.State.Terminal() {
			c.t.Errorf("%s: chunk %d left %s", why, ch.ID, ch.State)
		}
	}
	if c.p.name == "vertex" {
		checkVertexBucketEmpty(c.t, why, c.env)
	}
	filesAt := map[string]string{"openai": "/v1/files", "azure": "/v1/files", "mistral": "/mistral/v1/files", "together": "/together/v1/files"}
	if path, ok := filesAt[c.p.name]; ok && c.emu != nil {
		if files := providerFilesAt(c.t, c.emu, matrixKey, path); len(files) != 0 {
			c.t.Errorf("%s: %d files left at the provider: %v", why, len(files), files)
		}
	}
	for _, kv := range c.env {
		if loc, ok := strings.CutPrefix(kv, "SLUICE_BEDROCK_BUCKET=s3://"); ok {
			bucket, prefix, _ := strings.Cut(loc, "/")
			if keys := newS3BucketNamed(c.t, bucket).keys(c.t, prefix+"/"); len(keys) != 0 {
				c.t.Errorf("%s: %d objects left in S3: %v", why, len(keys), keys)
			}
		}
	}
}

// startRun starts a sluice run whose stderr can be waited on.
func startRun(t *testing.T, env []string, args ...string) *workerProc {
	t.Helper()
	return startWorkerProc(t, env, args...)
}

// waitLog waits until the run's log says s.
func (l *workerProc) waitLog(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(l.stderr.String(), s) {
		select {
		case <-l.done:
			t.Fatalf("the run ended (exit %d) before its log said %q:\n%s", l.code, s, lastBytes(l.stderr.String(), 3000))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run's log never said %q:\n%s", s, lastBytes(l.stderr.String(), 3000))
		}
	}
}

func (l *workerProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-l.done:
		return l.code
	case <-time.After(2 * time.Minute):
		t.Fatalf("the run did not end:\n%s", lastBytes(l.stderr.String(), 3000))
	}
	return -1
}

func TestProviderMatrix(t *testing.T) {
	t.Parallel()
	for _, p := range matrixProviders {
		t.Run(p.name+"/complete", func(t *testing.T) {
			t.Parallel()
			c := newCell(t, p, 30, 200*time.Millisecond)
			c.finish("a fresh run")
			want := int64((30 + p.batchRequests() - 1) / p.batchRequests())
			if st := c.stats(); st["batches_created"] != want && p.name != "local" && p.name != "anthropic" {
				t.Errorf("%d batches created, want %d", st["batches_created"], want)
			}
		})

		t.Run(p.name+"/interrupt", func(t *testing.T) {
			t.Parallel()
			c := newCell(t, p, 40, time.Second)
			// Ctrl-C once: no new submissions, calls in flight finish, exit 3.
			l := startRun(t, c.env, c.with("--max-live-batches", "2")...)
			l.waitLog(t, "batch submitted")
			l.cmd.Process.Signal(os.Interrupt)
			if code := l.wait(t); code != exitStopped {
				t.Fatalf("Ctrl-C once: exit %d, want 3\n%s", code, lastBytes(l.stderr.String(), 3000))
			}
			// Ctrl-C twice: calls in flight are cancelled; the run stops
			// with work left.
			l = startRun(t, c.env, c.with("--max-live-batches", "4")...)
			l.waitLog(t, "resuming job")
			time.Sleep(50 * time.Millisecond)
			l.cmd.Process.Signal(os.Interrupt)
			time.Sleep(600 * time.Millisecond) // a second signal counts after 500ms
			l.cmd.Process.Signal(os.Interrupt)
			if code := l.wait(t); code != exitStopped {
				t.Fatalf("Ctrl-C twice: exit %d, want 3 (stopped with work left)\n%s", code, lastBytes(l.stderr.String(), 3000))
			}
			c.finish("after Ctrl-C once and twice")
		})

		t.Run(p.name+"/sigkill", func(t *testing.T) {
			t.Parallel()
			extra := []string{"--slow-rate", "0.3", "--slow-delay", "60ms", "--seed", "4"}
			c := newCell(t, p, 90, 800*time.Millisecond, extra...)
			args := c.with("--reconcile-grace", "1s", "--max-live-batches", "3")
			rng := rand.New(rand.NewPCG(uint64(len(p.name)), 2))
			kills := 0
			for kills < 20 {
				d := time.Duration(40+rng.IntN(260)) * time.Millisecond
				killed, code := killAfter(t, sluiceCmd(c.env, args...), d)
				if !killed {
					if code != 0 {
						t.Fatalf("run after %d kills: exit %d", kills, code)
					}
					t.Fatalf("the job finished after only %d kills: too fast to test crashes", kills)
				}
				kills++
			}
			c.args = args
			c.finish(fmt.Sprintf("after %d SIGKILLs", kills))
		})

		if p.local() {
			// The built-in emulator has no endpoint to be dead and no key to
			// be wrong.
			continue
		}

		t.Run(p.name+"/dead-endpoint", func(t *testing.T) {
			t.Parallel()
			addr := refusingAddr(t) // nothing listens there, nor will
			dir := t.TempDir()
			in, _ := p.input(t, dir, 10)
			args := append([]string{"run", in, "--out", filepath.Join(dir, "out.jsonl"),
				"--provider", p.name, "--state", filepath.Join(dir, "state"), "--rate", "-1", "--http-max-wait", "2s",
				// A failed upload is tried again on the poll schedule: short,
				// so the run finds the endpoint dead without waiting out the
				// default intervals.
				"--poll-interval", "20ms", "--max-poll-interval", "100ms"}, p.args...)
			r := runSluiceWithin(t, 90*time.Second, p.env(addr, matrixKey), args...)
			if r.code != exitError || !strings.Contains(r.stderr, addr) {
				t.Fatalf("dead endpoint: exit %d, want 1 with a message naming %s\n%s", r.code, addr, lastBytes(r.stderr, 3000))
			}
		})

		t.Run(p.name+"/wrong-key", func(t *testing.T) {
			t.Parallel()
			c := newCell(t, p, 30, 300*time.Millisecond, "--slow-rate", "0.5", "--slow-delay", "100ms")
			wrong := p.env(c.emu.addr, "sk-matrix-wrong")
			// The default reconcile grace: the re-run must not need it.
			c.args = c.with("--concurrency", "6")
			r := runSluiceWithin(t, time.Minute, wrong, c.args...)
			if r.code != exitError {
				t.Fatalf("wrong key: exit %d, want 1\n%s", r.code, lastBytes(r.stderr, 3000))
			}
			if strings.Contains(r.stderr, "wrong") {
				t.Errorf("the key appears in the output:\n%s", r.stderr)
			}
			checkNoIntent(t, c.state)
			r = runSluiceWithin(t, 100*time.Second, c.env, c.args...)
			if r.code != 0 {
				t.Fatalf("right key: exit %d\n%s", r.code, lastBytes(r.stderr, 3000))
			}
			if strings.Contains(r.stderr, "waiting in case the earlier run's call still lands") {
				t.Errorf("the re-run with the right key waited out the reconcile grace:\n%s", lastBytes(r.stderr, 3000))
			}
			c.finish("after a wrong key")
		})
	}
}

// checkNoIntent fails when a chunk of any job in state is in an intent
// state (uploading, creating): a run that stopped left a call unsettled.
func checkNoIntent(t *testing.T, state string) {
	t.Helper()
	_, cs := stateChunks(t, state)
	for _, ch := range cs {
		if ch.State == sluice.ChunkUploading || ch.State == sluice.ChunkCreating {
			t.Errorf("chunk %d left in intent state %s", ch.ID, ch.State)
		}
	}
}
