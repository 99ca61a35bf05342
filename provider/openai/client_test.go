package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/check"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/compat"
	"github.com/sluice-batch/sluice/provider/internal/ptest"
	"github.com/sluice-batch/sluice/provider/openai"
)

const testKey = "sk-test-key-123456"

func newClient(t *testing.T, preset, base string, mod ...func(*openai.Config)) *openai.Client {
	t.Helper()
	p, err := provider.Lookup(preset)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ptest.Config(base, testKey)
	cfg.Preset = p
	return ptest.Client(t, openai.New, openai.Config{Config: cfg}, mod...)
}

// writeChunk writes a chunk file of the given custom_ids and returns its
// ref.
func writeChunk(t *testing.T, job string, chunk int64, attempt int, ids ...string) sluice.BatchRef {
	t.Helper()
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi %s"}]}}`+"\n", id, id)
	}
	path := filepath.Join(t.TempDir(), fmt.Sprintf("chunk-%d-%d.jsonl", chunk, attempt))
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	dg, err := sluice.ChunkDigest(path)
	if err != nil {
		t.Fatal(err)
	}
	return sluice.BatchRef{Job: job, Chunk: chunk, Attempt: attempt, URL: "/v1/chat/completions", Model: "gpt-4o-mini",
		Path: path, Requests: len(ids), Bytes: int64(b.Len()), IntentAt: time.Now(), Digest: dg}
}

func TestFullCycle(t *testing.T) {
	f, base := newFake(t)
	c := newClient(t, "openai", base)
	ref := writeChunk(t, "job-1", 3, 1, "a", "b", "fail-1", "exp-1", "slow-1")
	b, got := ptest.Cycle(t, c, ref)
	if b.Status != sluice.BatchCompleted || b.Total != 5 || b.Completed != 2 || b.Failed != 3 {
		t.Fatalf("batch %+v", b)
	}
	want := map[string]sluice.ResultKind{"a": sluice.ResultSucceeded, "b": sluice.ResultSucceeded,
		"fail-1": sluice.ResultFailed, "exp-1": sluice.ResultRetryable, "slow-1": sluice.ResultRetryable}
	if len(got) != len(want) {
		t.Fatalf("results %v", got)
	}
	for id, k := range want {
		if got[id].Kind != k {
			t.Errorf("%s: kind %v, want %v", id, got[id].Kind, k)
		}
	}
	a := got["a"]
	if a.Usage != (sluice.Usage{InputTokens: 7, OutputTokens: 3}) || a.Line.Response.StatusCode != 200 || a.Line.Error != nil ||
		!strings.Contains(string(a.Line.Response.Body), `"hi a"`) || a.Line.Response.RequestID == "" {
		t.Errorf("result a: %+v", a)
	}
	if e := got["exp-1"].Line.Error; e == nil || e.Code != sluice.CodeBatchExpired || got["exp-1"].Line.Response != nil {
		t.Errorf("exp-1: %+v", got["exp-1"].Line)
	}
	// The canonical line marshals to the OpenAI output shape.
	line, _ := json.Marshal(got["fail-1"].Line)
	if !strings.HasPrefix(string(line), `{"custom_id":"fail-1","response":{"status_code":400,`) || !strings.HasSuffix(string(line), `"error":null}`) {
		t.Errorf("line %s", line)
	}
	if f.batchCount() != 1 || f.fileCount("batch") != 1 {
		t.Errorf("batches %d files %d", f.batchCount(), f.fileCount("batch"))
	}
	// Forget deletes the input file; a second time is no error.
	if err := c.Forget(context.Background(), ref, "file-0001"); err != nil {
		t.Fatal(err)
	}
	if err := c.Forget(context.Background(), ref, "file-0001"); err != nil || f.fileCount("batch") != 0 {
		t.Fatalf("forget: %v, %d files", err, f.fileCount("batch"))
	}
}

// TestRequestsFollowSpec: the fake server refuses any upload or create
// whose fields are not those of the spec's CreateFileRequest and
// CreateBatchRequest (testdata/spec-facts.json); here with the optional
// expiry fields on.
func TestRequestsFollowSpec(t *testing.T) {
	_, base := newFake(t)
	c := newClient(t, "openai", base, func(cfg *openai.Config) {
		cfg.FileExpiresAfter = 48 * time.Hour
		cfg.OutputExpiresAfter = 7 * 24 * time.Hour
	})
	ref := writeChunk(t, "job-spec", 1, 1, "a")
	if b, _ := ptest.Cycle(t, c, ref); b.Status != sluice.BatchCompleted {
		t.Fatalf("batch %+v", b)
	}
}

func TestUploadNameAndMetadata(t *testing.T) {
	f, base := newFake(t)
	c := newClient(t, "openai", base)
	ref := writeChunk(t, "job/2", 12, 3, "a")
	fileID, err := c.Upload(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(context.Background(), ref, fileID); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if name := f.files[0].Name; name != "sluice-job_2-c12-a3-d"+ref.Digest+".jsonl" {
		t.Errorf("filename %q", name)
	}
	md := f.batches[0].obj["metadata"].(map[string]string)
	if md["sluice_job"] != "job/2" || md["sluice_chunk"] != "12" || md["sluice_attempt"] != "3" || md["sluice_digest"] != ref.Digest {
		t.Errorf("metadata %v", md)
	}
	if _, ok := f.batches[0].obj["output_expires_after"]; ok {
		t.Error("output_expires_after sent though not configured")
	}
}

func TestFindAfterCrash(t *testing.T) {
	f, base := newFake(t)
	ctx := context.Background()
	c := newClient(t, "openai", base)
	// Noise: other chunks and attempts of the job, and another job.
	for i := int64(1); i <= 130; i++ {
		r := writeChunk(t, "job-x", i, 1, "a")
		if i == 60 {
			r = writeChunk(t, "other", 7, 1, "a")
		}
		id, err := c.Upload(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Create(ctx, r, id); err != nil {
			t.Fatal(err)
		}
	}
	target := writeChunk(t, "other", 7, 1, "a")
	// A fresh client (a new process) finds the batch of chunk 7 on the
	// second page of both listings.
	c2 := newClient(t, "openai", base)
	fileID, batchID, err := c2.Find(ctx, target)
	if err != nil || fileID != "file-0119" || batchID != "batch_0120" {
		t.Fatalf("find: %q %q %v", fileID, batchID, err)
	}
	// Uploaded but not created: the file alone.
	up := writeChunk(t, "job-x", 500, 2, "q")
	id, _ := c.Upload(ctx, up)
	if fileID, batchID, err := c2.Find(ctx, up); err != nil || fileID != id || batchID != "" {
		t.Fatalf("find uploaded: %q %q %v", fileID, batchID, err)
	}
	// Another attempt of the same chunk: nothing.
	if fileID, batchID, err := c2.Find(ctx, writeChunk(t, "job-x", 500, 3, "q")); err != nil || fileID != "" || batchID != "" {
		t.Fatalf("find absent: %q %q %v", fileID, batchID, err)
	}
	_ = f
}

// TestLostAnswersAreReconciled: the upload and create take effect but
// their answers are lost (connection reset): the client adopts what was
// made instead of making it twice.
func TestLostAnswersAreReconciled(t *testing.T) {
	f, base := newFake(t)
	f.lose["POST /files"] = 1
	f.lose["POST /batches"] = 1
	c := newClient(t, "openai", base)
	ref := writeChunk(t, "job-lost", 1, 1, "a", "b")
	b, got := ptest.Cycle(t, c, ref)
	if b.Status != sluice.BatchCompleted || len(got) != 2 {
		t.Fatalf("batch %+v results %d", b, len(got))
	}
	if f.batchCount() != 1 || f.fileCount("batch") != 1 {
		t.Fatalf("made twice: %d batches, %d files", f.batchCount(), f.fileCount("batch"))
	}
}

func TestCancel(t *testing.T) {
	_, base := newFake(t)
	ctx := context.Background()
	c := newClient(t, "openai", base)
	ref := writeChunk(t, "job-c", 1, 1, "a", "b")
	id, _ := c.Upload(ctx, ref)
	b, _ := c.Create(ctx, ref, id)
	b, err := c.Cancel(ctx, b.ID)
	if err != nil || b.Status != sluice.BatchCancelling {
		t.Fatalf("cancel: %+v %v", b, err)
	}
	b, got := ptest.Finish(t, c, ref, b)
	if b.Status != sluice.BatchCancelled || got["a"].Kind != sluice.ResultRetryable || got["a"].Line.Error.Code != sluice.CodeBatchCancelled {
		t.Fatalf("cancelled batch %+v results %+v", b, got)
	}
	if _, err := c.Cancel(ctx, "batch_nope"); !errors.Is(err, sluice.ErrNotFound) {
		t.Fatalf("cancel unknown: %v", err)
	}
	if _, err := c.Poll(ctx, ref, "batch_nope"); !errors.Is(err, sluice.ErrNotFound) {
		t.Fatalf("poll unknown: %v", err)
	}
}

// TestAzure: the api-key header, capitalised statuses, RFC 3339 times,
// endpoints without /v1, and an empty error file on a clean batch.
func TestAzure(t *testing.T) {
	f, base := newFake(t)
	f.azure, f.authHeader, f.authValue = true, "Api-Key", testKey
	c := newClient(t, "azure", base)
	ref := writeChunk(t, "job-az", 1, 1, "a", "b")
	ref.URL = "/chat/completions"
	b, got := ptest.Cycle(t, c, ref)
	if b.Status != sluice.BatchCompleted || b.ProviderStatus != "Completed" || len(got) != 2 || b.ErrorFileID == "" {
		t.Fatalf("batch %+v results %d", b, len(got))
	}
	// Find reads RFC 3339 created_at.
	if _, batchID, err := c.Find(context.Background(), ref); err != nil || batchID != b.ID {
		t.Fatalf("find: %q %v", batchID, err)
	}
}

func TestAuthFailureIsAPIError(t *testing.T) {
	_, base := newFake(t)
	c := newClient(t, "openai", base, func(cfg *openai.Config) { cfg.APIKey = "sk-wrong-key-0000000" })
	_, err := c.Upload(context.Background(), writeChunk(t, "j", 1, 1, "a"))
	var ae *sluice.APIError
	if !errors.As(err, &ae) || ae.Status != 401 || ae.Code != "invalid_api_key" || strings.Contains(err.Error(), "sk-wrong") {
		t.Fatalf("err %v", err)
	}
}

func TestNewNeedsBaseURL(t *testing.T) {
	if _, err := openai.New(openai.Config{Config: provider.Config{Preset: provider.Presets["azure"]}}); err == nil {
		t.Fatal("azure without a base URL")
	}
	if _, err := openai.New(openai.Config{Config: provider.Config{Preset: provider.Presets["anthropic"], BaseURL: "http://x"}}); err == nil {
		t.Fatal("anthropic preset accepted")
	}
	c, err := openai.New(openai.Config{Config: provider.Config{Preset: provider.Presets["groq"]}})
	if err != nil || c.Name() != "groq" || !c.Capabilities().Files || c.Limits().MaxBatchBytes != 100_000_000 {
		t.Fatalf("groq: %v", err)
	}
}

func TestStatusMapping(t *testing.T) {
	check.Table(t, "MapStatus", compat.MapStatus, map[string]sluice.BatchStatus{
		"validating": sluice.BatchValidating, "Validating": sluice.BatchValidating, "in_progress": sluice.BatchInProgress,
		"InProgress": sluice.BatchInProgress, "finalizing": sluice.BatchFinalizing, "Completed": sluice.BatchCompleted,
		"failed": sluice.BatchFailed, "expired": sluice.BatchExpired, "cancelling": sluice.BatchCancelling,
		"CANCELING": sluice.BatchCancelling, "cancelled": sluice.BatchCancelled, "something_new": sluice.BatchInProgress,
	})
}

// TestWithHTTPStatusInjection: a server that answers 429 and 503 before
// each call still completes the cycle (retries on a fake clock).
func TestWithHTTPStatusInjection(t *testing.T) {
	f, base := newFake(t)
	_ = f
	n := 0
	inner := base
	srv := newFlaky(t, strings.TrimSuffix(inner, "/v1"), func() int {
		n++
		switch n % 3 {
		case 1:
			return 429
		case 2:
			return 503
		}
		return 0
	})
	c := newClient(t, "openai", srv+"/v1")
	_, got := ptest.Cycle(t, c, writeChunk(t, "job-f", 1, 1, "a", "b"))
	if len(got) != 2 {
		t.Fatalf("results %v", got)
	}
	ids := make([]string, 0, len(got))
	for id := range got {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if strings.Join(ids, ",") != "a,b" {
		t.Fatal(ids)
	}
}

// newFlaky proxies to target, answering with the status fault returns
// first (0: pass through).
func newFlaky(t *testing.T, target string, fault func() int) string {
	t.Helper()
	proxy := &http.Client{}
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if code := fault(); code != 0 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(code)
			fmt.Fprint(w, `{"error":{"message":"injected","type":"server_error","param":null,"code":null}}`)
			return
		}
		req, _ := http.NewRequest(r.Method, target+r.URL.RequestURI(), r.Body)
		req.Header = r.Header.Clone()
		req.ContentLength = r.ContentLength
		resp, err := proxy.Do(req)
		if err != nil {
			w.WriteHeader(502)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			w.Write(buf[:n])
			if err != nil {
				break
			}
		}
	}))
	return srv
}
