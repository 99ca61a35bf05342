package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/sluice-batch/sluice/internal/testsrv"
	"github.com/sluice-batch/sluice/tracker"
)

// s3Bucket is a fresh bucket on the test S3 server, the environment a
// sluice subprocess needs to reach it, and a plain SDK client.
type s3Bucket struct {
	name   string
	env    []string
	client *s3.Client
}

func newS3Bucket(t *testing.T) *s3Bucket {
	t.Helper()
	ep, bucket := testsrv.S3(t)
	c, err := testsrv.S3Client(context.Background(), ep)
	if err != nil {
		t.Fatal(err)
	}
	return &s3Bucket{name: bucket, env: testsrv.S3Env(), client: c}
}

func (b *s3Bucket) url(key string) string { return "s3://" + b.name + "/" + key }

func (b *s3Bucket) put(t *testing.T, key string, data []byte) {
	t.Helper()
	if _, err := b.client.PutObject(context.Background(), &s3.PutObjectInput{Bucket: &b.name, Key: &key, Body: bytes.NewReader(data)}); err != nil {
		t.Fatal(err)
	}
}

// putInput writes n requests to in.jsonl in dir (writeInput) and puts
// them under the key in.jsonl.
func (b *s3Bucket) putInput(t *testing.T, dir string, n int) (data []byte, ids []string) {
	t.Helper()
	in, ids := writeInput(t, dir, n)
	data, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	b.put(t, "in.jsonl", data)
	return data, ids
}

// download writes the object under key to a file of that name in dir and
// returns its path, or false when there is no such object.
func (b *s3Bucket) download(t *testing.T, key, dir string) (string, bool) {
	t.Helper()
	got, ok := b.get(t, key)
	if !ok {
		return "", false
	}
	p := filepath.Join(dir, key)
	writeFile(t, p, got)
	return p, true
}

// get returns the object under key, or false when there is none.
func (b *s3Bucket) get(t *testing.T, key string) ([]byte, bool) {
	t.Helper()
	out, err := b.client.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &b.name, Key: &key})
	var nk *types.NoSuchKey
	if errors.As(err, &nk) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return data, true
}

func (b *s3Bucket) keys(t *testing.T, prefix string) []string {
	t.Helper()
	var keys []string
	p := s3.NewListObjectsV2Paginator(b.client, &s3.ListObjectsV2Input{Bucket: &b.name, Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys
}

// openAIRun is a run against the emulator's OpenAI API, small chunks,
// quick polls.
func openAIRun(emu *emulatorProc, in, out string, more ...string) []string {
	return append([]string{"run", in, "--out", out, "--provider", "openai", "--base-url", "http://" + emu.addr + "/v1",
		"--max-batch-requests", "100", "--poll-interval", "20ms", "--max-poll-interval", "200ms", "--rate", "-1"}, more...)
}

// TestS3RunMatchesLocal: `sluice run s3://…/in.jsonl --out s3://…/out.jsonl
// --store s3://…/state` writes the same output as the same run on local
// files, keeps the job's chunk and results files in the store, and puts
// the output under its key only whole.
func TestS3RunMatchesLocal(t *testing.T) {
	t.Parallel()
	testRunMatchesLocal(t, newS3Bucket(t), 600)
}

// bucketFixture is a fresh bucket of a test object store (S3, GCS), the
// environment a sluice subprocess needs to reach it, and plain SDK calls.
type bucketFixture interface {
	url(key string) string
	put(t *testing.T, key string, data []byte)
	get(t *testing.T, key string) ([]byte, bool)
	keys(t *testing.T, prefix string) []string
	environ() []string
}

func (b *s3Bucket) environ() []string { return b.env }

// testRunMatchesLocal runs n requests twice, on local files and with input,
// output and --store in the bucket, and compares: the same output, an
// errors file beside it, one chunk and one results file per 100 requests
// in the store, nothing executed twice, the input object untouched.
func testRunMatchesLocal(t *testing.T, b bucketFixture, n int) {
	dir := t.TempDir()
	in, ids := writeInput(t, dir, n)
	data, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	b.put(t, "inputs/in.jsonl", data)

	localEmu, bucketEmu := startEmulator(t), startEmulator(t)
	localOut := filepath.Join(dir, "out.jsonl")
	env := append([]string{"OPENAI_API_KEY=sk-test", "SLUICE_STATE=" + filepath.Join(dir, "local-state")}, b.environ()...)
	if r := runSluice(t, env, openAIRun(localEmu, in, localOut)...); r.code != 0 {
		t.Fatalf("local run: exit %d\n%s", r.code, r.stderr)
	}
	env = append([]string{"OPENAI_API_KEY=sk-test", "SLUICE_STATE=" + filepath.Join(dir, "bucket-state")}, b.environ()...)
	r := runSluice(t, env, openAIRun(bucketEmu, b.url("inputs/in.jsonl"), b.url("out/out.jsonl"), "--store", b.url("state"))...)
	if r.code != 0 {
		t.Fatalf("bucket run: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "output: "+b.url("out/out.jsonl")) {
		t.Errorf("the summary does not name the output object:\n%s", r.stdout)
	}
	got, ok := b.get(t, "out/out.jsonl")
	if !ok {
		t.Fatal("no output object")
	}
	want, _ := os.ReadFile(localOut)
	gotPath := filepath.Join(dir, "bucket-out.jsonl")
	writeFile(t, gotPath, got)
	checkOutput(t, gotPath, ids)
	if !bytes.Equal(normalizeIDs(got), normalizeIDs(want)) {
		t.Fatalf("the output from the bucket differs from the local run's (%d and %d bytes)", len(got), len(want))
	}
	if _, ok := b.get(t, "out/out.errors.jsonl"); !ok {
		t.Error("no errors file beside the output object")
	}
	var chunks, results int
	for _, k := range b.keys(t, "state/jobs/") {
		switch {
		case strings.Contains(k, "/chunks/c"):
			chunks++
		case strings.Contains(k, "/results/c"):
			results++
		}
	}
	if wantN := n / 100; chunks != wantN || results != wantN {
		t.Fatalf("the store holds %d chunk files and %d results files, want %d and %d: %v", chunks, results, wantN, wantN, b.keys(t, "state/"))
	}
	if st := bucketEmu.stats(t); st["requests_processed_more_than_once"] != 0 {
		t.Fatalf("emulator stats: %v", st)
	}
	// The input object is untouched.
	if again, _ := b.get(t, "inputs/in.jsonl"); !bytes.Equal(again, data) {
		t.Fatal("the input object changed")
	}
}

// normalizeIDs blanks what differs between two emulators' answers to the
// same requests: batch, request and response ids.
func normalizeIDs(b []byte) []byte {
	return idField.ReplaceAll(b, []byte(`"$1":"X"`))
}

// TestS3ResumeOnEmptyStateDir: a run with --store s3://… is SIGKILLed
// mid-job; a second run on another, empty state directory (the tracker
// carried over, as a shared database would be; the first directory gone)
// fetches the chunk and results files it lacks from the store and finishes
// the job without buying any request twice.
//
// Both kinds of store: a prefix in S3 and a shared directory (the input
// and output in S3 either way).
func TestS3ResumeOnEmptyStateDir(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"s3", "dir"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testResumeOnEmptyStateDir(t, kind)
		})
	}
}

func testResumeOnEmptyStateDir(t *testing.T, kind string) {
	b := newS3Bucket(t)
	dir := t.TempDir()
	store, storedResults := b.url("state"), func() int {
		n := 0
		for _, k := range b.keys(t, "state/jobs/") {
			if strings.Contains(k, "/results/c") {
				n++
			}
		}
		return n
	}
	if kind == "dir" {
		store = filepath.Join(dir, "shared")
		storedResults = func() int {
			m, _ := filepath.Glob(filepath.Join(store, "jobs", "*", "*", "results", "c*.results")) // jobs/JOB/PLAN
			return len(m)
		}
	}
	in, ids := writeInput(t, dir, 600)
	data, _ := os.ReadFile(in)
	// A bad line, rejected by --skip-invalid: its record is a file of the
	// plan (rejected.results) that the merge needs too.
	data = append(data, `{"custom_id":"bad1","method":"GET","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini"}}`+"\n"...)
	ids = append(ids, "bad1")
	b.put(t, "in.jsonl", data)
	emu := startEmulator(t, "--batch-time", "700ms")
	first := filepath.Join(dir, "first")
	args := openAIRun(emu, b.url("in.jsonl"), b.url("out.jsonl"), "--store", store,
		"--max-live-batches", "2", "--reconcile-grace", "300ms", "--skip-invalid")
	cmd := sluiceCmd(append([]string{"OPENAI_API_KEY=sk-test", "SLUICE_STATE=" + first}, b.env...), args...)
	// Kill once some chunks are concluded (their results in the store) and
	// others not.
	killWhen(t, cmd, "a results file in the store", func() bool { return storedResults() >= 1 })
	before := emu.stats(t)["batches_created"]
	if before >= 6 {
		t.Fatalf("every batch was created before the kill (%d)", before)
	}
	if _, ok := b.get(t, "out.jsonl"); ok {
		t.Fatal("an output object exists after a run killed mid-job")
	}

	// The tracker moves to a new, empty state directory; the old one goes.
	second := filepath.Join(dir, "second")
	moveTracker(t, first, second)
	env := append([]string{"OPENAI_API_KEY=sk-test", "SLUICE_STATE=" + second}, b.env...)
	// Another store than the plan's is refused before any work.
	wrong := append([]string{}, args...)
	for i := range wrong {
		if wrong[i] == store {
			wrong[i] = b.url("elsewhere")
		}
	}
	if r := runSluice(t, env, wrong...); r.code != exitUsage || !strings.Contains(r.stderr, "planned with another --store") {
		t.Fatalf("a run with another --store: exit %d, want 2\n%s", r.code, r.stderr)
	}
	r := runSluice(t, env, args...)
	if r.code != exitFailures {
		t.Fatalf("second run: exit %d, want 4 (one line rejected)\n%s", r.code, r.stderr)
	}
	p, ok := b.download(t, "out.jsonl", dir)
	if !ok {
		t.Fatal("no output object after the second run")
	}
	checkOutput(t, p, ids)
	if _, err := os.Stat(first); err == nil {
		t.Fatal("the second run recreated the first state directory")
	}
	st := emu.stats(t)
	if st["requests_processed_more_than_once"] != 0 || st["batches_created"] != 6 || st["requests_processed"] != 600 {
		t.Fatalf("want 6 batches, 600 requests each processed once; emulator stats: %v", st)
	}
	// Every chunk and results file the second run used came from the store.
	chunkFiles, _ := filepath.Glob(filepath.Join(second, "jobs", "*", "chunks", "c*"))
	resultFiles, _ := filepath.Glob(filepath.Join(second, "jobs", "*", "results", "c*.results"))
	if len(chunkFiles) == 0 || len(resultFiles) != 6 {
		t.Fatalf("the second state directory holds %d chunk files and %d results files, want some and 6", len(chunkFiles), len(resultFiles))
	}
}

// TestS3BadConfiguration: an endpoint out of reach, a bucket that does not
// exist, refused credentials, a missing input object and --out naming the
// input are told clearly, with README's exit code, before any work (no job
// planned), and no secret is printed.
func TestS3BadConfiguration(t *testing.T) {
	t.Parallel()
	b := newS3Bucket(t)
	dir := t.TempDir()
	b.putInput(t, dir, 10)
	secret := os.Getenv("AWS_SECRET_ACCESS_KEY")
	cases := []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"unreachable endpoint", []string{"AWS_ENDPOINT_URL_S3=http://127.0.0.1:1"},
			[]string{b.url("in.jsonl"), "--out", filepath.Join(dir, "o.jsonl")}, exitError, "cannot reach the endpoint"},
		{"missing bucket", nil,
			[]string{"s3://no-such-bucket-sluice/in.jsonl", "--out", filepath.Join(dir, "o.jsonl")}, exitUsage, "no such bucket"},
		{"missing bucket for --out", nil,
			[]string{b.url("in.jsonl"), "--out", "s3://no-such-bucket-sluice/out.jsonl"}, exitUsage, "no such bucket"},
		{"missing bucket for --store", nil,
			[]string{b.url("in.jsonl"), "--out", filepath.Join(dir, "o.jsonl"), "--store", "s3://no-such-bucket-sluice/state"}, exitUsage, "no such bucket"},
		{"wrong secret", []string{"AWS_SECRET_ACCESS_KEY=wrong-" + secret},
			[]string{b.url("in.jsonl"), "--out", filepath.Join(dir, "o.jsonl")}, exitError, "credentials were refused"},
		{"missing input object", nil,
			[]string{b.url("nothing.jsonl"), "--out", filepath.Join(dir, "o.jsonl")}, exitUsage, "no such object"},
		{"--out is the input", nil,
			[]string{b.url("in.jsonl"), "--out", b.url("in.jsonl")}, exitUsage, "never writes over its input"},
		{"--out is a bucket", nil,
			[]string{b.url("in.jsonl"), "--out", "s3://" + b.name}, exitUsage, "name an object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "state")
			env := append(append([]string{"OPENAI_API_KEY=sk-test", "SLUICE_STATE=" + state}, b.env...), c.env...)
			r := runSluice(t, env, append([]string{"run"}, append(c.args, "--provider", "openai", "--base-url", "http://127.0.0.1:1/v1")...)...)
			if r.code != c.code || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("exit %d, want %d with %q:\n%s", r.code, c.code, c.want, r.stderr)
			}
			if secret != "" && strings.Contains(r.stderr+r.stdout, secret) {
				t.Fatal("the secret access key was printed")
			}
			if _, err := os.Stat(filepath.Join(state, "jobs")); err == nil {
				t.Fatal("a job was planned")
			}
		})
	}
	if _, ok := b.get(t, "in.jsonl"); !ok {
		t.Fatal("the input object is gone")
	}
}

var idField = regexp.MustCompile(`"(id|request_id|batch_id|created)":("[^"]*"|[0-9]+)`)

// TestS3InputChanged: a job planned from an object is reused while the
// object is as it was (rewritten with the same bytes: the hash decides),
// and refused once its content changed; the built-in provider runs an
// s3:// input to an s3:// output.
func TestS3InputChanged(t *testing.T) {
	t.Parallel()
	b := newS3Bucket(t)
	dir := t.TempDir()
	data, ids := b.putInput(t, dir, 30)
	env := append([]string{"SLUICE_STATE=" + filepath.Join(dir, "state")}, b.env...)
	if r := runSluice(t, env, "plan", b.url("in.jsonl")); r.code != 0 {
		t.Fatalf("plan: exit %d\n%s", r.code, r.stderr)
	}
	time.Sleep(1100 * time.Millisecond) // LastModified has a resolution of a second
	b.put(t, "in.jsonl", data)
	if r := runSluice(t, env, "plan", b.url("in.jsonl")); r.code != 0 || !strings.Contains(r.stdout, "input unchanged") {
		t.Fatalf("plan of the object rewritten with the same bytes: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r := runSluice(t, env, "run", b.url("in.jsonl"), "--out", b.url("out.jsonl.zst"))
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	packed, ok := b.get(t, "out.jsonl.zst")
	if !ok {
		t.Fatal("no output object")
	}
	writeFile(t, filepath.Join(dir, "out.jsonl.zst"), packed)
	decompressZstd(t, filepath.Join(dir, "out.jsonl.zst"), filepath.Join(dir, "out.jsonl"))
	checkOutput(t, filepath.Join(dir, "out.jsonl"), ids)
	if _, ok := b.get(t, "out.errors.jsonl.zst"); !ok {
		t.Error("no errors object out.errors.jsonl.zst")
	}
	// The job is done: the same command again leaves the output object as
	// it is (README, "Overnight": no rewrite of a finished job's output).
	before, _ := b.client.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &b.name, Key: aws.String("out.jsonl.zst")})
	time.Sleep(1100 * time.Millisecond) // LastModified has a resolution of a second
	if r := runSluice(t, env, "run", b.url("in.jsonl"), "--out", b.url("out.jsonl.zst")); r.code != 0 || !strings.Contains(r.stderr, "output unchanged since") {
		t.Fatalf("run of the done job: exit %d\n%s", r.code, r.stderr)
	}
	after, _ := b.client.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &b.name, Key: aws.String("out.jsonl.zst")})
	if !aws.ToTime(after.LastModified).Equal(aws.ToTime(before.LastModified)) {
		t.Error("a run of the done job uploaded its output again")
	}

	changed := bytes.Replace(data, []byte("doc 0"), []byte("doc X"), 1)
	b.put(t, "in.jsonl", changed)
	r = runSluice(t, env, "plan", b.url("in.jsonl"))
	if r.code != exitUsage || !strings.Contains(r.stderr, "changed since job") {
		t.Fatalf("plan of a changed object: exit %d, want 2 naming the change\n%s", r.code, r.stderr)
	}
}

// TestS3CancelMergesToObject: a job with its input, output and files in
// S3 is left running (--once), then cancelled from another, empty state
// directory (the tracker carried over): the cancel finds the job's files
// in the store and merges the output object, one line per request.
func TestS3CancelMergesToObject(t *testing.T) {
	t.Parallel()
	b := newS3Bucket(t)
	emu := startEmulator(t, "--batch-time", "3s")
	dir := t.TempDir()
	_, ids := b.putInput(t, dir, 60)
	first := filepath.Join(dir, "first")
	env := append([]string{"OPENAI_API_KEY=sk-x", "SLUICE_STATE=" + first, "SLUICE_STORE=" + b.url("state")}, b.env...)
	r := runSluice(t, env, "run", b.url("in.jsonl"), "--out", b.url("out.jsonl"), "--provider", "openai",
		"--base-url", "http://"+emu.addr+"/v1", "--once", "--rate", "-1")
	if r.code != exitStopped {
		t.Fatalf("run --once: exit %d, want 3\n%s", r.code, r.stderr)
	}
	job := onlyJob(t, statusOf(t, env))
	second := filepath.Join(dir, "second")
	os.MkdirAll(second, 0o700)
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if data, err := os.ReadFile(filepath.Join(first, tracker.DBName+suffix)); err == nil {
			writeFile(t, filepath.Join(second, tracker.DBName+suffix), data)
		}
	}
	os.RemoveAll(first)
	env = append([]string{"OPENAI_API_KEY=sk-x", "SLUICE_STATE=" + second}, b.env...)
	r = runSluice(t, env, "cancel", job.ID, "--store", b.url("state"), "--base-url", "http://"+emu.addr+"/v1",
		"--poll-interval", "100ms", "--max-poll-interval", "200ms")
	if r.code != exitFailures && r.code != exitOK {
		t.Fatalf("cancel: exit %d\n%s", r.code, r.stderr)
	}
	p, ok := b.download(t, "out.jsonl", dir)
	if !ok {
		t.Fatalf("no output object after the cancel:\n%s", r.stdout)
	}
	checkOutput(t, p, ids)
}
