package vertex_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/internal/testsrv"
	"github.com/sluice-batch/sluice/objstore"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
	"github.com/sluice-batch/sluice/provider/vertex"
)

func TestDecodeLine(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		id         string
		kind       sluice.ResultKind
		code       string // error code; "" for a success
		bad        bool   // malformed
	}{
		{name: "success", line: `{"key":"sluice:a1","status":"","processed_time":"x","request":{},"response":{"candidates":[],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":4}}}`,
			id: "a1", kind: sluice.ResultSucceeded},
		{name: "custom_id that looks like a number", line: `{"key":"sluice:007","status":"","response":{}}`, id: "007", kind: sluice.ResultSucceeded},
		{name: "400", line: `{"key":"sluice:b","status":"Bad Request: {\"error\": {\"code\": 400, \"message\": \"Please use a valid role: user, model.\", \"status\": \"INVALID_ARGUMENT\"}}","request":{}}`,
			id: "b", kind: sluice.ResultFailed, code: "INVALID_ARGUMENT"},
		{name: "429", line: `{"key":"sluice:c","status":"Too Many Requests: {\"error\": {\"code\": 429, \"message\": \"quota\", \"status\": \"RESOURCE_EXHAUSTED\"}}"}`,
			id: "c", kind: sluice.ResultRetryable, code: "RESOURCE_EXHAUSTED"},
		{name: "500 without a status name", line: `{"key":"sluice:d","status":"Internal: {\"error\": {\"code\": 500, \"message\": \"x\"}}"}`,
			id: "d", kind: sluice.ResultRetryable, code: "INTERNAL"},
		{name: "status that does not parse", line: `{"key":"sluice:e","status":"something broke"}`, id: "e", kind: sluice.ResultFailed, code: "UNKNOWN"},
		{name: "a key sluice did not write", line: `{"key":"e","status":"","response":{}}`, bad: true},
		{name: "a key coerced to a number", line: `{"key":7,"status":"","response":{}}`, bad: true},
		{name: "no key", line: `{"status":"","response":{}}`, bad: true},
		{name: "neither response nor status", line: `{"key":"sluice:f"}`, bad: true},
		{name: "a response with an error status", line: `{"key":"sluice:g","status":"Bad Request: {\"error\": {\"code\": 400, \"message\": \"m\"}}","response":{}}`,
			id: "g", kind: sluice.ResultFailed, code: "INVALID_ARGUMENT"},
		{name: "not JSON", line: `{"key":`, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := vertex.DecodeLine([]byte(tc.line))
			if tc.bad {
				if err == nil {
					t.Fatalf("decoded %+v, want an error", r)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.CustomID != tc.id || r.Line.CustomID != tc.id || r.Kind != tc.kind {
				t.Fatalf("got %s %v, want %s %v", r.CustomID, r.Kind, tc.id, tc.kind)
			}
			if tc.code == "" && (r.Line.Response == nil || r.Line.Response.StatusCode != 200 || r.Line.Error != nil) {
				t.Fatalf("success decoded as %+v", r.Line)
			}
			if tc.code != "" && (r.Line.Error == nil || string(r.Line.Error.Code) != tc.code || r.Line.Response != nil) {
				t.Fatalf("error decoded as %+v", r.Line)
			}
		})
	}
	r, _ := vertex.DecodeLine([]byte(`{"key":"sluice:u","status":"","response":{"usageMetadata":{"promptTokenCount":3,"toolUsePromptTokenCount":1,"candidatesTokenCount":4,"thoughtsTokenCount":2}}}`))
	if r.Usage != (sluice.Usage{InputTokens: 4, OutputTokens: 6}) {
		t.Fatalf("usage %+v", r.Usage)
	}
}

// rig is an in-process emulator whose Vertex family reads and writes the
// test GCS server, and a client of it.
type rig struct {
	ts     *httptest.Server
	c      *vertex.Client
	bucket string
	store  *objstore.GCS
}

func newRig(t *testing.T) *rig {
	t.Helper()
	host, bucket := testsrv.GCS(t)
	srv, err := emulator.New(emulator.Options{APIKey: "ya29.right", VertexMinBatchTime: 100 * time.Millisecond, GCSHost: host, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { ts.Close(); srv.Close() })
	c, err := vertex.New(context.Background(), vertex.Config{Project: "p1", Location: "us-central1", Bucket: "gs://" + bucket + "/pre",
		GCS:    objstore.GCSOptions{Emulator: host},
		Config: provider.Config{BaseURL: ts.URL, APIKey: "ya29.right", Retry: httpx.Retry{MaxAttempts: 2}, RateLimit: httpx.RateLimit{PerSecond: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	store, err := objstore.NewGCS(context.Background(), bucket, "", objstore.GCSOptions{Emulator: host})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{ts: ts, c: c, bucket: bucket, store: store}
}

// chunk writes a chunk file of n requests (custom_ids id-0…) through the
// Vertex codec and returns its ref.
func chunk(t *testing.T, n int, digest string) sluice.BatchRef {
	t.Helper()
	codec := provider.Presets["vertex"].Codec()
	var b []byte
	for i := range n {
		it := &sluice.Item{CustomID: fmt.Sprintf("id-%d", i), URL: "/v1beta/models/gemini-2.5-flash:generateContent",
			Body: fmt.Appendf(nil, `{"contents":[{"role":"user","parts":[{"text":"question %d"}]}]}`, i)}
		if err := codec.Validate(it); err != nil {
			t.Fatal(err)
		}
		var err error
		if b, err = codec.AppendItem(b, it); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(t.TempDir(), "chunk.jsonl")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return sluice.BatchRef{Job: "job1", Chunk: 3, Attempt: 1, Digest: digest, Path: p, Bytes: int64(len(b)),
		Model: "gemini-2.5-flash", Requests: n}
}

func reverse(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

// TestRoundTripMapsByKey: a chunk uploaded, its job created, polled to
// the end, its predictions (in another order than the input's) fetched
// and decoded: each custom_id gets the answer to its own request; then
// Forget leaves nothing under the chunk's prefix.
func TestRoundTripMapsByKey(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	const n = 40
	ref := chunk(t, n, "0123456789abcdef0123456789abcdef")
	fileID, err := r.c.Upload(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	ref.FileID = fileID
	b, err := r.c.Create(ctx, ref, fileID)
	if err != nil {
		t.Fatal(err)
	}
	if b.Status != sluice.BatchValidating || !strings.HasPrefix(b.ID, "projects/p1/locations/us-central1/batchPredictionJobs/") {
		t.Fatalf("created %+v", b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for b.Status != sluice.BatchCompleted {
		if time.Now().After(deadline) {
			t.Fatalf("the job did not complete: %+v", b)
		}
		time.Sleep(20 * time.Millisecond) // the poll interval
		if b, err = r.c.Poll(ctx, ref, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	if b.Completed != n || b.OutputFileID == "" {
		t.Fatalf("completed %+v", b)
	}
	files, err := r.c.Fetch(ctx, ref, b, t.TempDir())
	if err != nil || len(files) != 1 {
		t.Fatalf("fetch: %v %v", files, err)
	}
	seen := map[string]bool{}
	var order []string
	err = r.c.Decode(ctx, ref, files, nil, func(res sluice.Result) error {
		var i int
		if _, err := fmt.Sscanf(res.CustomID, "id-%d", &i); err != nil || seen[res.CustomID] {
			return fmt.Errorf("unexpected custom_id %q", res.CustomID)
		}
		seen[res.CustomID] = true
		order = append(order, res.CustomID)
		if res.Kind != sluice.ResultSucceeded || !bytes.Contains(res.Line.Response.Body, []byte(reverse(fmt.Sprintf("question %d", i)))) {
			return fmt.Errorf("%s: not the answer to its own request: %s", res.CustomID, res.Line.Response.Body)
		}
		return nil
	})
	if err != nil || len(seen) != n {
		t.Fatalf("decode: %d results, %v", len(seen), err)
	}
	if order[0] == "id-0" && order[1] == "id-1" && order[2] == "id-2" {
		t.Error("predictions came in input order; the emulator shuffles them")
	}
	if err := r.c.Forget(ctx, ref, fileID, b.OutputFileID); err != nil {
		t.Fatal(err)
	}
	var left []string
	r.store.List(ctx, "", func(in objstore.Info) error { left = append(left, in.Key); return nil })
	if len(left) != 0 {
		t.Fatalf("objects left after Forget: %v", left)
	}
	// A cancel of the ended job reads it.
	if b2, err := r.c.Cancel(ctx, b.ID); err != nil || b2.Status != sluice.BatchCompleted {
		t.Fatalf("cancel of an ended job: %+v %v", b2, err)
	}
}

// TestFindAdoptsOnlyOnContentProof: after a crash, Find adopts the job and
// the file made for a chunk's exact bytes, and nothing else: not a job of
// another digest, not a job with the chunk's name whose input is another
// object, not an object of the chunk's name with another size.
func TestFindAdoptsOnlyOnContentProof(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	ref := chunk(t, 5, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	fileID, err := r.c.Upload(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	// Only the file so far: adopted by its name (digest) and size.
	if f, b, err := r.c.Find(ctx, ref); err != nil || f != fileID || b != "" {
		t.Fatalf("Find after the upload: %q %q %v", f, b, err)
	}
	created, err := r.c.Create(ctx, ref, fileID)
	if err != nil {
		t.Fatal(err)
	}
	if f, b, err := r.c.Find(ctx, ref); err != nil || f != fileID || b != created.ID {
		t.Fatalf("Find after the create: %q %q %v, want %q %q", f, b, err, fileID, created.ID)
	}
	// The same chunk with other bytes (another digest) adopts nothing.
	other := ref
	other.Digest = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	if f, b, err := r.c.Find(ctx, other); err != nil || f != "" || b != "" {
		t.Fatalf("Find of another digest: %q %q %v", f, b, err)
	}
	// The tracker knows another file id: the job made from fileID is not it.
	known := ref
	known.FileID = "gs://" + r.bucket + "/pre/elsewhere.jsonl"
	if _, b, err := r.c.Find(ctx, known); err != nil || b != "" {
		t.Fatalf("Find with another known file: %q %v", b, err)
	}
	// A job named as a third chunk's but made from some other object is not
	// adopted, and an object under that chunk's name with another size is
	// not either.
	third := chunk(t, 7, "cccccccccccccccccccccccccccccccc")
	third.Chunk = 4
	body := fmt.Sprintf(`{"displayName":%q,"model":"publishers/google/models/gemini-2.5-flash",
		"inputConfig":{"instancesFormat":"jsonl","gcsSource":{"uris":[%q]}},
		"outputConfig":{"predictionsFormat":"jsonl","gcsDestination":{"outputUriPrefix":"gs://%s/x"}}}`,
		vertex.DisplayName(third), fileID, r.bucket)
	req, _ := http.NewRequest(http.MethodPost, r.ts.URL+"/v1/projects/p1/locations/us-central1/batchPredictionJobs", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer ya29.right")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("create by hand: %v %v", resp, err)
	}
	resp.Body.Close()
	if err := r.store.Put(ctx, "pre/sluice-job1-c4/"+provider.UploadName(third), strings.NewReader("short\n")); err != nil {
		t.Fatal(err)
	}
	if f, b, err := r.c.Find(ctx, third); err != nil || f != "" || b != "" {
		t.Fatalf("Find adopted what was not made from the chunk's bytes: %q %q %v", f, b, err)
	}
}

// TestWrongTokenIsUnauthorized: a refused token is a 401, which stops a
// run (exit 1), not a failed chunk.
func TestWrongTokenIsUnauthorized(t *testing.T) {
	r := newRig(t)
	c, err := vertex.New(context.Background(), vertex.Config{Project: "p1", Location: "us-central1", Bucket: "gs://" + r.bucket + "/pre",
		Config: provider.Config{BaseURL: r.ts.URL, APIKey: "ya29.wrong", Retry: httpx.Retry{MaxAttempts: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Poll(context.Background(), sluice.BatchRef{}, "projects/p1/locations/us-central1/batchPredictionJobs/1")
	var ae *sluice.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized || strings.Contains(err.Error(), "ya29.wrong") {
		t.Fatalf("wrong token: %v", err)
	}
}

// TestCancelRunningJob: a job cancelled while it runs reads CANCELLED,
// and a second cancel (an ended job) just reads it again.
func TestCancelRunningJob(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	ref := chunk(t, 5, "dddddddddddddddddddddddddddddddd")
	fileID, err := r.c.Upload(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.c.Create(ctx, ref, fileID)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []sluice.BatchStatus{sluice.BatchCancelled, sluice.BatchCancelled} {
		if b, err = r.c.Cancel(ctx, b.ID); err != nil || b.Status != want {
			t.Fatalf("cancel: %+v %v, want %s", b, err, want)
		}
	}
}

// TestMapState: every JobState maps as the service means it;
// PARTIALLY_SUCCEEDED has ended with predictions to read.
func TestMapState(t *testing.T) {
	for in, want := range map[string]sluice.BatchStatus{
		"JOB_STATE_PENDING": sluice.BatchValidating, "JOB_STATE_QUEUED": sluice.BatchValidating,
		"JOB_STATE_RUNNING": sluice.BatchInProgress, "JOB_STATE_UPDATING": sluice.BatchInProgress,
		"JOB_STATE_SUCCEEDED": sluice.BatchCompleted, "JOB_STATE_PARTIALLY_SUCCEEDED": sluice.BatchCompleted,
		"JOB_STATE_FAILED": sluice.BatchFailed, "JOB_STATE_CANCELLING": sluice.BatchCancelling,
		"JOB_STATE_CANCELLED": sluice.BatchCancelled, "JOB_STATE_EXPIRED": sluice.BatchExpired,
		"job_state_partially_succeeded": sluice.BatchCompleted, "": sluice.BatchInProgress,
	} {
		if got := vertex.MapState(in); got != want {
			t.Errorf("MapState(%q) = %s, want %s", in, got, want)
		}
	}
}
