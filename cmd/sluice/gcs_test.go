package main

import (
	"context"
	"errors"
	"io"
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

func (b *gcsBucket) environ() []string { return b.env }

// TestGCSRunMatchesLocal: `sluice run gs://…/in.jsonl --out gs://…/out.jsonl
// --store gs://…/state` (Cloud Storage through the official client, at
// STORAGE_EMULATOR_HOST) writes the same output as the same run on local
// files and keeps the job's chunk and results files in the bucket; a
// bucket that does not exist is bad usage (2), told before any work.
func TestGCSRunMatchesLocal(t *testing.T) {
	t.Parallel()
	b := newGCSBucket(t)
	testRunMatchesLocal(t, b, 300)
	dir := t.TempDir()
	in, _ := writeInput(t, dir, 3)
	env := append([]string{"OPENAI_API_KEY=sk-test", "SLUICE_STATE=" + filepath.Join(dir, "state")}, b.env...)
	r := runSluice(t, env, openAIRun(startEmulator(t), in, "gs://no-such-bucket-"+b.name+"/out.jsonl")...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "no such bucket") {
		t.Fatalf("missing bucket: exit %d\n%s", r.code, r.stderr)
	}
}
