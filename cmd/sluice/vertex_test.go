package main

import (
	"context"
	"strings"
	"sync"
	"testing"

	"cloud.google.com/go/storage"
	"google.golang.org/api/iterator"

	"github.com/sluice-batch/sluice/internal/testsrv"
)

// The Vertex AI row of the provider matrix: Gemini lines, the emulator's
// Vertex family at the root of its port, Cloud Storage on the test GCS
// server (fake-gcs-server at STORAGE_EMULATOR_HOST, which the emulator
// and sluice both read).

// writeVertexInput starts the test GCS server (so that STORAGE_EMULATOR_HOST
// is in the environment of the emulator started next) and writes Gemini
// lines.
func writeVertexInput(t *testing.T, dir string, n int) (string, []string) {
	t.Helper()
	testsrv.GCS(t)
	return writeGeminiInput(t, dir, n)
}

var vertexBuckets sync.Map // emulator address -> bucket

// vertexEnv reaches the emulator at addr with key as the OAuth2 token,
// with one bucket per emulator (a run with a wrong key and the re-run
// with the right one share it).
func vertexEnv(addr, key string) []string {
	b, ok := vertexBuckets.Load(addr)
	if !ok {
		_, bucket, err := testsrv.NewGCSBucket()
		if err != nil {
			panic(err)
		}
		b, _ = vertexBuckets.LoadOrStore(addr, bucket)
	}
	return append([]string{"GOOGLE_OAUTH_ACCESS_TOKEN=" + key, "GOOGLE_VERTEX_BASE_URL=http://" + addr,
		"GOOGLE_CLOUD_PROJECT=matrix-project", "GOOGLE_CLOUD_LOCATION=us-central1",
		"SLUICE_VERTEX_BUCKET=gs://" + b.(string) + "/sluice"}, testsrv.GCSEnv()...)
}

// checkVertexBucketEmpty fails when the run left objects under the
// bucket prefix of env (chunk files, predictions).
func checkVertexBucketEmpty(t *testing.T, why string, env []string) {
	t.Helper()
	var bucket string
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "SLUICE_VERTEX_BUCKET=gs://"); ok {
			bucket, _, _ = strings.Cut(v, "/")
		}
	}
	c, err := storage.NewClient(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var left []string
	it := c.Bucket(bucket).Objects(context.Background(), &storage.Query{})
	for {
		a, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, a.Name)
	}
	if len(left) != 0 {
		t.Errorf("%s: %d objects left in gs://%s: %v", why, len(left), bucket, left)
	}
}
