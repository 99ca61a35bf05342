package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/tracker"
)

// TestCrashAnywhere runs the real binary against a separate emulator process
// with non-zero latencies, SIGKILLs it at many moments (uploading, right
// after a create, polling, downloading, merging), re-runs the same command
// each time, and checks in the end: every custom_id exactly once in the
// output, no request executed twice at the provider, no chunk left in an
// intent state, and a sound database.
func TestCrashAnywhere(t *testing.T) {
	for _, family := range []string{"openai", "anthropic", "mistral", "together"} {
		t.Run(family, func(t *testing.T) {
			emu := startEmulator(t, "--batch-time", "800ms", "--slow-rate", "0.3", "--slow-delay", "100ms", "--seed", "4")
			dir := t.TempDir()
			state := filepath.Join(dir, "state")
			var input string
			var ids []string
			var env []string
			args := []string{"--provider", family, "--max-batch-requests", "12", "--poll-interval", "20ms", "--max-poll-interval", "80ms", "--rate", "-1", "--reconcile-grace", "1s", "--state", state}
			switch family {
			case "openai":
				input, ids = writeInput(t, dir, 360)
				env = []string{"OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL=http://" + emu.addr + "/v1"}
			case "anthropic":
				input, ids = writeAnthropicInput(t, dir, 240)
				env = []string{"ANTHROPIC_API_KEY=sk-ant-test", "ANTHROPIC_BASE_URL=http://" + emu.addr}
			default:
				input, ids = writeMTInput(t, dir, 240)
				env = familyEnv(family, "key-test", emu.addr)
			}
			out := filepath.Join(dir, "out.jsonl")
			runArgs := append([]string{"run", input, "--out", out}, args...)
			rng := rand.New(rand.NewPCG(1, 2))
			kills := 0
			for i := 0; i < 20; i++ {
				d := time.Duration(30+rng.IntN(300)) * time.Millisecond
				killed, code := killAfter(t, sluiceCmd(env, runArgs...), d)
				if !killed {
					if code != 0 {
						t.Fatalf("run %d ended with exit %d", i, code)
					}
					break
				}
				kills++
			}
			if kills < 8 {
				t.Fatalf("only %d kills landed; the job finished too fast to test crashes", kills)
			}
			r := runSluice(t, env, runArgs...)
			if r.code != 0 {
				t.Fatalf("final run: exit %d\n%s", r.code, r.stderr)
			}
			lines := checkOutput(t, out, ids)
			for _, o := range lines {
				if o.Response == nil || o.Response.StatusCode != 200 {
					t.Fatalf("%s: %+v, want success", o.CustomID, o)
				}
			}
			st := emu.stats(t)
			if fs := emu.familyStats(t, family); fs["requests_processed"] < int64(len(ids)) || fs["requests_processed_more_than_once"] != 0 {
				t.Errorf("%s counters %v", family, fs)
			}
			if st["requests_processed_more_than_once"] != 0 {
				t.Errorf("requests processed more than once: %d after %d kills", st["requests_processed_more_than_once"], kills)
			}
			db, err := tracker.Open(context.Background(), state)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := db.IntegrityCheck(context.Background()); err != nil {
				t.Error(err)
			}
			jobs, _ := db.Jobs(context.Background())
			for _, j := range jobs {
				cs, _ := db.Chunks(context.Background(), j.ID)
				for _, c := range cs {
					if c.State == sluice.ChunkUploading || c.State == sluice.ChunkCreating || !c.State.Terminal() {
						t.Errorf("chunk %d left in %s", c.ID, c.State)
					}
				}
			}
			t.Logf("%d kills; emulator: %d batches created, %d requests processed", kills, st["batches_created"], st["requests_processed"])
		})
	}
}

func writeAnthropicInput(t *testing.T, dir string, n int) (string, []string) {
	t.Helper()
	var lines []byte
	var ids []string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("m_%05d", i)
		ids = append(ids, id)
		model := "claude-3-5-haiku-latest"
		if i%2 == 1 {
			model = "claude-sonnet-4-5"
		}
		lines = fmt.Appendf(lines, `{"custom_id":%q,"method":"POST","url":"/v1/messages","body":{"model":%q,"max_tokens":16,"messages":[{"role":"user","content":"hi %d"}]}}`+"\n", id, model, i)
	}
	p := filepath.Join(dir, "in.jsonl")
	writeFile(t, p, lines)
	return p, ids
}
