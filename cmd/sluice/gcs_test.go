package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cloud.google.com/go/storage"
	"google.golang.org/api/iterator"

	"github.com/sluice-batch/sluice/internal/testsrv"
)

// gcsBucket is a fresh bucket on the test GCS server (fake-gcs-server),
// the environment a sluice subprocess needs to reach it
// (STORAGE_EMULATOR_HOST), and a plain client of the official library.
type gcsBucket struct {
	name   string
	env    []string
	client *storage.Client
}

func newGCSBucket(t *testing.T) *gcsBucket {
	t.Helper()
	_, bucket := testsrv.GCS(t)
	c, err := storage.NewClient(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &gcsBucket{name: bucket, env: testsrv.GCSEnv(), client: c}
}

func (b *gcsBucket) url(key string) string { return "gs://" + b.name + "/" + key }

func (b *gcsBucket) put(t *testing.T, key string, data []byte) {
	t.Helper()
	w := b.client.Bucket(b.name).Object(key).NewWriter(context.Background())
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// get returns the object under key, or false when there is none.
func (b *gcsBucket) get(t *testing.T, key string) ([]byte, bool) {
	t.Helper()
	r, err := b.client.Bucket(b.name).Object(key).NewReader(context.Background())
	if errors.Is(err, storage.ErrObjectNotExist) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return data, true
}

func (b *gcsBucket) keys(t *testing.T, prefix string) []string {
	t.Helper()
	var keys []string
	it := b.client.Bucket(b.name).Objects(context.Background(), &storage.Query{Prefix: prefix})
	for {
		a, err := it.Next()
		if err == iterator.Done {
			return keys
		}
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, a.Name)
	}
}

// TestGCSRunMatchesLocal: `sluice run gs://…/in.jsonl --out gs://…/out.jsonl
// --store gs://…/state` (Cloud Storage through the official client, at
// STORAGE_EMULATOR_HOST) writes the same output as the same run on local
// files and keeps the job's chunk and results files in the bucket.
func TestGCSRunMatchesLocal(t *testing.T) {
	t.Parallel()
	b := newGCSBucket(t)
	dir := t.TempDir()
	in, ids := writeInput(t, dir, 300)
	data, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	b.put(t, "inputs/in.jsonl", data)

	localEmu, gcsEmu := startEmulator(t), startEmulator(t)
	localOut := filepath.Join(dir, "out.jsonl")
	env := append([]string{"OPENAI_API_KEY=sk-test", "SLUICE_STATE=" + filepath.Join(dir, "local-state")}, b.env...)
	if r := runSluice(t, env, openAIRun(localEmu, in, localOut)...); r.code != 0 {
		t.Fatalf("local run: exit %d\n%s", r.code, r.stderr)
	}
	env = append([]string{"OPENAI_API_KEY=sk-test", "SLUICE_STATE=" + filepath.Join(dir, "gcs-state")}, b.env...)
	r := runSluice(t, env, openAIRun(gcsEmu, b.url("inputs/in.jsonl"), b.url("out/out.jsonl"), "--store", b.url("state"))...)
	if r.code != 0 {
		t.Fatalf("gcs run: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "output: "+b.url("out/out.jsonl")) {
		t.Errorf("the summary does not name the output object:\n%s", r.stdout)
	}
	got, ok := b.get(t, "out/out.jsonl")
	if !ok {
		t.Fatal("no output object")
	}
	want, _ := os.ReadFile(localOut)
	gotPath := filepath.Join(dir, "gcs-out.jsonl")
	writeFile(t, gotPath, got)
	checkOutput(t, gotPath, ids)
	if !bytes.Equal(normalizeIDs(got), normalizeIDs(want)) {
		t.Fatalf("the output from GCS differs from the local run's (%d and %d bytes)", len(got), len(want))
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
	if chunks != 3 || results != 3 {
		t.Fatalf("the bucket holds %d chunk files and %d results files, want 3 and 3: %v", chunks, results, b.keys(t, "state/"))
	}
	if again, _ := b.get(t, "inputs/in.jsonl"); !bytes.Equal(again, data) {
		t.Fatal("the input object changed")
	}
	// A bucket that does not exist is bad usage (2), told before any work.
	r = runSluice(t, env, openAIRun(gcsEmu, b.url("inputs/in.jsonl"), "gs://no-such-bucket-"+b.name+"/out.jsonl")...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "no such bucket") {
		t.Fatalf("missing bucket: exit %d\n%s", r.code, r.stderr)
	}
}
