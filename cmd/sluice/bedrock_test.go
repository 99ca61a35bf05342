package main

import (
	"bufio"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice/internal/testsrv"
)

// The Bedrock models the tests map OpenAI's to.
const (
	bedrockClaude = "anthropic.claude-3-haiku-20240307-v1:0"
	bedrockLlama  = "meta.llama3-8b-instruct-v1:0"
	bedrockTitan  = "amazon.titan-embed-text-v2:0"
	bedrockRole   = "arn:aws:iam::123456789012:role/BedrockBatch"
)

// bedrockEnv reaches the Bedrock family of the emulator at addr, with S3
// on the test S3 server (its bucket for the batches), signing with key as
// the secret when it is not matrixKey (a wrong key), else with the test
// server's own secret, which the emulator also holds.
func bedrockEnv(addr, key, bucket string) []string {
	env := append(testsrv.S3Env(), "AWS_ENDPOINT_URL_BEDROCK=http://"+addr+"/bedrock", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME=http://"+addr+"/bedrock-runtime",
		"SLUICE_BEDROCK_ROLE_ARN="+bedrockRole, "SLUICE_BEDROCK_BUCKET=s3://"+bucket+"/batches")
	if key != matrixKey {
		env = append(env, "AWS_SECRET_ACCESS_KEY="+key)
	}
	return env
}

// writeBedrockExample writes examples/requests.jsonl as a Bedrock user
// runs it: the chat lines as they are (translated by sluice, models
// mapped with bedrockModelMap), the embeddings lines as Titan's native
// InvokeModel lines.
func writeBedrockExample(t *testing.T, dir string) (string, []string) {
	t.Helper()
	in, err := os.Open(filepath.Join("..", "..", "examples", "requests.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var b strings.Builder
	var ids []string
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		l := gjson.Parse(sc.Text())
		ids = append(ids, l.Get("custom_id").String())
		if l.Get("url").String() != "/v1/embeddings" {
			b.WriteString(sc.Text() + "\n")
			continue
		}
		line, _ := json.Marshal(map[string]any{"custom_id": l.Get("custom_id").String(), "method": "POST",
			"url": "/model/" + bedrockTitan + "/invoke", "body": map[string]any{"inputText": l.Get("body.input").String()}})
		b.Write(append(line, '\n'))
	}
	p := filepath.Join(dir, "requests-bedrock.jsonl")
	writeFile(t, p, []byte(b.String()))
	return p, ids
}

const bedrockModelMap = "gpt-4o-mini=" + bedrockClaude + ",gpt-4.1-nano=" + bedrockLlama

// TestBedrockRunsREADMEExample: `sluice run` finishes the README's
// example, translated to Bedrock (chat lines mapped to Claude and Llama,
// embeddings as Titan lines), against `sluice emulate` from a fresh state
// directory: every custom_id once, in order, succeeded; chat answers
// translated back to chat.completion objects, Titan's embeddings as
// Bedrock answers them; nothing bought twice; and nothing left in S3.
// Without --min-batch-requests the plan is refused (exit 2) with the
// numbers: the Llama and Titan groups (60 each) are under Bedrock's
// default minimum of 100 records per job.
func TestBedrockRunsREADMEExample(t *testing.T) {
	t.Parallel() // its own emulator, state directory and bucket
	_, bucket := testsrv.S3(t)
	emu := startEmulator(t, "--batch-time", "300ms", "--bedrock-min-records", "50")
	dir := t.TempDir()
	in, ids := writeBedrockExample(t, dir)
	out := filepath.Join(dir, "out.jsonl")
	env := bedrockEnv(emu.addr, matrixKey, bucket)
	args := []string{"run", in, "--out", out, "--provider", "bedrock", "--state", filepath.Join(dir, "state"),
		"--model-map", bedrockModelMap, "--poll-interval", "20ms", "--max-poll-interval", "200ms"}

	r := runSluiceWithin(t, time.Minute, env, args...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "has 60 request(s), under the provider's minimum of requests per batch of 100") {
		t.Fatalf("under the minimum: exit %d, want 2 with the numbers\n%s", r.code, lastBytes(r.stderr, 2000))
	}
	r = runSluiceWithin(t, 2*time.Minute, env, append(args, "--min-batch-requests", "50")...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, lastBytes(r.stderr, 3000))
	}
	embeddings := 0
	for _, o := range checkOutput(t, out, ids) {
		body, _ := json.Marshal(o.Response)
		b := gjson.GetBytes(body, "body")
		switch {
		case o.Error != nil || o.Response == nil || o.Response.StatusCode != 200:
			t.Fatalf("%s: %+v", o.CustomID, o)
		case b.Get("embedding").Exists():
			if len(b.Get("embedding").Array()) != 1024 {
				t.Fatalf("%s: not a Titan embedding: %s", o.CustomID, lastBytes(b.Raw, 300))
			}
			embeddings++
		case b.Get("object").String() != "chat.completion" || b.Get("choices.0.message.content").String() == "":
			t.Fatalf("%s: not a chat.completion: %s", o.CustomID, b.Raw)
		}
	}
	if embeddings != 60 {
		t.Errorf("%d embeddings, want 60", embeddings)
	}
	if twice := emu.stats(t)["requests_processed_more_than_once"]; twice != 0 {
		t.Errorf("%d requests executed twice", twice)
	}
	if keys := newS3BucketNamed(t, bucket).keys(t, "batches/"); len(keys) != 0 {
		t.Errorf("%d objects left in S3: %v", len(keys), keys)
	}
	t.Logf("stderr of the run:\n%s", lastBytes(r.stderr, 1500))
}

// newS3BucketNamed is the s3Bucket of an existing bucket.
func newS3BucketNamed(t *testing.T, bucket string) *s3Bucket {
	t.Helper()
	ep, _ := testsrv.S3(t)
	c, err := testsrv.S3Client(t.Context(), ep)
	if err != nil {
		t.Fatal(err)
	}
	return &s3Bucket{name: bucket, env: testsrv.S3Env(), client: c}
}

// writeBedrockMatrixInput writes n chat lines for two Bedrock models
// (Claude and Llama, mapped from OpenAI's by bedrockModelMap).
func writeBedrockMatrixInput(t *testing.T, dir string, n int) (string, []string) {
	t.Helper()
	var b []byte
	var ids []string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("br-%05d", i)
		ids = append(ids, id)
		model := []string{"gpt-4o-mini", "gpt-4.1-nano"}[i%2]
		b = fmt.Appendf(b, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":%q,"max_tokens":32,"messages":[{"role":"user","content":"q %d"}]}}`+"\n", id, model, i)
	}
	p := filepath.Join(dir, "in.jsonl")
	writeFile(t, p, b)
	return p, ids
}

// runRetriesUnderMinimum runs 40 requests of two models under a minimum
// of 10 records per job (the emulator's too), 15% of the records failing
// (429 and 5xx retried, 400 final), with more flags.
func runRetriesUnderMinimum(t *testing.T, more ...string) (*emulatorProc, result, string, []string) {
	t.Helper()
	_, bucket := testsrv.S3(t)
	emu := startEmulator(t, "--batch-time", "100ms", "--line-error-rate", "0.15", "--seed", "7", "--bedrock-min-records", "10")
	dir := t.TempDir()
	in, ids := writeBedrockMatrixInput(t, dir, 40)
	out := filepath.Join(dir, "out.jsonl")
	r := runSluiceWithin(t, 2*time.Minute, bedrockEnv(emu.addr, matrixKey, bucket), append([]string{"run", in, "--out", out,
		"--provider", "bedrock", "--state", filepath.Join(dir, "state"), "--model-map", bedrockModelMap, "--min-batch-requests", "10",
		"--poll-interval", "20ms", "--max-poll-interval", "100ms"}, more...)...)
	return emu, r, out, ids
}

// TestBedrockRetryUnderMinimumNotSent: requests that fail retryably (429,
// 5xx records) go to a retry of a few requests, under the minimum of
// records per job: it is never sent (no third job is created); its
// requests fail for good with below_minimum_batch, the message giving
// both numbers, and the run exits 4.
func TestBedrockRetryUnderMinimumNotSent(t *testing.T) {
	t.Parallel() // its own emulator, state directory and bucket
	emu, r, out, ids := runRetriesUnderMinimum(t)
	if r.code != exitFailures {
		t.Fatalf("exit %d, want 4\n%s", r.code, lastBytes(r.stderr, 3000))
	}
	below := 0
	for _, o := range checkOutput(t, out, ids) {
		if o.Error != nil && o.Error.Code == "below_minimum_batch" {
			below++
			if !strings.Contains(o.Error.Message, "under the provider's minimum of 10 per batch") {
				t.Errorf("%s: %s", o.CustomID, o.Error.Message)
			}
		}
	}
	if below == 0 {
		t.Fatalf("no request failed below_minimum_batch\n%s", lastBytes(r.stderr, 2000))
	}
	if n := emu.stats(t)["batches_created"]; n != 2 {
		t.Errorf("%d jobs created, want the plan's 2 (no retry under the minimum)", n)
	}
}

// TestBedrockCancelStopsJobs: `sluice cancel` of a job whose Bedrock jobs
// are still running stops them (StopModelInvocationJob; the emulator's
// jobs stay unfinished for --batch-time), merges what ran, and every
// request is in the output, cancelled ones as errors (exit 4). (As for
// every provider, a cancelled job's files stay: cleanup follows a done
// job's merge.)
func TestBedrockCancelStopsJobs(t *testing.T) {
	t.Parallel() // its own emulator, state directory and bucket
	_, bucket := testsrv.S3(t)
	emu := startEmulator(t, "--batch-time", "20s", "--bedrock-min-records", "5")
	dir := t.TempDir()
	in, ids := writeBedrockMatrixInput(t, dir, 20)
	out := filepath.Join(dir, "out.jsonl")
	env := append(bedrockEnv(emu.addr, matrixKey, bucket), stateEnv(dir)...)
	r := runSluiceWithin(t, time.Minute, env, "run", in, "--out", out, "--provider", "bedrock", "--model-map", bedrockModelMap,
		"--min-batch-requests", "5", "--once")
	if r.code != exitStopped {
		t.Fatalf("run --once: exit %d, want 3\n%s", r.code, lastBytes(r.stderr, 2000))
	}
	job := onlyJob(t, statusOf(t, env))
	r = runSluiceWithin(t, time.Minute, env, "cancel", job.ID, "--poll-interval", "50ms", "--max-poll-interval", "100ms")
	if r.code != exitFailures {
		t.Fatalf("cancel: exit %d, want 4\n%s", r.code, lastBytes(r.stderr, 2000))
	}
	for _, o := range checkOutput(t, out, ids) {
		if o.Error == nil || o.Error.Code != "batch_cancelled" {
			t.Errorf("%s: %+v, want batch_cancelled", o.CustomID, o.Error)
		}
	}
	if st := emu.stats(t); st["batches_cancelled"] != 2 {
		t.Errorf("stats %v: want 2 jobs stopped", st)
	}
}

// TestBedrockRetryUnderMinimumGoesRealtime: with --fallback realtime, the
// requests left to retry under the minimum are not refused but sent one
// by one through the Bedrock runtime's InvokeModel (SigV4-signed, to the
// emulator's runtime): none fails below_minimum_batch, no job is created
// under the minimum, nothing is executed twice.
func TestBedrockRetryUnderMinimumGoesRealtime(t *testing.T) {
	t.Parallel() // its own emulator, state directory and bucket
	emu, r, out, ids := runRetriesUnderMinimum(t, "--fallback", "realtime", "--deadline", "2h", "--fallback-at", "1h")
	if r.code != exitFailures && r.code != exitOK {
		t.Fatalf("exit %d, want 0 or 4 (records failed 400 for good)\n%s", r.code, lastBytes(r.stderr, 3000))
	}
	for _, o := range checkOutput(t, out, ids) {
		switch {
		case o.Error != nil && o.Error.Code == "below_minimum_batch":
			t.Errorf("%s: %s", o.CustomID, o.Error.Message)
		case o.Error != nil && o.Error.Code != "bedrock_400":
			t.Errorf("%s: %+v, want a success or a final 400", o.CustomID, o.Error)
		}
	}
	st := emu.stats(t)
	if st["sync_requests"] == 0 || st["batches_created"] != 2 || st["requests_processed_more_than_once"] != 0 {
		t.Errorf("stats %v: want the 2 planned jobs, the retries through the runtime, nothing twice", st)
	}
}

// TestEmulateListsBedrock: `sluice emulate` names the Bedrock control
// plane and runtime in its banner and in /_emulator/info, with the
// variables the AWS SDKs read their endpoints from.
func TestEmulateListsBedrock(t *testing.T) {
	cmd := sluiceCmd(nil, "emulate", "--addr", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	var root string
	banner := map[string]string{}
	for len(banner) < 2 && sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 5 && f[0] == "sluice" && f[3] == "on":
			root = f[4]
		case len(f) == 2 && strings.HasPrefix(f[1], "AWS_ENDPOINT_URL_BEDROCK"):
			banner[strings.TrimSuffix(f[0], ":")] = f[1]
		}
	}
	go io.Copy(io.Discard, stderr)
	want := map[string]string{"bedrock": "AWS_ENDPOINT_URL_BEDROCK=" + root + "/bedrock",
		"bedrock-runtime": "AWS_ENDPOINT_URL_BEDROCK_RUNTIME=" + root + "/bedrock-runtime"}
	resp, err := http.Get(root + "/_emulator/info")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info struct {
		BaseURLs map[string]string `json:"base_urls"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	for fam, line := range want {
		_, u, _ := strings.Cut(line, "=")
		if banner[fam] != line || info.BaseURLs[fam] != u {
			t.Errorf("%s: banner %q, info %q, want %q", fam, banner[fam], info.BaseURLs[fam], line)
		}
	}
}

// TestBedrockRetriesUnderMinimumCombined: one model's 40 requests in two
// jobs of 20 (--max-batch-requests 20) under a minimum of 10 records per
// job (the emulator's too), most records failing (a quarter of the errors
// 429, a quarter 500: retried). Each job leaves fewer retries than the
// minimum, but together they reach it: the first job's retries wait for
// the second's, and the two are combined into one job, sent once. No job
// under the minimum is created (the emulator would fail it), nothing is
// executed twice, and every request is in the output.
func TestBedrockRetriesUnderMinimumCombined(t *testing.T) {
	t.Parallel() // its own emulator, state directory and bucket
	checkCombined(t, runRetriesToCombine(t, false))
}

// TestBedrockRetriesUnderMinimumCombinedAfterKill: as above, one job at a
// time (--max-live-batches 1), the run SIGKILLed while the first job's
// retries wait in the tracker for the second job; the run started again
// decides from the tracker alone as the first would have: the retries of
// both jobs combined into one job, sent once.
func TestBedrockRetriesUnderMinimumCombinedAfterKill(t *testing.T) {
	t.Parallel() // its own emulator, state directory and bucket
	checkCombined(t, runRetriesToCombine(t, true))
}

// combineRun is what runRetriesToCombine leaves for checkCombined.
type combineRun struct {
	emu      *emulatorProc
	r        result
	out      string
	ids      []string
	retried  []int64 // the planned jobs' retry chunks' sizes, as tracked
	combined []int64 // the combined chunks' sizes
}

// runRetriesToCombine runs the input of TestBedrockRetriesUnderMinimumCombined
// to its end; with kill, one job at a time, and SIGKILLed first while a
// retry chunk waits (pending, attempt 2) with the second job live.
func runRetriesToCombine(t *testing.T, kill bool) combineRun {
	t.Helper()
	_, bucket := testsrv.S3(t)
	batchTime := "100ms"
	if kill {
		batchTime = "1500ms" // the second job runs while the first's retries wait
	}
	emu := startEmulator(t, "--batch-time", batchTime, "--line-error-rate", "0.7", "--seed", "3", "--bedrock-min-records", "10")
	dir := t.TempDir()
	var b []byte
	var ids []string
	for i := 0; i < 40; i++ {
		id := fmt.Sprintf("bc-%05d", i)
		ids = append(ids, id)
		b = fmt.Appendf(b, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","max_tokens":32,"messages":[{"role":"user","content":"q %d"}]}}`+"\n", id, i)
	}
	in := filepath.Join(dir, "in.jsonl")
	writeFile(t, in, b)
	out := filepath.Join(dir, "out.jsonl")
	env := bedrockEnv(emu.addr, matrixKey, bucket)
	state := filepath.Join(dir, "state")
	args := []string{"run", in, "--out", out, "--provider", "bedrock", "--state", state, "--model-map", bedrockModelMap,
		"--min-batch-requests", "10", "--max-batch-requests", "20", "--max-attempts", "2",
		"--poll-interval", "20ms", "--max-poll-interval", "100ms"}
	if kill {
		args = append(args, "--max-live-batches", "1")
		waiting := func() bool {
			return chunkCount(state, `attempt = 2 AND state = 'pending'`) > 0 && chunkCount(state, `attempt = 1 AND state = 'submitted'`) > 0
		}
		killWhen(t, sluiceCmd(env, args...), "a retry chunk waiting while the second job runs", waiting)
		if n := emu.stats(t)["batches_created"]; n != 2 {
			t.Fatalf("%d jobs created before the kill, want the 2 planned", n)
		}
	}
	c := combineRun{emu: emu, out: out, ids: ids}
	c.r = runSluiceWithin(t, 2*time.Minute, env, args...)
	// Each planned job's retries: the chunks of its next attempt (files
	// -r), and the chunk they were combined into (-m), as tracked.
	c.retried = chunkColumn[int64](t, state, `requests`, `path LIKE '%-a2-r%'`)
	c.combined = chunkColumn[int64](t, state, `requests`, `path LIKE '%-a2-m%'`)
	return c
}

// chunkCount counts the chunks of the state directory's tracker where
// cond holds (0 while it cannot be read).
func chunkCount(state, cond string) int {
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(state, "sluice.db")+"?mode=ro&_busy_timeout=2000")
	if err != nil {
		return 0
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM chunks WHERE ` + cond).Scan(&n); err != nil {
		return 0
	}
	return n
}

// chunkColumn reads column of the chunks where cond holds, in id order.
func chunkColumn[T int64 | string](t *testing.T, state, column, cond string) []T {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(state, "sluice.db")+"?mode=ro&_busy_timeout=2000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT ` + column + ` FROM chunks WHERE ` + cond + ` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var vs []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	return vs
}

// checkCombined checks a run of runRetriesToCombine: each planned job
// left fewer retries than the minimum of 10, they were combined into one
// job of them all, sent once (3 jobs in all, none failed), nothing
// executed twice, and every request in the output, none failed
// below_minimum_batch.
func checkCombined(t *testing.T, c combineRun) {
	t.Helper()
	if c.r.code != exitFailures && c.r.code != exitOK {
		t.Fatalf("exit %d, want 0 or 4 (records failed 400 for good)\n%s", c.r.code, lastBytes(c.r.stderr, 3000))
	}
	outs := checkOutput(t, c.out, c.ids)
	st := c.emu.stats(t)
	if len(c.retried) != 2 || c.retried[0] >= 10 || c.retried[1] >= 10 || len(c.combined) != 1 || c.retried[0]+c.retried[1] != c.combined[0] {
		t.Fatalf("retry chunks of %v requests, combined into %v: want two under the minimum of 10, combined into one of their sum\n%s",
			c.retried, c.combined, lastBytes(c.r.stderr, 3000))
	}
	if st["batches_created"] != 3 || st["batches_failed"] != 0 || st["requests_processed"] != 40+c.combined[0] {
		t.Errorf("stats %v: want the 2 planned jobs and one job of the %d retries combined, none failed", st, c.combined[0])
	}
	if st["requests_processed_more_than_once"] != 0 {
		t.Errorf("%d requests executed twice", st["requests_processed_more_than_once"])
	}
	for _, o := range outs {
		if o.Error != nil && o.Error.Code == "below_minimum_batch" {
			t.Errorf("%s: %s", o.CustomID, o.Error.Message)
		}
	}
}

// TestBedrockLiveBatchesPerModel: Bedrock's quota of concurrent jobs is
// per model, and so is --max-live-batches: with a limit of 1 and two
// models of two jobs each, a job of each model runs at once (their
// submitted-to-ended times overlap), while two jobs of one model never do.
func TestBedrockLiveBatchesPerModel(t *testing.T) {
	t.Parallel()
	_, bucket := testsrv.S3(t)
	emu := startEmulator(t, "--batch-time", "1500ms", "--bedrock-min-records", "5")
	dir := t.TempDir()
	in, ids := writeBedrockMatrixInput(t, dir, 40)
	out := filepath.Join(dir, "out.jsonl")
	state := filepath.Join(dir, "state")
	r := runSluiceWithin(t, 2*time.Minute, bedrockEnv(emu.addr, matrixKey, bucket), "run", in, "--out", out,
		"--provider", "bedrock", "--state", state, "--model-map", bedrockModelMap, "--min-batch-requests", "5",
		"--max-batch-requests", "10", "--max-live-batches", "1", "--poll-interval", "20ms", "--max-poll-interval", "100ms")
	if r.code != exitOK {
		t.Fatalf("exit %d\n%s", r.code, lastBytes(r.stderr, 3000))
	}
	checkOutput(t, out, ids)
	if n := emu.stats(t)["batches_created"]; n != 4 {
		t.Fatalf("%d jobs created, want 4 (two per model)", n)
	}
	models := chunkColumn[string](t, state, "model", "1")
	from, to := chunkColumn[int64](t, state, "submitted_at", "1"), chunkColumn[int64](t, state, "ended_at", "1")
	across := false
	for i := range models {
		for j := i + 1; j < len(models); j++ {
			overlap := from[i] < to[j] && from[j] < to[i]
			if overlap && models[i] == models[j] {
				t.Errorf("two jobs of %s live at once under --max-live-batches 1", models[i])
			}
			across = across || overlap && models[i] != models[j]
		}
	}
	if !across {
		t.Errorf("no jobs of the two models live at once: --max-live-batches counted every model's jobs (submitted %v, ended %v, models %v)", from, to, models)
	}
}
