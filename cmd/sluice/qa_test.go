package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice/internal/testsrv"
)

// TestBedrockSameInputElsewhereGetsItsOwnJob: the same input file run from two
// fresh state directories with two --bedrock-bucket prefixes is two jobs
// at Bedrock. The second run's first attempt is not handed the first
// run's job (finished, its output deleted) by a clientRequestToken that
// named only the job id, chunk, attempt and digest: every request
// succeeds in its first batch, nothing is retried, and each answer is its
// own request's.
func TestBedrockSameInputElsewhereGetsItsOwnJob(t *testing.T) {
	_, bucket := testsrv.S3(t)
	emu := startEmulator(t, "--batch-time", "100ms")
	in, ids := writeBedrockMatrixInput(t, t.TempDir(), 20)
	for i, prefix := range []string{"one", "two"} {
		dir := t.TempDir()
		out := filepath.Join(dir, "out.jsonl")
		env := append(bedrockEnv(emu.addr, matrixKey, bucket), "SLUICE_BEDROCK_BUCKET=s3://"+bucket+"/"+prefix)
		r := runSluiceWithin(t, 2*time.Minute, env, "run", in, "--out", out, "--provider", "bedrock",
			"--state", filepath.Join(dir, "state"), "--model-map", bedrockModelMap, "--min-batch-requests", "5",
			"--poll-interval", "20ms", "--max-poll-interval", "200ms")
		if r.code != 0 || !strings.Contains(r.stderr, `"succeeded":20,"failed":0,"retried":0,`) {
			t.Fatalf("run %d (prefix %s): exit %d, want 0 with nothing retried\n%s", i+1, prefix, r.code, lastBytes(r.stderr, 2000))
		}
		checkOutput(t, out, ids)
	}
}

// TestBedrockLlamaAnswersAreEachRequestsOwn: chat lines sent to a Llama
// model on Bedrock (a prompt in Llama 3's chat template) come back each
// with the answer to its own user message. The emulator's fake Llama
// answers the last user turn of the template, not the template's fixed
// head, so answers differ by request and a request given another's answer
// shows.
func TestBedrockLlamaAnswersAreEachRequestsOwn(t *testing.T) {
	_, bucket := testsrv.S3(t)
	emu := startEmulator(t, "--batch-time", "100ms")
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	var b strings.Builder
	var ids []string
	for i := range 10 {
		id := fmt.Sprintf("q%03d", i)
		ids = append(ids, id)
		fmt.Fprintf(&b, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4.1-nano","max_tokens":64,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"llama prompt %d"}]}}`+"\n", id, i)
	}
	writeFile(t, in, []byte(b.String()))
	out := filepath.Join(dir, "out.jsonl")
	r := runSluiceWithin(t, 2*time.Minute, bedrockEnv(emu.addr, matrixKey, bucket), "run", in, "--out", out, "--provider", "bedrock",
		"--state", filepath.Join(dir, "state"), "--model-map", bedrockModelMap, "--min-batch-requests", "5",
		"--poll-interval", "20ms", "--max-poll-interval", "200ms")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, lastBytes(r.stderr, 2000))
	}
	checkAnswers(t, out, ids, "llama")
}
