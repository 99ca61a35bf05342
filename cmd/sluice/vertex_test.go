package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// TestVertexHostileEmulator: against an emulator that corrupts, invents,
// duplicates, omits and fails prediction lines and expires jobs, every
// custom_id ends once, in input order, and every success is the answer to
// that request's own prompt: never another request's.
func TestVertexHostileEmulator(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, ids := writeVertexInput(t, dir, 60)
	emu := startEmulatorEnv(t, []string{"SLUICE_EMULATOR_API_KEY=" + matrixKey}, "--batch-time", "200ms", "--seed", "7",
		"--malformed-line-rate", "0.1", "--unknown-custom-id-rate", "0.1", "--duplicate-line-rate", "0.1",
		"--line-error-rate", "0.1", "--omit-rate", "0.1", "--expire-rate", "0.2", "--http-fault-rate", "0.05", "--retry-after", "10ms")
	out := filepath.Join(dir, "out.jsonl")
	r := runSluiceWithin(t, 2*time.Minute, vertexEnv(emu.addr, matrixKey), "run", in, "--out", out, "--provider", "vertex",
		"--state", filepath.Join(dir, "state"), "--max-batch-requests", "10", "--rate", "-1", "--max-attempts", "6",
		"--poll-interval", "20ms", "--max-poll-interval", "100ms")
	if r.code != 0 && r.code != exitFailures {
		t.Fatalf("exit %d\n%s", r.code, lastBytes(r.stderr, 3000))
	}
	succeeded := 0
	for i, o := range checkOutput(t, out, ids) {
		if o.Response == nil {
			continue
		}
		var body struct {
			Candidates []struct {
				Content struct{ Parts []struct{ Text string } }
			}
		}
		want := reverseString(fmt.Sprintf("question %d", i))
		if json.Unmarshal(o.Response.Body, &body) != nil || len(body.Candidates) != 1 ||
			!strings.Contains(body.Candidates[0].Content.Parts[0].Text, want) {
			t.Fatalf("%s: %s is not the answer to its own prompt (%q)", o.CustomID, o.Response.Body, want)
		}
		succeeded++
	}
	if succeeded < 30 {
		t.Errorf("only %d of 60 requests succeeded", succeeded)
	}
	st := emu.familyStats(t, "vertex")
	if st["batches_created"] < 7 {
		t.Errorf("vertex stats %v: want retries in new jobs", st)
	}
}

func reverseString(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

// TestVertexUsageErrors: what --provider vertex lacks is told before any
// work, with exit 2, naming the flag and the variable.
func TestVertexUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, _ := writeVertexInput(t, dir, 3)
	env := vertexEnv("127.0.0.1:9", "tok")
	_, bucket, _ := strings.Cut(env[4], "=gs://")
	bucket, _, _ = strings.Cut(bucket, "/")
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"no project", []string{"GOOGLE_CLOUD_PROJECT="}, nil, "--vertex-project or $GOOGLE_CLOUD_PROJECT"},
		{"no location", []string{"GOOGLE_CLOUD_LOCATION="}, nil, "--vertex-location or $GOOGLE_CLOUD_LOCATION"},
		{"no bucket", []string{"SLUICE_VERTEX_BUCKET="}, nil, "--vertex-bucket gs://BUCKET/PREFIX"},
		{"an s3 bucket", nil, []string{"--vertex-bucket", "s3://b/p"}, "want gs://BUCKET/PREFIX"},
		{"a missing bucket", nil, []string{"--vertex-bucket", "gs://no-such-" + bucket + "/p"}, "no such bucket"},
	} {
		r := runSluice(t, append(append([]string(nil), env...), tc.env...), append([]string{"run", in, "--out",
			filepath.Join(dir, "out.jsonl"), "--provider", "vertex", "--state", filepath.Join(dir, "state-"+strings.ReplaceAll(tc.name, " ", "-"))}, tc.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: exit %d, want 2 and %q\n%s", tc.name, r.code, tc.want, lastBytes(r.stderr, 2000))
		}
	}
}

// TestVertexApplicationDefaultCredentials: without
// $GOOGLE_OAUTH_ACCESS_TOKEN, sluice takes its token from Application
// Default Credentials: a service account key file
// (GOOGLE_APPLICATION_CREDENTIALS) whose token_uri is a token server on
// loopback, which hands out the token the emulator accepts. A key file
// that is not there is told before any work (exit 2).
func TestVertexApplicationDefaultCredentials(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, ids := writeVertexInput(t, dir, 12)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	var grants atomic.Int64
	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ParseForm() != nil || r.Form.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" || r.Form.Get("assertion") == "" {
			http.Error(w, "bad grant", http.StatusBadRequest)
			return
		}
		grants.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"ya29.from-adc","token_type":"Bearer","expires_in":3600}`)
	}))
	t.Cleanup(tokens.Close)
	sa, _ := json.Marshal(map[string]string{"type": "service_account", "project_id": "matrix-project",
		"private_key_id": "k1", "private_key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": "sluice@matrix-project.iam.gserviceaccount.com", "client_id": "1", "token_uri": tokens.URL + "/token"})
	saPath := filepath.Join(dir, "sa.json")
	writeFile(t, saPath, sa)

	emu := startEmulatorEnv(t, []string{"SLUICE_EMULATOR_API_KEY=ya29.from-adc"}, "--batch-time", "100ms")
	env := append(vertexEnv(emu.addr, ""), "GOOGLE_APPLICATION_CREDENTIALS="+saPath)
	out := filepath.Join(dir, "out.jsonl")
	args := []string{"run", in, "--out", out, "--provider", "vertex", "--state", filepath.Join(dir, "state"),
		"--rate", "-1", "--poll-interval", "20ms", "--max-poll-interval", "100ms"}
	r := runSluiceWithin(t, time.Minute, env, args...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, lastBytes(r.stderr, 3000))
	}
	checkOutput(t, out, ids)
	if grants.Load() == 0 {
		t.Fatal("no token was asked of the token server")
	}
	env = append(vertexEnv(emu.addr, ""), "GOOGLE_APPLICATION_CREDENTIALS="+filepath.Join(dir, "missing.json"))
	r = runSluiceWithin(t, time.Minute, env, append(args[:2:2], "--out", filepath.Join(dir, "out2.jsonl"), "--provider", "vertex",
		"--state", filepath.Join(dir, "state2"))...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "Application Default Credentials") {
		t.Fatalf("a missing key file: exit %d\n%s", r.code, lastBytes(r.stderr, 3000))
	}
}
