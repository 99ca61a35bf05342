package gemini_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/internal/check"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/gemini"
	"github.com/sluice-batch/sluice/provider/httpx"
	"github.com/sluice-batch/sluice/provider/internal/ptest"
)

const testKey = "gm-test-0123456789"

func startEmulator(t *testing.T, o emulator.Options) (*emulator.Server, string) {
	t.Helper()
	o.APIKey = testKey
	s, root := ptest.Emulator(t, o, nil)
	return s, root + "/gemini"
}

func newClient(t *testing.T, base string, mod ...func(*gemini.Config)) *gemini.Client {
	t.Helper()
	return ptest.Client(t, gemini.New, gemini.Config{Config: ptest.Config(base, testKey)}, mod...)
}

// writeChunk writes a chunk file through the preset's codec, as the
// splitter does; pad lengthens each prompt.
func writeChunk(t *testing.T, job string, chunk int64, pad int, ids ...string) sluice.BatchRef {
	t.Helper()
	const url = "/v1beta/models/gemini-2.5-flash:generateContent"
	filler := strings.Repeat("p", pad)
	items := make([]*sluice.Item, len(ids))
	for i, id := range ids {
		body := fmt.Sprintf(`{"contents":[{"role":"user","parts":[{"text":"hello %s %s"}]}],"generationConfig":{"maxOutputTokens":64}}`, id, filler)
		items[i] = &sluice.Item{CustomID: id, URL: url, Body: []byte(body)}
	}
	return ptest.WriteChunk(t, provider.Presets["gemini"].Codec(), sluice.BatchRef{Job: job, Chunk: chunk, Attempt: 1, URL: url, Model: "gemini-2.5-flash"}, items...)
}

// TestClientRoundTrip uploads a chunk in several upload requests, creates
// a batch, polls it to completion, fetches and decodes every result, with
// per-line errors classified by their status.
func TestClientRoundTrip(t *testing.T) {
	s, base := startEmulator(t, emulator.Options{GeminiUploadGranularity: 1024, LineErrorRate: 0.3, Seed: 7})
	c := newClient(t, base, func(cfg *gemini.Config) { cfg.ChunkSize = 4096 })
	ctx := context.Background()
	ref := writeChunk(t, "job1", 3, 80, ptest.IDs(60, "a")...)
	if ref.Bytes < 3*4096 {
		t.Fatalf("chunk of %d bytes fits in too few upload requests", ref.Bytes)
	}
	fileID := check.Try(c.Upload(ctx, ref)).Must(t, "Upload")
	if !strings.HasPrefix(fileID, "files/") {
		t.Fatalf("file id %q", fileID)
	}
	b := check.Try(c.Create(ctx, ref, fileID)).Must(t, "Create")
	if !strings.HasPrefix(b.ID, "batches/") || b.Status != sluice.BatchValidating || b.ProviderStatus != "BATCH_STATE_PENDING" || b.Total != 60 {
		t.Fatalf("created: %+v", b)
	}
	b, got := ptest.Finish(t, c, ref, b)
	if b.Status != sluice.BatchCompleted || b.OutputFileID == "" {
		t.Fatalf("ended: %+v", b)
	}
	if len(got) != 60 {
		t.Fatalf("%d results, want 60", len(got))
	}
	kinds := map[string]sluice.ResultKind{}
	for id, r := range got {
		switch {
		case r.Line.Response != nil:
			if r.Kind != sluice.ResultSucceeded || r.Line.Response.StatusCode != 200 ||
				!strings.Contains(string(r.Line.Response.Body), `"text":"echo: `) || r.Usage.InputTokens == 0 || r.Usage.OutputTokens == 0 {
				t.Errorf("%s: %+v", id, r)
			}
		case r.Line.Error != nil:
			kinds[string(r.Line.Error.Code)] = r.Kind
		default:
			t.Errorf("%s: neither response nor error", id)
		}
	}
	want := map[string]sluice.ResultKind{"RESOURCE_EXHAUSTED": sluice.ResultRetryable, "INTERNAL": sluice.ResultRetryable,
		"INVALID_ARGUMENT": sluice.ResultFailed}
	for code, k := range want {
		if got, ok := kinds[code]; !ok || got != k {
			t.Errorf("line error %s: kind %v (seen %v), want %v", code, got, ok, k)
		}
	}
	// The SDKs' download path gives the same file as the docs' one.
	docs := check.Try(c.Fetch(ctx, ref, b, t.TempDir())).Must(t, "Fetch")
	sdk := check.Try(newClient(t, base, func(cfg *gemini.Config) { cfg.SDKDownloadPath = true }).Fetch(ctx, ref, b, t.TempDir())).Must(t, "newClient")
	d1, _ := os.ReadFile(docs[0])
	d2, _ := os.ReadFile(sdk[0])
	if len(d1) == 0 || string(d1) != string(d2) {
		t.Errorf("download paths disagree: %d and %d bytes", len(d1), len(d2))
	}
	if st := s.Stats().ByFamily["gemini"]; st.RequestsProcessed != 60 || st.RequestsProcessedMoreThanOnce != 0 {
		t.Errorf("stats: %+v", st)
	}
	if err := c.Forget(ctx, ref, fileID); err != nil {
		t.Errorf("forget: %v", err)
	}
	if err := c.Forget(ctx, ref, fileID); err != nil {
		t.Errorf("forget twice: %v", err)
	}
}

// breaker is a RoundTripper that cuts one upload request short: it sends
// the headers and the first cut bytes of the body on a raw connection,
// half-closes it, waits for the server's answer (so the server has stored
// what arrived) and reports a reset connection to the client. It records
// the upload commands and offsets it sees.
type breaker struct {
	mu      sync.Mutex
	breakAt int // the upload request (1-based) to cut
	cut     int64
	n       int
	log     []string
}

func (b *breaker) RoundTrip(req *http.Request) (*http.Response, error) {
	cmd := req.Header.Get("X-Goog-Upload-Command")
	b.mu.Lock()
	if strings.HasPrefix(cmd, "upload") {
		b.n++
	}
	cutThis := strings.HasPrefix(cmd, "upload") && b.n == b.breakAt
	b.log = append(b.log, cmd+"@"+req.Header.Get("X-Goog-Upload-Offset"))
	b.mu.Unlock()
	if !cutThis {
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err == nil && cmd == "query" {
			b.mu.Lock()
			b.log = append(b.log, "received="+resp.Header.Get("X-Goog-Upload-Size-Received"))
			b.mu.Unlock()
		}
		return resp, err
	}
	conn, err := net.Dial("tcp", req.URL.Host)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	w := bufio.NewWriter(conn)
	fmt.Fprintf(w, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", req.URL.RequestURI(), req.URL.Host, req.ContentLength)
	req.Header.Write(w)
	w.WriteString("\r\n")
	io.CopyN(w, req.Body, b.cut)
	req.Body.Close()
	w.Flush()
	conn.(*net.TCPConn).CloseWrite()
	io.Copy(io.Discard, conn) // the server has handled the cut chunk
	return nil, errors.New("read: connection reset by peer (cut by the test)")
}

// TestUploadResumesFromServerOffset cuts the third upload request after
// 2500 of its 4096 bytes: the server keeps 2048 (whole 1024-byte granules),
// the client queries the session and sends the rest from there, and the
// uploaded file is byte for byte the chunk.
func TestUploadResumesFromServerOffset(t *testing.T) {
	_, base := startEmulator(t, emulator.Options{GeminiUploadGranularity: 1024})
	br := &breaker{breakAt: 3, cut: 2500}
	c := newClient(t, base, func(cfg *gemini.Config) {
		cfg.ChunkSize = 4096
		cfg.HTTP = &http.Client{Transport: br}
	})
	ctx := context.Background()
	ref := writeChunk(t, "job1", 1, 100, ptest.IDs(100, "u")...)
	fileID := check.Try(c.Upload(ctx, ref)).Must(t, "Upload")
	log := strings.Join(br.log, " ")
	if !strings.Contains(log, "upload@8192 query@ received=10240 upload@10240 upload@14336") {
		t.Errorf("upload requests: %s\nwant the cut chunk at 8192 followed by a query answering 10240 and the upload resuming there", log)
	}
	// The stored file is the chunk, byte for byte.
	want, _ := os.ReadFile(ref.Path)
	resp := check.Try(http.Get(base+"/v1beta/"+fileID+":download?alt=media&key="+testKey)).Must(t, "Get")
	defer resp.Body.Close()
	gotBytes, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(gotBytes) != string(want) {
		t.Fatalf("stored file: %d, %d bytes, want %d bytes equal to the chunk", resp.StatusCode, len(gotBytes), len(want))
	}
}

// TestUploadSurvivesResets runs whole uploads through an emulator that
// resets a third of all calls after handling them: the client always
// finishes with the right file.
func TestUploadSurvivesResets(t *testing.T) {
	_, base := startEmulator(t, emulator.Options{GeminiUploadGranularity: 512, HTTPFaultRate: 0.3, FaultKinds: []string{"reset", "503", "429"},
		RetryAfter: time.Millisecond, Seed: 3})
	c := newClient(t, base, func(cfg *gemini.Config) { cfg.ChunkSize = 2048; cfg.Retry = httpx.Retry{MaxAttempts: 30} })
	ctx := context.Background()
	for k := 0; k < 3; k++ {
		ref := writeChunk(t, "job1", int64(k), 30, ptest.IDs(40, fmt.Sprintf("r%d", k))...)
		fileID := check.Try(c.Upload(ctx, ref)).Must(t, "Upload")
		want, _ := os.ReadFile(ref.Path)
		var got []byte
		for i := 0; i < 50; i++ { // the download itself may be faulted
			resp, err := http.Get(base + "/v1beta/" + fileID + ":download?alt=media&key=" + testKey)
			if err != nil {
				continue
			}
			got, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode == 200 {
				break
			}
			got = nil
		}
		if string(got) != string(want) {
			t.Fatalf("upload %d: stored %d bytes, want %d equal to the chunk", k, len(got), len(want))
		}
	}
}

// loseAnswer forwards the create call but drops its answer, as a
// connection broken after the server acted.
type loseAnswer struct{ lost int }

func (l *loseAnswer) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil && strings.HasSuffix(req.URL.Path, ":batchGenerateContent") && l.lost == 0 {
		l.lost++
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, errors.New("read: connection reset by peer (answer dropped by the test)")
	}
	return resp, err
}

// TestCreateAnswerLostIsAdopted: the create reaches the emulator but its
// answer is lost; the client finds the batch by its display name instead
// of creating it again.
func TestCreateAnswerLostIsAdopted(t *testing.T) {
	s, base := startEmulator(t, emulator.Options{})
	la := &loseAnswer{}
	c := newClient(t, base, func(cfg *gemini.Config) { cfg.HTTP = &http.Client{Transport: la} })
	ref := writeChunk(t, "jobX", 2, 0, ptest.IDs(5, "x")...)
	b := ptest.Submit(t, c, ref)
	if la.lost != 1 {
		t.Fatal("the create answer was not dropped")
	}
	if n := s.Stats().ByFamily["gemini"].BatchesCreated; n != 1 {
		t.Fatalf("%d batches created, want 1 (adopted, not bought twice)", n)
	}
	_, got := ptest.Finish(t, c, ref, b)
	if len(got) != 5 {
		t.Fatalf("%d results", len(got))
	}
}

// TestFindAfterCrash: a new client (a restarted run) finds the file and
// the batch a previous one made for a chunk, the file alone when no batch
// was created, and nothing for another attempt.
func TestFindAfterCrash(t *testing.T) {
	_, base := startEmulator(t, emulator.Options{})
	ctx := context.Background()
	a := newClient(t, base)
	ref := writeChunk(t, "job-crash", 7, 0, ptest.IDs(4, "f")...)
	fileID := check.Try(a.Upload(ctx, ref)).Must(t, "Upload")
	b := newClient(t, base)
	if f, id, err := b.Find(ctx, ref); err != nil || f != fileID || id != "" {
		t.Fatalf("after upload: Find = %q, %q, %v; want the file %s and no batch", f, id, err, fileID)
	}
	created := check.Try(a.Create(ctx, ref, fileID)).Must(t, "Create")
	if f, id, err := b.Find(ctx, ref); err != nil || f != fileID || id != created.ID {
		t.Fatalf("after create: Find = %q, %q, %v; want %s, %s", f, id, err, fileID, created.ID)
	}
	other := ref
	other.Attempt = 2
	if f, id, err := b.Find(ctx, other); err != nil || f != "" || id != "" {
		t.Fatalf("another attempt: Find = %q, %q, %v; want nothing", f, id, err)
	}
}

// TestCancelAndWrongKey: cancel ends a running batch CANCELLED (and a
// second cancel just reads it); a wrong key is a 401 to the dispatcher.
func TestCancelAndWrongKey(t *testing.T) {
	_, base := startEmulator(t, emulator.Options{BatchTime: time.Hour})
	c := newClient(t, base)
	ctx := context.Background()
	ref := writeChunk(t, "jobC", 1, 0, ptest.IDs(3, "c")...)
	b := ptest.Submit(t, c, ref)
	for i := 0; i < 2; i++ {
		nb, err := c.Cancel(ctx, b.ID)
		if err != nil || nb.Status != sluice.BatchCancelled || nb.ProviderStatus != "BATCH_STATE_CANCELLED" {
			t.Fatalf("cancel %d: %+v, %v", i, nb, err)
		}
		if files, err := c.Fetch(ctx, ref, nb, t.TempDir()); err != nil || len(files) != 0 {
			t.Fatalf("fetch of a batch cancelled before it ran: %v, %v", files, err)
		}
	}
	if _, err := c.Poll(ctx, ref, "batches/nosuchbatch"); !errors.Is(err, sluice.ErrNotFound) {
		t.Errorf("poll of an unknown batch: %v, want ErrNotFound", err)
	}
	bad := newClient(t, base, func(cfg *gemini.Config) { cfg.APIKey = "wrong-key-0123" })
	_, err := bad.Upload(ctx, ref)
	var ae *sluice.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized || !strings.Contains(ae.Code, "API_KEY_INVALID") {
		t.Fatalf("wrong key: %v", err)
	}
	if strings.Contains(err.Error(), "wrong-key-0123") {
		t.Errorf("the key leaked into the error: %v", err)
	}
}

func TestDecodeLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		kind sluice.ResultKind
		code string
		bad  bool
	}{
		{`{"key":"a","response":{"candidates":[],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":4,"thoughtsTokenCount":5}}}`, sluice.ResultSucceeded, "", false},
		{`{"key":"a","status":{"code":8,"message":"quota"}}`, sluice.ResultRetryable, "RESOURCE_EXHAUSTED", false},
		{`{"key":"a","status":{"code":3,"message":"bad"}}`, sluice.ResultFailed, "INVALID_ARGUMENT", false},
		{`{"key":"a","error":{"code":503,"message":"x","status":"UNAVAILABLE"}}`, sluice.ResultRetryable, "UNAVAILABLE", false},
		{`{"key":"a","error":{"code":400,"message":"x"}}`, sluice.ResultFailed, "INVALID_ARGUMENT", false},
		{`{"key":"a","status":{"code":4}}`, sluice.ResultRetryable, "DEADLINE_EXCEEDED", false},
		{`{"key":"a","status":{"code":1,"message":"cancelled"}}`, sluice.ResultRetryable, "CANCELLED", false},
		{`{"key":"a","status":{"code":7,"message":"denied"}}`, sluice.ResultFailed, "PERMISSION_DENIED", false},
		{`{"response":{}}`, 0, "", true},
		{`{"key":"a"}`, 0, "", true},
		{`{"key":"a","response":{"cand`, 0, "", true},
	} {
		r, err := gemini.DecodeLine([]byte(tc.line))
		if tc.bad {
			if err == nil {
				t.Errorf("%s: decoded %+v, want an error", tc.line, r)
			}
			continue
		}
		if err != nil || r.Kind != tc.kind || r.CustomID != "a" {
			t.Errorf("%s: %+v, %v", tc.line, r, err)
			continue
		}
		if tc.code != "" && (r.Line.Error == nil || string(r.Line.Error.Code) != tc.code) {
			t.Errorf("%s: error %+v, want code %s", tc.line, r.Line.Error, tc.code)
		}
		if tc.code == "" && (r.Usage.InputTokens != 3 || r.Usage.OutputTokens != 9) {
			t.Errorf("%s: usage %+v", tc.line, r.Usage)
		}
	}
}

func TestMapState(t *testing.T) {
	check.Table(t, "MapState", gemini.MapState, map[string]sluice.BatchStatus{
		"BATCH_STATE_PENDING": sluice.BatchValidating, "BATCH_STATE_RUNNING": sluice.BatchInProgress,
		"BATCH_STATE_SUCCEEDED": sluice.BatchCompleted, "BATCH_STATE_FAILED": sluice.BatchFailed,
		"BATCH_STATE_CANCELLED": sluice.BatchCancelled, "BATCH_STATE_EXPIRED": sluice.BatchExpired,
		"JOB_STATE_SUCCEEDED": sluice.BatchCompleted, "BATCH_STATE_SOMETHING_NEW": sluice.BatchInProgress,
	})
}

func TestCodec(t *testing.T) {
	codec := provider.Presets["gemini"].Codec()
	ok := &sluice.Item{CustomID: "k\"1", URL: "/v1/models/gemini-2.0-flash:generateContent",
		Body: []byte(`{"contents":[{"parts":[{"text":"hi"}]}]}`)}
	if err := codec.Validate(ok); err != nil || ok.Model != "gemini-2.0-flash" {
		t.Fatalf("valid line: %v, model %q", err, ok.Model)
	}
	line, err := codec.AppendItem(nil, ok)
	if err != nil || string(line) != `{"key":"k\"1","request":{"contents":[{"parts":[{"text":"hi"}]}]}}`+"\n" {
		t.Fatalf("item: %s, %v", line, err)
	}
	for _, it := range []*sluice.Item{
		{URL: "/v1/chat/completions", Body: []byte(`{"contents":[{}]}`)},
		{URL: "/v1beta/models/x:streamGenerateContent", Body: []byte(`{"contents":[{}]}`)},
		{URL: "/v1beta/models/x:generateContent", Body: []byte(`{"contents":[]}`)},
		{URL: "/v1beta/models/x:generateContent", Body: []byte(`{"messages":[]}`)},
		{URL: "/v1beta/models/x:generateContent", Model: "y", Body: []byte(`{"model":"y","contents":[{}]}`)},
	} {
		if err := codec.Validate(it); err == nil {
			t.Errorf("%s %s: accepted", it.URL, it.Body)
		}
	}
}

// TestFindPagesThroughListings: with more batches and files than one page
// of a listing (listPage), Find still finds those of any chunk, following
// nextPageToken.
func TestFindPagesThroughListings(t *testing.T) {
	_, base := startEmulator(t, emulator.Options{BatchTime: time.Millisecond} /* ended batches: no cap on live ones */)
	ctx := context.Background()
	c := newClient(t, base)
	const n = 105 // more than one page of 100
	refs := make([]sluice.BatchRef, n)
	files := make([]string, n)
	batches := make([]string, n)
	for i := range refs {
		refs[i] = writeChunk(t, "job-pages", int64(i+1), 0, ptest.IDs(1, fmt.Sprintf("p%d", i))...)
		var err error
		if files[i], err = c.Upload(ctx, refs[i]); err != nil {
			t.Fatal(err)
		}
		b := check.Try(c.Create(ctx, refs[i], files[i])).Must(t, "Create")
		batches[i] = b.ID
	}
	for _, i := range []int{0, n / 2, n - 1} {
		if f, id, err := newClient(t, base).Find(ctx, refs[i]); err != nil || f != files[i] || id != batches[i] {
			t.Errorf("chunk %d: Find = %q, %q, %v; want %s, %s", i+1, f, id, err, files[i], batches[i])
		}
	}
	// A file with no batch, among more than a page of files.
	extra := writeChunk(t, "job-pages", n+1, 0, "lone")
	fileID := check.Try(c.Upload(ctx, extra)).Must(t, "Upload")
	if f, id, err := newClient(t, base).Find(ctx, extra); err != nil || f != fileID || id != "" {
		t.Errorf("lone file: Find = %q, %q, %v; want %s and no batch", f, id, err, fileID)
	}
}
