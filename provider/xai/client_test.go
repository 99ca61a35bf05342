package xai_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/internal/emutest"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
	"github.com/sluice-batch/sluice/provider/internal/ptest"
	"github.com/sluice-batch/sluice/provider/xai"
)

func newClient(t *testing.T, root string, mod ...func(*xai.Config)) *xai.Client {
	t.Helper()
	cfg := xai.Config{Config: provider.Config{BaseURL: root + "/xai/v1", APIKey: ptest.Key, RateLimit: httpx.RateLimit{PerSecond: -1}},
		CreateInterval: time.Millisecond}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := xai.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func chunk(t *testing.T, job string, attempt int, ids ...string) sluice.BatchRef {
	return ptest.Chunk(t, provider.Presets["xai"].Codec(), job, 1, attempt, "grok-4-fast", ids...)
}

// create makes ref's batch as the dispatcher does: upload first when the
// client takes files.
func create(t *testing.T, c *xai.Client, ref sluice.BatchRef) sluice.Batch {
	t.Helper()
	ctx := context.Background()
	fileID := ""
	if c.Capabilities().Files {
		var err error
		if fileID, err = c.Upload(ctx, ref); err != nil {
			t.Fatal(err)
		}
	}
	b, err := c.Create(ctx, ref, fileID)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestXAIRoundTrip: a batch made by name, its requests added in several
// calls (AddBytes small), polled until none is pending, its results read
// page by page (PageSize small) and decoded, with per-request errors:
// every custom_id comes back once, nothing is run twice.
func TestXAIRoundTrip(t *testing.T) {
	_, root := ptest.Emulator(t, emulator.Options{Seed: 7, LineErrorRate: 0.2}, nil)
	c := newClient(t, root, func(c *xai.Config) { c.AddBytes, c.PageSize = 2000, 7 })
	ref := chunk(t, "job-x", 1, ptest.IDs(40, "x")...)
	b, got := ptest.Finish(t, c, ref, create(t, c, ref))
	if b.Status != sluice.BatchCompleted || b.Total != 40 || len(got) != 40 {
		t.Fatalf("batch %+v, %d results", b, len(got))
	}
	kinds := map[sluice.ResultKind]int{}
	for _, r := range got {
		kinds[r.Kind]++
		if r.Kind == sluice.ResultSucceeded && (r.Usage.InputTokens == 0 || r.Line.Response.StatusCode != 200 ||
			!strings.Contains(string(r.Line.Response.Body), `"chat.completion"`)) {
			t.Errorf("success without usage, status or completion: %+v", r)
		}
	}
	if kinds[sluice.ResultSucceeded] == 0 || kinds[sluice.ResultFailed] == 0 || kinds[sluice.ResultRetryable] == 0 {
		t.Fatalf("kinds %v", kinds)
	}
	if b.Completed != kinds[sluice.ResultSucceeded] || b.Failed != kinds[sluice.ResultFailed]+kinds[sluice.ResultRetryable] {
		t.Fatalf("counts %+v vs kinds %v", b, kinds)
	}
	st := ptest.Stats(t, root).ByFamily["xai"]
	if st.BatchesCreated != 1 || st.RequestsProcessed != 40 || st.RequestsProcessedMoreThanOnce != 0 {
		t.Fatalf("xai stats %+v", st)
	}
}

// TestXAIFileInput: with Input file the chunk is uploaded as a JSONL file
// and the batch made from it (input_file_id); Forget deletes the file.
func TestXAIFileInput(t *testing.T) {
	_, root := ptest.Emulator(t, emulator.Options{}, nil)
	c := newClient(t, root, func(c *xai.Config) { c.Input = xai.InputFile })
	ref := chunk(t, "job-file", 1, ptest.IDs(12, "f")...)
	created := create(t, c, ref)
	b, got := ptest.Finish(t, c, ref, created)
	if b.Status != sluice.BatchCompleted || len(got) != 12 {
		t.Fatalf("batch %+v, %d results", b, len(got))
	}
	fileID, batchID, err := newClient(t, root, func(c *xai.Config) { c.Input = xai.InputFile }).Find(context.Background(), ref)
	if err != nil || batchID != b.ID || fileID == "" {
		t.Fatalf("Find: %q %q %v, want batch %s and its file", fileID, batchID, err, b.ID)
	}
	if err := c.Forget(context.Background(), ref, fileID); err != nil {
		t.Fatal(err)
	}
	var files struct {
		Data []json.RawMessage `json:"data"`
	}
	getJSON(t, root+"/xai/v1/files", &files)
	if len(files.Data) != 0 {
		t.Fatalf("files left: %s", files.Data)
	}
}

// TestXAILostAnswersAdopted: the create's answer and an add-requests
// call's answer are lost after they took effect; the client finds the
// batch by its name and the requests among the batch's, so nothing is
// made or run twice.
func TestXAILostAnswersAdopted(t *testing.T) {
	lose := ptest.LoseAnswers(2, func(r *http.Request) bool {
		return r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/xai/v1/batches")
	})
	_, root := ptest.Emulator(t, emulator.Options{}, lose)
	// The retries' waits pass on a fake clock: what is proven is what the
	// client does after a lost answer, not how long it waits.
	c := newClient(t, root, func(c *xai.Config) { c.AddBytes, c.Clock = 1500, httpx.NewFakeClock(time.Now()) })
	ref := chunk(t, "job-lost", 1, ptest.IDs(20, "l")...)
	b, got := ptest.Finish(t, c, ref, create(t, c, ref))
	if b.Status != sluice.BatchCompleted || b.Total != 20 || len(got) != 20 {
		t.Fatalf("batch %+v, %d results", b, len(got))
	}
	st := ptest.Stats(t, root).ByFamily["xai"]
	if st.BatchesCreated != 1 || st.RequestsProcessed != 20 || st.RequestsProcessedMoreThanOnce != 0 {
		t.Fatalf("made or run twice: %+v", st)
	}
}

// TestXAIFindCompletesBatch: a run killed between the create and the last
// add-requests call left a batch holding some of the chunk's requests.
// Find adopts it by its name (which carries the chunk's digest) and adds
// only the others; another attempt, another chunk's bytes and a chunk
// without a digest adopt nothing.
func TestXAIFindCompletesBatch(t *testing.T) {
	_, root := ptest.Emulator(t, emulator.Options{}, nil)
	ref := chunk(t, "job-crash", 1, ptest.IDs(9, "k")...)
	lines := chunkLines(t, ref.Path)
	var made struct {
		ID string `json:"batch_id"`
	}
	postJSON(t, root+"/xai/v1/batches", map[string]any{"name": provider.BaseName(ref)}, &made)
	postJSON(t, root+"/xai/v1/batches/"+made.ID+"/requests",
		json.RawMessage(`{"batch_requests":[`+string(bytes.Join(lines[:4], []byte(",")))+`]}`), nil)

	ctx := context.Background()
	other := chunk(t, "job-crash", 2, ptest.IDs(9, "k")...)
	otherBytes := chunk(t, "job-crash", 1, ptest.IDs(8, "k")...)
	noDigest := ref
	noDigest.Digest = ""
	for name, r := range map[string]sluice.BatchRef{"attempt 2": other, "other bytes": otherBytes, "no digest": noDigest} {
		if f, b, err := newClient(t, root).Find(ctx, r); err != nil || f != "" || b != "" {
			t.Fatalf("%s: Find %q %q %v, want nothing", name, f, b, err)
		}
	}
	_, id, err := newClient(t, root).Find(ctx, ref)
	if err != nil || id != made.ID {
		t.Fatalf("Find: %q %v, want %s", id, err, made.ID)
	}
	b, got := ptest.Finish(t, newClient(t, root), ref, sluice.Batch{ID: id})
	if b.Total != 9 || len(got) != 9 {
		t.Fatalf("batch %+v, %d results", b, len(got))
	}
	st := ptest.Stats(t, root).ByFamily["xai"]
	if st.RequestsProcessed != 9 || st.RequestsProcessedMoreThanOnce != 0 {
		t.Fatalf("xai stats %+v", st)
	}
}

// TestXAICancel: a cancelled batch is cancelling while requests are
// pending, then cancelled; the requests that did not run come back
// CANCELLED, to be retried. Both cancel paths are served.
func TestXAICancel(t *testing.T) {
	// The emulator's clock stands still until the cancel: nothing of a
	// batch runs before it, however loaded the machine.
	clk := emutest.NewClock()
	_, root := ptest.Emulator(t, emulator.Options{BatchTime: time.Hour, Now: clk.Now}, nil)
	ctx := context.Background()
	for _, path := range []string{xai.CancelColon, xai.CancelSlash} {
		c := newClient(t, root, func(c *xai.Config) { c.CancelPath = path })
		ref := chunk(t, "job-cancel"+strings.Trim(path, ":/"), 1, ptest.IDs(10, "c")...)
		created := create(t, c, ref)
		if created.Status != sluice.BatchInProgress {
			t.Fatalf("new batch %+v", created)
		}
		b, err := c.Cancel(ctx, created.ID)
		if err != nil || b.Status != sluice.BatchCancelling {
			t.Fatalf("%s: cancel: %+v %v", path, b, err)
		}
		for !b.Status.Ended() {
			clk.Advance(7 * time.Minute) // cancelling lasts a tenth of the batch time
			if b, err = c.Poll(ctx, ref, b.ID); err != nil {
				t.Fatal(err)
			}
		}
		b, got := ptest.Finish(t, c, ref, b)
		if b.Status != sluice.BatchCancelled || len(got) != 10 {
			t.Fatalf("%s: batch %+v, %d results", path, b, len(got))
		}
		for _, r := range got {
			if r.Kind != sluice.ResultRetryable || r.Line.Error == nil || r.Line.Error.Code != sluice.CodeBatchCancelled {
				t.Fatalf("%s: %+v, want a cancelled request", path, r)
			}
		}
	}
}

// TestXAICreatesPaced: creates are at least CreateInterval apart (the
// default, one a second, is xAI's limit), so the emulator, which refuses a
// second create within a second, is never refused. The client and the
// emulator share a fake clock that moves only when the client waits, so
// the creates are as far apart as the client's pacing makes them, and the
// test does not sleep through it.
func TestXAICreatesPaced(t *testing.T) {
	clock := httpx.NewFakeClock(time.Now())
	_, root := ptest.Emulator(t, emulator.Options{BatchTime: time.Hour, Now: clock.Now}, nil)
	c := newClient(t, root, func(c *xai.Config) {
		c.CreateInterval, c.Retry, c.Clock = 0, httpx.Retry{MaxAttempts: 1}, clock
	})
	var times []time.Time
	for i := 1; i <= 3; i++ {
		ref := ptest.Chunk(t, provider.Presets["xai"].Codec(), "job-pace", int64(i), 1, "grok-4-fast", "a", "b")
		b := create(t, c, ref)
		var w struct {
			Created time.Time `json:"create_time"`
		}
		getJSON(t, root+"/xai/v1/batches/"+b.ID, &w)
		times = append(times, w.Created)
	}
	for i := 1; i < len(times); i++ {
		if d := times[i].Sub(times[i-1]); d < 990*time.Millisecond {
			t.Fatalf("creates %d and %d %s apart", i, i+1, d)
		}
	}
}

// TestXAIDecodeLine: results rows map to answers by batch_request_id.
func TestXAIDecodeLine(t *testing.T) {
	for _, tc := range []struct {
		line   string
		kind   sluice.ResultKind
		status int
		code   sluice.ErrorCode
	}{
		{`{"batch_request_id":"a","batch_result":{"response":{"chat_get_completion":{"object":"chat.completion","usage":{"prompt_tokens":3,"completion_tokens":4}}}}}`, sluice.ResultSucceeded, 200, ""},
		{`{"batch_request_id":"a","batch_result":{"error":{"code":8,"message":"slow down"}}}`, sluice.ResultRetryable, 429, ""},
		{`{"batch_request_id":"a","batch_result":{"error":{"code":13,"message":"oops"}}}`, sluice.ResultRetryable, 500, ""},
		{`{"batch_request_id":"a","batch_result":{"error":{"code":3,"message":"bad"}}}`, sluice.ResultFailed, 400, ""},
		{`{"batch_request_id":"a","error":{"code":3,"message":"bad"}}`, sluice.ResultFailed, 400, ""},
		{`{"batch_request_id":"a","batch_result":{"error":{"code":1,"message":"cancelled"}}}`, sluice.ResultRetryable, 0, sluice.CodeBatchCancelled},
	} {
		r, err := xai.DecodeLine([]byte(tc.line))
		if err != nil || r.CustomID != "a" || r.Kind != tc.kind {
			t.Fatalf("%s: %+v %v", tc.line, r, err)
		}
		if tc.status != 0 && (r.Line.Response == nil || r.Line.Response.StatusCode != tc.status) {
			t.Fatalf("%s: response %+v, want status %d", tc.line, r.Line.Response, tc.status)
		}
		if tc.code != "" && (r.Line.Error == nil || r.Line.Error.Code != tc.code) {
			t.Fatalf("%s: error %+v, want %s", tc.line, r.Line.Error, tc.code)
		}
		if tc.status == 200 && (r.Usage.InputTokens != 3 || r.Usage.OutputTokens != 4) {
			t.Fatalf("usage %+v", r.Usage)
		}
	}
	for _, bad := range []string{`{}`, `{"batch_request_id":"a"}`, `{"batch_request_id":"a","batch_result":{}}`,
		`{"batch_request_id":"a","batch_result":{"error":{"code":99}}}`, `not json`} {
		if _, err := xai.DecodeLine([]byte(bad)); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
}

func chunkLines(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]byte
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, bytes.Clone(sc.Bytes()))
	}
	return out
}

func postJSON(t *testing.T, url string, body, out any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+ptest.Key)
	req.Header.Set("Content-Type", "application/json")
	do(t, req, out)
}

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+ptest.Key)
	do(t, req, out)
}

func do(t *testing.T, req *http.Request, out any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %s", req.Method, req.URL, resp.Status)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
}
