package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice/internal/testsrv"
)

// Where the new provider families (xAI, Vertex AI, Bedrock) meet the other
// features (found by the QA pass of issue 22), through the real binary
// against `sluice emulate`.

// TestBedrockSameInputElsewhereGetsItsOwnJob: the same input file run from two
// fresh state directories with two --bedrock-bucket prefixes is two jobs
// at Bedrock. The second run's first attempt is not handed the first
// run's job (finished, its output deleted) by a clientRequestToken that
// named only the job id, chunk, attempt and digest: every request
// succeeds in its first batch, nothing is retried, and each answer is its
// own request's.
func TestBedrockSameInputElsewhereGetsItsOwnJob(t *testing.T) {
	t.Parallel() // its own emulator, state directory and bucket
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
// shows. /_emulator/stats counts them under by_family.bedrock.
func TestBedrockLlamaAnswersAreEachRequestsOwn(t *testing.T) {
	t.Parallel() // its own emulator, state directory and bucket
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
	// The emulator counts the family's requests in by_family, as every
	// family's (a request bought twice shows there).
	if fs := emu.familyStats(t, "bedrock"); fs["requests_processed"] != 10 || fs["requests_processed_more_than_once"] != 0 {
		t.Errorf("by_family.bedrock of /_emulator/stats: %v, want 10 requests processed, none twice", fs)
	}
}

// TestBedrockMissingBucketIsBadUsage: a --bedrock-bucket whose bucket
// does not exist is bad usage found before anything is sent (exit 2,
// naming the flag), as --vertex-bucket's and --store's are, not an upload
// error (exit 1).
func TestBedrockMissingBucketIsBadUsage(t *testing.T) {
	testsrv.S3(t)
	emu := startEmulator(t)
	dir := t.TempDir()
	in, _ := writeBedrockMatrixInput(t, dir, 10)
	r := runSluiceWithin(t, time.Minute, bedrockEnv(emu.addr, matrixKey, "no-such-bucket-qa"), "run", in, "--out", filepath.Join(dir, "out.jsonl"),
		"--provider", "bedrock", "--state", filepath.Join(dir, "state"), "--model-map", bedrockModelMap, "--min-batch-requests", "5")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--bedrock-bucket") || !strings.Contains(r.stderr, "no such bucket") {
		t.Fatalf("exit %d, want 2 naming --bedrock-bucket and the missing bucket\n%s", r.code, lastBytes(r.stderr, 1500))
	}
	if n := emu.stats(t)["batches_created"]; n != 0 {
		t.Fatalf("%d jobs created", n)
	}
}

// TestCancelRefusedForUsageChangesNothing: 'sluice cancel JOB' of a live
// Vertex job without the Cloud Storage location its client needs is bad
// usage (exit 2) and leaves the job as it was: not marked cancelled while
// its batches run on at the provider uncancelled. Given the location, the
// same cancel stops them.
func TestCancelRefusedForUsageChangesNothing(t *testing.T) {
	dir := t.TempDir()
	in, _ := writeVertexInput(t, dir, 20)
	emu := startEmulator(t, "--batch-time", "1m")
	env := vertexEnv(emu.addr, matrixKey)
	state := filepath.Join(dir, "state")
	r := runSluiceWithin(t, time.Minute, env, "run", in, "--out", filepath.Join(dir, "out.jsonl"), "--provider", "vertex",
		"--state", state, "--model", "gemini-2.5-flash", "--once")
	if r.code != 3 {
		t.Fatalf("run --once: exit %d, want 3\n%s", r.code, lastBytes(r.stderr, 1500))
	}
	st := runSluice(t, env, "status", "--state", state, "--json")
	id := gjson.Get(st.stdout, "jobs.0.id").String()
	var noBucket []string
	for _, e := range env {
		if !strings.HasPrefix(e, "SLUICE_VERTEX_BUCKET=") {
			noBucket = append(noBucket, e)
		}
	}
	r = runSluiceWithin(t, time.Minute, append(noBucket, "SLUICE_VERTEX_BUCKET="), "cancel", id, "--state", state)
	if r.code != exitUsage || !strings.Contains(r.stderr, "--vertex-bucket") {
		t.Fatalf("cancel without a bucket: exit %d, want 2 naming --vertex-bucket\n%s", r.code, lastBytes(r.stderr, 1500))
	}
	if s := gjson.Get(runSluice(t, env, "status", "--state", state, "--json").stdout, "jobs.0.state").String(); s == "cancelled" {
		t.Fatalf("a cancel refused for bad usage marked the job %s", s)
	}
	r = runSluiceWithin(t, time.Minute, env, "cancel", id, "--state", state, "--poll-interval", "20ms", "--max-poll-interval", "200ms")
	if r.code != 4 || emu.stats(t)["batches_cancelled"] == 0 {
		t.Fatalf("cancel: exit %d (want 4), %d batches cancelled\n%s", r.code, emu.stats(t)["batches_cancelled"], lastBytes(r.stderr, 1500))
	}
}

// TestRunHelpNamesEveryProvidersCredentials: run --help says where each
// provider's credentials come from, Bedrock's (the AWS chain and region)
// and Vertex's fallback to Application Default Credentials included.
func TestRunHelpNamesEveryProvidersCredentials(t *testing.T) {
	r := runSluice(t, nil, "run", "--help")
	for _, want := range []string{"bedrock     the AWS credential chain", "AWS_REGION",
		"vertex      GOOGLE_OAUTH_ACCESS_TOKEN, else Application Default Credentials", "xai         XAI_API_KEY"} {
		if !strings.Contains(r.stdout+r.stderr, want) {
			t.Errorf("run --help does not say %q", want)
		}
	}
}

// TestBedrockBadLineReportedBeforeMinimum: an input with a bad line is
// refused naming the file, the line and the reason (exit 2), whatever the
// minimum of records per job: the count that checks the minimum does not
// hide it behind "under the provider's minimum", which sent the user to
// add requests to a file that was broken anyway.
func TestBedrockBadLineReportedBeforeMinimum(t *testing.T) {
	testsrv.S3(t)
	emu := startEmulator(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	good, _ := writeBedrockMatrixInput(t, t.TempDir(), 8)
	lines := readLines(t, good)
	bad := strings.Join(lines[:5], "\n") + "\n" + `{"custom_id":"x","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[}` + "\n" + strings.Join(lines[5:], "\n") + "\n"
	writeFile(t, in, []byte(bad))
	r := runSluiceWithin(t, time.Minute, bedrockEnv(emu.addr, matrixKey, "unused"), "run", in, "--out", filepath.Join(dir, "out.jsonl"),
		"--provider", "bedrock", "--state", filepath.Join(dir, "state"), "--model-map", bedrockModelMap, "--min-batch-requests", "5")
	if r.code != exitUsage || !strings.Contains(r.stderr, in+":6:") || !strings.Contains(r.stderr, "invalid JSON") {
		t.Fatalf("exit %d, want 2 naming %s:6 and its reason\n%s", r.code, in, lastBytes(r.stderr, 1500))
	}
}
