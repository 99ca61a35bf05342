package main

// Issue 21, item 1: a crash must never adopt a batch bought for other
// content. State directory A runs content AAAA to the end and keeps its
// files at the provider; the input is rewritten to DDDD at the same path
// (so the derived job name, and every chunk's name, is the same); state
// directory B is killed while its chunk is `creating` (the emulator dies
// first, so B's create never lands), the emulator comes back on the same
// data, and B runs again. B must not adopt A's batch: every output line
// answers its DDDD request.

import (
	"database/sql"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/emutest"
)

// adoptFamily is one provider family of the scenario: its --provider, the
// environment that reaches the emulator, and one request line.
type adoptFamily struct {
	name  string
	files bool // uploads files: B may also be killed uploading
	env   func(addr, key string) []string
	line  func(id, prompt string) string
}

func adoptChatLine(model string) func(id, prompt string) string {
	return func(id, prompt string) string {
		return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":%q,"max_tokens":64,"messages":[{"role":"user","content":%q}]}}`, id, model, prompt)
	}
}

var adoptFamilies = []adoptFamily{
	{name: "openai", files: true, line: adoptChatLine("gpt-4o-mini"), env: func(addr, key string) []string {
		return []string{"OPENAI_API_KEY=" + key, "OPENAI_BASE_URL=http://" + addr + "/v1"}
	}},
	{name: "azure", files: true, line: adoptChatLine("gpt-4o-mini"), env: func(addr, key string) []string {
		return []string{"AZURE_OPENAI_API_KEY=" + key, "AZURE_OPENAI_BASE_URL=http://" + addr + "/openai/v1"}
	}},
	{name: "mistral", files: true, line: adoptChatLine("mistral-small-latest"), env: func(addr, key string) []string { return familyEnv("mistral", key, addr) }},
	{name: "together", files: true, line: adoptChatLine("meta-llama/Llama-3.3-70B-Instruct-Turbo"), env: func(addr, key string) []string { return familyEnv("together", key, addr) }},
	{name: "xai", line: adoptChatLine("grok-4-fast"), env: func(addr, key string) []string {
		return []string{"XAI_API_KEY=" + key, "XAI_BASE_URL=http://" + addr + "/xai/v1"}
	}},
	{name: "gemini", files: true, env: geminiEnv, line: func(id, prompt string) string {
		return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1beta/models/gemini-2.5-flash:generateContent","body":{"contents":[{"role":"user","parts":[{"text":%q}]}],"generationConfig":{"maxOutputTokens":64}}}`, id, prompt)
	}},
	{name: "anthropic", line: func(id, prompt string) string {
		return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/messages","body":{"model":"claude-3-5-haiku-latest","max_tokens":64,"messages":[{"role":"user","content":%q}]}}`, id, prompt)
	}, env: func(addr, key string) []string {
		return []string{"ANTHROPIC_API_KEY=" + key, "ANTHROPIC_BASE_URL=http://" + addr}
	}},
	{name: "cloudflare", line: func(id, prompt string) string {
		return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/ai/run/@cf/meta/llama-3.3-70b-instruct-fp8-fast","body":{"prompt":%q}}`, id, prompt)
	}, env: func(addr, key string) []string {
		return []string{"CLOUDFLARE_API_TOKEN=" + key, "CLOUDFLARE_ACCOUNT_ID=acct-adopt", "CLOUDFLARE_BASE_URL=http://" + addr + "/client/v4"}
	}},
}

// TestCrashNeverAdoptsOtherContent: for every family, B never adopts the
// batch A bought for other bytes under the same job and chunk name, whether
// B was killed creating (its uploaded file known to the tracker) or, where
// the family uploads files, uploading (nothing known but the chunk's
// digest).
func TestCrashNeverAdoptsOtherContent(t *testing.T) {
	t.Parallel()
	for _, f := range adoptFamilies {
		kills := []sluice.ChunkState{sluice.ChunkCreating}
		if f.files {
			kills = append(kills, sluice.ChunkUploading)
		}
		for _, at := range kills {
			t.Run(f.name+"/"+string(at), func(t *testing.T) {
				t.Parallel()
				testNeverAdoptsOtherContent(t, f, at)
			})
		}
	}
}

func testNeverAdoptsOtherContent(t *testing.T, f adoptFamily, killAt sluice.ChunkState) {
	const n, key = 20, "sk-adopt"
	dir := t.TempDir()
	data := filepath.Join(dir, "emulator-data")
	addr := freeAddr(t)
	in := filepath.Join(dir, "X.jsonl")
	ids := writeMarked(t, f, in, "AAAA", n)
	env := f.env(addr, key)
	// Anthropic tells batches apart by time: a batch takes 3s there, so
	// A's batch is created well before B's intent (more than its
	// DefaultFindSkew of 2s), as when A ran earlier. The other families
	// tell them apart by the digest in a batch's or file's name or
	// metadata (Cloudflare lists nothing), and A runs to its end before B
	// begins whatever the batch time: 300ms, A's batch well inside the
	// find window B's run lists.
	batchTime := "300ms"
	if f.name == "anthropic" {
		batchTime = "3s"
	}
	emu := func(extra ...string) *emulatorProc {
		args := append([]string{"--addr", addr, "--data", data, "--batch-time", batchTime}, extra...)
		return startEmulatorEnv(t, []string{"SLUICE_EMULATOR_API_KEY=" + key}, args...)
	}
	run := func(state, out string, extra ...string) []string {
		return append([]string{"run", in, "--out", out, "--provider", f.name, "--state", state, "--rate", "-1",
			"--poll-interval", "50ms", "--max-poll-interval", "200ms", "--http-max-wait", "5s"}, extra...)
	}

	// A: AAAA to the end, its files kept at the provider.
	e1 := emu()
	outA := filepath.Join(dir, "a.jsonl")
	if r := runSluiceWithin(t, 2*time.Minute, env, run(filepath.Join(dir, "A"), outA, "--keep-provider-files")...); r.code != 0 {
		t.Fatalf("A: exit %d\n%s", r.code, lastBytes(r.stderr, 3000))
	}
	checkAnswers(t, outA, ids, "AAAA")
	batchesA := chunkBatches(t, filepath.Join(dir, "A"))
	stopEmulator(e1)

	// The same path, other content.
	writeMarked(t, f, in, "DDDD", n)

	// B: killed while its chunk is killAt; the emulator dies first (every
	// call is slow), so the call never lands.
	e2 := emu("--slow-rate", "1", "--slow-delay", "3s")
	stateB, outB := filepath.Join(dir, "B"), filepath.Join(dir, "b.jsonl")
	cmd := sluiceCmd(env, run(stateB, outB)...)
	var se lockedBuffer
	cmd.Stdout, cmd.Stderr = nil, &se
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitChunkState(t, stateB, killAt, done, &se)
	stopEmulator(e2)
	cmd.Process.Kill()
	<-done

	// B again, against the emulator back on the same data.
	emu()
	r := runSluiceWithin(t, 2*time.Minute, env, run(stateB, outB, "--reconcile-grace", "1s")...)
	if r.code != 0 {
		t.Fatalf("B again: exit %d\n%s", r.code, lastBytes(r.stderr, 3000))
	}
	checkAnswers(t, outB, ids, "DDDD")
	for id := range chunkBatches(t, stateB) {
		if batchesA[id] {
			t.Errorf("B took A's batch %s:\n%s", id, lastBytes(r.stderr, 3000))
		}
	}
}

// chunkBatches is the set of batch ids the chunks of the state directory's
// jobs record.
func chunkBatches(t *testing.T, state string) map[string]bool {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(state, "sluice.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT batch_id FROM chunks WHERE batch_id != ''`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	ids := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// writeMarked writes n requests of f whose prompts are "MARK prompt i" to
// path and returns their custom_ids.
func writeMarked(t *testing.T, f adoptFamily, path, mark string, n int) []string {
	t.Helper()
	_, ids := writeRequests(t, path, n, func(i int) (string, string) {
		id := fmt.Sprintf("q%03d", i)
		return id, f.line(id, fmt.Sprintf("%s prompt %d", mark, i))
	})
	return ids
}

// checkAnswers asserts every custom_id succeeded once, in order, with an
// answer to its own prompt: the emulator's fake model answers "echo: "
// and the prompt reversed (emutest.ExpectedAnswer), so an answer to
// "MARK prompt i" holds "echo: i tpmorp KRAM".
func checkAnswers(t *testing.T, path string, ids []string, mark string) {
	t.Helper()
	for i, o := range checkOutput(t, path, ids) {
		if o.Response == nil || o.Response.StatusCode != 200 {
			t.Fatalf("%s: %+v, want a success", o.CustomID, o)
		}
		want := emutest.ExpectedAnswer(fmt.Sprintf("%s prompt %d", mark, i))
		if body := string(o.Response.Body); !strings.Contains(body, want) {
			t.Fatalf("%s answers another request: want %q in %s", o.CustomID, want, body)
		}
	}
}

// freeAddr is a 127.0.0.1 address nothing listens on now, for emulators
// restarted at the same address (a job's endpoint is part of it).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func stopEmulator(e *emulatorProc) {
	e.cmd.Process.Kill()
	e.cmd.Wait()
}

// waitChunkState polls the state directory's database until a chunk is in
// state, failing if the run ends first or after 2 minutes.
func waitChunkState(t *testing.T, state string, want sluice.ChunkState, done <-chan error, se *lockedBuffer) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if chunkInState(state, want) {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("the run ended (%v) before a chunk was %s:\n%s", err, want, se.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no chunk %s after 2 minutes:\n%s", want, se.String())
		}
	}
}

func chunkInState(state string, want sluice.ChunkState) bool {
	p := filepath.Join(state, "sluice.db")
	if _, err := os.Stat(p); err != nil {
		return false
	}
	db, err := sql.Open("sqlite3", "file:"+p+"?mode=ro&_busy_timeout=2000")
	if err != nil {
		return false
	}
	defer db.Close()
	var k int
	if err := db.QueryRow(`SELECT count(*) FROM chunks WHERE state = ?`, want).Scan(&k); err != nil {
		return false
	}
	return k > 0
}
