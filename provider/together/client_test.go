package together_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/internal/ptest"
	"github.com/sluice-batch/sluice/provider/together"
)

func newClient(t *testing.T, base string, mod ...func(*together.Config)) *together.Client {
	t.Helper()
	return ptest.Client(t, together.New, together.Config{Config: ptest.Config(base, ptest.Key)}, mod...)
}

func chunk(t *testing.T, job string, attempt int, ids ...string) sluice.BatchRef {
	return ptest.Chunk(t, provider.Presets["together"].Codec(), job, 1, attempt, "meta-llama/Llama-3.3-70B-Instruct-Turbo", ids...)
}

// recorder notes every request's method and path, and whether it carried
// the API key.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (rc *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := "key"
		if r.Header.Get("Authorization") == "" {
			auth = "nokey"
		}
		rc.mu.Lock()
		rc.calls = append(rc.calls, r.Method+" "+r.URL.Path+" "+auth)
		rc.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (rc *recorder) has(prefix string) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, c := range rc.calls {
		if strings.HasPrefix(c, prefix) {
			return true
		}
	}
	return false
}

// TestTogetherRedirectUpload: the default upload is the SDKs' redirect
// flow: POST /files answered 302, PUT to the signed URL without the API
// key, POST /files/{id}/preprocess; then the batch runs and every
// custom_id comes back once.
func TestTogetherRedirectUpload(t *testing.T) {
	rc := &recorder{}
	_, root := ptest.Emulator(t, emulator.Options{Seed: 7, LineErrorRate: 0.2}, rc.wrap)
	c := newClient(t, root+"/together/v1")
	b, got := ptest.Cycle(t, c, chunk(t, "job-t", 1, ptest.IDs(40, "t")...))
	if b.Status != sluice.BatchCompleted || b.ProviderStatus != "COMPLETED" || len(got) != 40 {
		t.Fatalf("batch %+v, %d results", b, len(got))
	}
	for _, want := range []string{"POST /together/v1/files key", "PUT /together/upload/", "POST /together/v1/files/file-"} {
		if !rc.has(want) {
			t.Errorf("no call %q in %v", want, rc.calls)
		}
	}
	for _, c := range rc.calls {
		if strings.HasPrefix(c, "PUT ") && strings.HasSuffix(c, " key") {
			t.Errorf("the API key was sent to the signed upload URL: %s", c)
		}
	}
	kinds := map[sluice.ResultKind]int{}
	for _, r := range got {
		kinds[r.Kind]++
	}
	if kinds[sluice.ResultSucceeded] == 0 || kinds[sluice.ResultFailed]+kinds[sluice.ResultRetryable] == 0 {
		t.Fatalf("kinds %v", kinds)
	}
	st := ptest.Stats(t, root).ByFamily["together"]
	if st.BatchesCreated != 1 || st.RequestsProcessed != 40 || st.RequestsProcessedMoreThanOnce != 0 {
		t.Fatalf("together stats %+v", st)
	}
}

// TestTogetherMultipartUpload: the Go SDK's POST /files/upload.
func TestTogetherMultipartUpload(t *testing.T) {
	rc := &recorder{}
	_, root := ptest.Emulator(t, emulator.Options{}, rc.wrap)
	c := newClient(t, root+"/together/v1", func(cfg *together.Config) { cfg.Upload = together.UploadMultipart })
	b, got := ptest.Cycle(t, c, chunk(t, "job-mp", 1, "a", "b", "c"))
	if b.Status != sluice.BatchCompleted || len(got) != 3 {
		t.Fatalf("batch %+v, %d results", b, len(got))
	}
	if !rc.has("POST /together/v1/files/upload key") || rc.has("PUT ") {
		t.Fatalf("calls %v", rc.calls)
	}
}

// TestTogetherLostCreateAdopted: the create's answer is lost after it took
// effect; the client lists batches, finds the one made from its input
// file and adopts it: nothing is bought twice.
func TestTogetherLostCreateAdopted(t *testing.T) {
	lose := ptest.LoseAnswers(1, func(r *http.Request) bool {
		return r.Method == http.MethodPost && r.URL.Path == "/together/v1/batches"
	})
	_, root := ptest.Emulator(t, emulator.Options{}, lose)
	c := newClient(t, root+"/together/v1")
	b, got := ptest.Cycle(t, c, chunk(t, "job-lost", 1, ptest.IDs(6, "x")...))
	if b.Status != sluice.BatchCompleted || len(got) != 6 {
		t.Fatalf("batch %+v, %d results", b, len(got))
	}
	if st := ptest.Stats(t, root).ByFamily["together"]; st.BatchesCreated != 1 || st.RequestsProcessed != 6 {
		t.Fatalf("together stats %+v", st)
	}
}

// TestTogetherLostUploadStepsRepeat: each step of the redirect upload
// answers once into a dropped connection; the steps are repeated and the
// upload completes.
func TestTogetherLostUploadStepsRepeat(t *testing.T) {
	lose := ptest.LoseAnswers(3, func(r *http.Request) bool {
		return (r.Method == http.MethodPost && (r.URL.Path == "/together/v1/files" || strings.HasSuffix(r.URL.Path, "/preprocess"))) ||
			r.Method == http.MethodPut
	})
	_, root := ptest.Emulator(t, emulator.Options{}, lose)
	c := newClient(t, root+"/together/v1")
	b, got := ptest.Cycle(t, c, chunk(t, "job-up", 1, "a", "b"))
	if b.Status != sluice.BatchCompleted || len(got) != 2 {
		t.Fatalf("batch %+v, %d results", b, len(got))
	}
}

// TestTogetherFindAfterCrash: a new client finds the uploaded file by its
// name and size, then the batch made from it; other attempts find nothing.
func TestTogetherFindAfterCrash(t *testing.T) {
	_, root := ptest.Emulator(t, emulator.Options{BatchTime: time.Hour}, nil)
	c := newClient(t, root+"/together/v1")
	ctx := context.Background()
	ref := chunk(t, "job-find", 1, "a", "b", "c")
	other := chunk(t, "job-find", 2, "a", "b", "c")
	fileID, err := c.Upload(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if f, b, err := newClient(t, root+"/together/v1").Find(ctx, ref); err != nil || f != fileID || b != "" {
		t.Fatalf("after upload: %q %q %v", f, b, err)
	}
	b, err := c.Create(ctx, ref, fileID)
	if err != nil || b.ProviderStatus != "VALIDATING" {
		t.Fatalf("create %+v %v", b, err)
	}
	if f, id, err := newClient(t, root+"/together/v1").Find(ctx, ref); err != nil || f != fileID || id != b.ID {
		t.Fatalf("after create: %q %q %v", f, id, err)
	}
	if f, id, err := newClient(t, root+"/together/v1").Find(ctx, other); err != nil || f != "" || id != "" {
		t.Fatalf("attempt 2: %q %q %v", f, id, err)
	}
}

// TestTogetherCancel: a running batch is cancelled; cancelling it again
// (the API refuses with 400 {"error":…}) answers the cancelled batch.
func TestTogetherCancel(t *testing.T) {
	_, root := ptest.Emulator(t, emulator.Options{BatchTime: time.Hour}, nil)
	c := newClient(t, root+"/together/v1")
	ctx := context.Background()
	ref := chunk(t, "job-c", 1, ptest.IDs(4, "c")...)
	b := ptest.Submit(t, c, ref)
	var err error
	if b, err = c.Cancel(ctx, b.ID); err != nil || b.Status != sluice.BatchCancelled {
		t.Fatalf("cancel %+v %v", b, err)
	}
	// A repeated cancel (its first answer lost) is refused by the API; the
	// client answers the batch as it ended instead of an error.
	if again, err := c.Cancel(ctx, b.ID); err != nil || again.Status != sluice.BatchCancelled || again.ID != b.ID {
		t.Fatalf("second cancel: %+v %v", again, err)
	}
	if _, err := c.Poll(ctx, ref, "no-such-batch"); !errors.Is(err, sluice.ErrNotFound) {
		t.Fatalf("poll unknown: %v", err)
	}
}

// TestTogetherWrongKey: a wrong key is a 401 APIError.
func TestTogetherWrongKey(t *testing.T) {
	_, root := ptest.Emulator(t, emulator.Options{}, nil)
	c := newClient(t, root+"/together/v1", func(cfg *together.Config) { cfg.APIKey = "wrong-key-0000" })
	_, err := c.Upload(context.Background(), chunk(t, "job-key", 1, "a"))
	var ae *sluice.APIError
	if !errors.As(err, &ae) || ae.Status != 401 {
		t.Fatalf("err %v", err)
	}
}

// TestTogetherCustomIDBound: the codec refuses a custom_id over 64
// characters at plan time.
func TestTogetherCustomIDBound(t *testing.T) {
	it := &sluice.Item{CustomID: strings.Repeat("x", 65), URL: "/v1/chat/completions", Model: "m",
		Body: []byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`)}
	if err := provider.Presets["together"].Codec().Validate(it); err == nil || !strings.Contains(err.Error(), "64") {
		t.Fatalf("err %v", err)
	}
	it.URL = "/v1/embeddings"
	it.CustomID = "ok"
	it.Body = []byte(`{"model":"m","input":"x"}`)
	if err := provider.Presets["together"].Codec().Validate(it); err == nil {
		t.Fatal("embeddings accepted")
	}
}

// TestTogetherFindDeletesLeftovers: an upload cut after its first step
// leaves a file record without content; Find, run after the crash, deletes
// it (no batch can be made from it) and finds nothing to adopt.
func TestTogetherFindDeletesLeftovers(t *testing.T) {
	_, root := ptest.Emulator(t, emulator.Options{}, nil)
	ref := chunk(t, "job-left", 1, "a", "b")
	form := url.Values{"purpose": {"batch-api"}, "file_name": {provider.UploadName(ref)}, "file_type": {"jsonl"}}
	req, _ := http.NewRequest("POST", root+"/together/v1/files", strings.NewReader(form.Encode()))
	req.Header.Set("Authorization", "Bearer "+ptest.Key)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	left := resp.Header.Get("X-Together-File-Id")
	if resp.StatusCode != 302 || left == "" {
		t.Fatalf("step 1: %d %q", resp.StatusCode, left)
	}
	c := newClient(t, root+"/together/v1")
	if f, b, err := c.Find(context.Background(), ref); err != nil || f != "" || b != "" {
		t.Fatalf("find: %q %q %v", f, b, err)
	}
	req, _ = http.NewRequest("GET", root+"/together/v1/files/"+left, nil)
	req.Header.Set("Authorization", "Bearer "+ptest.Key)
	if resp, err = http.DefaultClient.Do(req); err != nil || resp.StatusCode != 404 {
		t.Fatalf("the leftover %s is still there: %v %v", left, resp.Status, err)
	}
	resp.Body.Close()
	// The chunk uploads and runs as usual afterwards.
	if b, got := ptest.Cycle(t, c, ref); b.Status != sluice.BatchCompleted || len(got) != 2 {
		t.Fatalf("batch %+v, %d results", b, len(got))
	}
}
