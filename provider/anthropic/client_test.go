package anthropic_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/anthropic"
	"github.com/sluice-batch/sluice/provider/httpx"
	"github.com/sluice-batch/sluice/provider/internal/ptest"
)

const testKey = "sk-ant-test-0123456789"

func startEmulator(t *testing.T, o emulator.Options) (*emulator.Server, string) {
	t.Helper()
	o.APIKey = testKey
	return ptest.Emulator(t, o, nil)
}

func newClient(t *testing.T, base string, mod ...func(*anthropic.Config)) *anthropic.Client {
	t.Helper()
	return ptest.Client(t, anthropic.New, anthropic.Config{Config: ptest.Config(base, testKey)}, mod...)
}

// writeChunk writes a chunk file exactly as the splitter does (through
// the preset's codec) and returns its ref.
func writeChunk(t *testing.T, job string, chunk int64, ids ...string) sluice.BatchRef {
	t.Helper()
	items := make([]*sluice.Item, len(ids))
	for i, id := range ids {
		body := fmt.Sprintf(`{"model":"claude-haiku-4-5","max_tokens":32,"messages":[{"role":"user","content":"hello %s"}]}`, id)
		items[i] = &sluice.Item{CustomID: id, URL: "/v1/messages", Model: "claude-haiku-4-5", Body: []byte(body)}
	}
	return ptest.WriteChunk(t, provider.Presets["anthropic"].Codec(), sluice.BatchRef{Job: job, Chunk: chunk, Attempt: 1, URL: "/v1/messages", Model: "claude-haiku-4-5"}, items...)
}

func ids(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func run(t *testing.T, c *anthropic.Client, ref sluice.BatchRef, b sluice.Batch) (sluice.Batch, map[string]sluice.Result) {
	t.Helper()
	return ptest.Finish(t, c, ref, b)
}

func TestEmulatorFullCycle(t *testing.T) {
	_, base := startEmulator(t, emulator.Options{Seed: 1, LineErrorRate: 0.2})
	c := newClient(t, base)
	ref := writeChunk(t, "job-a", 1, ids(40, "r")...)
	b, err := c.Create(context.Background(), ref, "")
	if err != nil {
		t.Fatal(err)
	}
	if b.ID == "" || b.Total != 40 {
		t.Fatalf("created %+v", b)
	}
	b, got := run(t, c, ref, b)
	if b.Status != sluice.BatchCompleted || len(got) != 40 {
		t.Fatalf("batch %+v, %d results", b, len(got))
	}
	kinds := map[sluice.ResultKind]int{}
	for _, r := range got {
		kinds[r.Kind]++
		switch r.Kind {
		case sluice.ResultSucceeded:
			if r.Line.Response.StatusCode != 200 || r.Usage.OutputTokens == 0 || !bytes.Contains(r.Line.Response.Body, []byte(`"type":"message"`)) {
				t.Errorf("success %+v", r)
			}
		default:
			if r.Line.Response == nil || r.Line.Response.StatusCode < 400 {
				t.Errorf("error %+v", r.Line)
			}
		}
	}
	if kinds[sluice.ResultSucceeded] == 0 || kinds[sluice.ResultSucceeded] == 40 {
		t.Errorf("kinds %v", kinds)
	}
}

// TestEmulatorFaultsNoDuplicates: with a third of the calls answered 429,
// 5xx or a reset mid-answer (after the batch was made), the cycle ends and
// no batch is created twice.
func TestEmulatorFaultsNoDuplicates(t *testing.T) {
	// One clock for both: Find's window is read on the client's clock
	// against the emulator's stamps, and the retries' waits advance it.
	clock := httpx.NewFakeClock(time.Now())
	s, base := startEmulator(t, emulator.Options{Seed: 8, HTTPFaultRate: 0.35, FaultKinds: []string{"reset", "429", "503"}, Now: clock.Now})
	c := newClient(t, base, func(cfg *anthropic.Config) { cfg.Retry = httpx.Retry{MaxAttempts: 20}; cfg.Clock = clock })
	for i := int64(1); i <= 6; i++ {
		ref := writeChunk(t, "job-f", i, ids(int(5+i), fmt.Sprintf("c%d", i))...)
		b, err := c.Create(context.Background(), ref, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, got := run(t, c, ref, b); len(got) != ref.Requests {
			t.Fatalf("chunk %d: %d results", i, len(got))
		}
	}
	st := s.Stats()
	if st.FaultsReset == 0 || st.BatchesCreated != 6 || st.RequestsProcessedMoreThanOnce != 0 {
		t.Fatalf("stats: resets %d, batches %d, twice %d", st.FaultsReset, st.BatchesCreated, st.RequestsProcessedMoreThanOnce)
	}
}

// loseFirst serves h, but the first call to method path takes effect and
// loses its answer: the connection is reset.
func loseFirst(h http.Handler, method, path string) http.Handler {
	var once sync.Once
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lose := false
		if r.Method == method && r.URL.Path == path {
			once.Do(func() { lose = true })
		}
		if !lose {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
	})
}

func TestLostCreateAnswerIsReconciled(t *testing.T) {
	s, err := emulator.New(emulator.Options{Seed: 4, APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(loseFirst(s.Handler(), "POST", "/v1/messages/batches"))
	defer srv.Close()
	c := newClient(t, srv.URL)
	ref := writeChunk(t, "job-l", 1, ids(3, "l")...)
	b, err := c.Create(context.Background(), ref, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, got := run(t, c, ref, b); len(got) != 3 {
		t.Fatalf("%d results", len(got))
	}
	if st := s.Stats(); st.BatchesCreated != 1 {
		t.Fatalf("%d batches created", st.BatchesCreated)
	}
}

func TestFindAfterCrash(t *testing.T) {
	_, base := startEmulator(t, emulator.Options{Seed: 2, BatchTime: time.Hour})
	ctx := context.Background()
	// Other batches: another size, and the same size made long ago is
	// outside the window (simulated by the intent time).
	newClient(t, base).Create(ctx, writeChunk(t, "job", 1, ids(3, "x")...), "")
	ref := writeChunk(t, "job", 2, ids(5, "y")...)
	created, err := newClient(t, base).Create(ctx, ref, "") // then the process dies
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, base)
	if _, batchID, err := c.Find(ctx, ref); err != nil || batchID != created.ID {
		t.Fatalf("find: %q %v (want %s)", batchID, err, created.ID)
	}
	old := ref
	old.IntentAt = time.Now().Add(-2 * time.Hour)
	if _, batchID, err := newClient(t, base).Find(ctx, old); err != nil || batchID != "" {
		t.Fatalf("find outside the window: %q %v", batchID, err)
	}
	// Claimed batches are never adopted.
	claimed := newClient(t, base, func(cfg *anthropic.Config) { cfg.Claimed = func(id string) bool { return id == created.ID } })
	if _, batchID, err := claimed.Find(ctx, ref); err != nil || batchID != "" {
		t.Fatalf("find claimed: %q %v", batchID, err)
	}
	// Two unclaimed batches of the same size in the window: ambiguous.
	newClient(t, base).Create(ctx, writeChunk(t, "job", 3, ids(5, "z")...), "")
	if _, _, err := newClient(t, base).Find(ctx, ref); !errors.Is(err, anthropic.ErrAmbiguous) {
		t.Fatalf("want ambiguous, got %v", err)
	}
	// No intent time: nothing to reconcile with.
	ref.IntentAt = time.Time{}
	if _, _, err := c.Find(ctx, ref); !errors.Is(err, sluice.ErrNoListing) {
		t.Fatalf("no intent: %v", err)
	}
}

func TestCancel(t *testing.T) {
	clock := httpx.NewFakeClock(time.Now())
	_, base := startEmulator(t, emulator.Options{Seed: 3, BatchTime: time.Hour, Now: clock.Now})
	c := newClient(t, base)
	ref := writeChunk(t, "job-c", 1, ids(4, "q")...)
	b, err := c.Create(context.Background(), ref, "")
	if err != nil {
		t.Fatal(err)
	}
	if b, err = c.Cancel(context.Background(), b.ID); err != nil || (b.Status != sluice.BatchCancelling && b.Status != sluice.BatchCancelled) {
		t.Fatalf("cancel: %+v %v", b, err)
	}
	clock.Advance(7 * time.Minute) // the emulator takes BatchTime/10 to cancel
	b, got := run(t, c, ref, b)
	if b.Status != sluice.BatchCancelled || len(got) != 4 {
		t.Fatalf("batch %+v results %d", b, len(got))
	}
	for _, r := range got {
		if r.Kind != sluice.ResultRetryable || r.Line.Error == nil || r.Line.Error.Code != sluice.CodeBatchCancelled {
			t.Errorf("result %+v", r.Line)
		}
	}
	if _, err := c.Poll(context.Background(), ref, "msgbatch_nope"); !errors.Is(err, sluice.ErrNotFound) {
		t.Fatalf("poll unknown: %v", err)
	}
}

// TestWire: the create streams the chunk file byte for byte with an exact
// Content-Length and the Anthropic headers; results are asked as JSONL,
// and a results_url on another host is not followed with the key.
func TestWire(t *testing.T) {
	ref := writeChunk(t, "job-w", 1, "a", "b")
	want, _ := os.ReadFile(ref.Path)
	var gotResults string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("x-api-key") != testKey || r.Header.Get("anthropic-version") != "2023-06-01" || r.Header.Get("Authorization") != "" {
			t.Errorf("headers %v", r.Header)
		}
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/messages/batches":
			body, _ := io.ReadAll(r.Body)
			if !bytes.Equal(body, want) || r.ContentLength != int64(len(want)) || r.Header.Get("Content-Type") != "application/json" {
				t.Errorf("create body: %d bytes (want %d), length %d, type %q", len(body), len(want), r.ContentLength, r.Header.Get("Content-Type"))
			}
			fmt.Fprint(w, `{"id":"msgbatch_1","type":"message_batch","processing_status":"in_progress","request_counts":{"processing":2,"succeeded":0,"errored":0,"canceled":0,"expired":0},"created_at":"2024-09-24T18:37:24.100435Z","cancel_initiated_at":null,"results_url":null}`)
		case r.URL.Path == "/v1/messages/batches/msgbatch_1/results":
			gotResults = r.Header.Get("Accept")
			fmt.Fprint(w, `{"custom_id":"a","result":{"type":"expired"}}`+"\n")
		default:
			t.Errorf("unexpected %s %s", r.Method, r.URL)
		}
	}))
	defer srv.Close()
	c := newClient(t, srv.URL)
	b, err := c.Create(context.Background(), ref, "")
	if err != nil || b.ID != "msgbatch_1" || b.Status != sluice.BatchInProgress || b.Total != 2 {
		t.Fatalf("create %+v %v", b, err)
	}
	b.OutputFileID = "https://evil.example/v1/messages/batches/msgbatch_1/results"
	files, err := c.Fetch(context.Background(), ref, b, t.TempDir())
	if err != nil || len(files) != 1 || gotResults != "application/x-jsonl" {
		t.Fatalf("fetch %v %v accept %q", files, err, gotResults)
	}
	if _, err := c.Upload(context.Background(), ref); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("upload: %v", err)
	}
}

func TestDecodeLine(t *testing.T) {
	for _, tc := range []struct {
		line   string
		kind   sluice.ResultKind
		status int
		code   sluice.ErrorCode
		in     int64
	}{
		{`{"custom_id":"a","result":{"type":"succeeded","message":{"id":"msg_1","type":"message","usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":3}}}}`, sluice.ResultSucceeded, 200, "", 15},
		{`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"m"},"request_id":"req_1"}}}`, sluice.ResultFailed, 400, "", 0},
		{`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"authentication_error","message":"m"}}}}`, sluice.ResultFailed, 401, "", 0},
		{`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"permission_error","message":"m"}}}}`, sluice.ResultFailed, 403, "", 0},
		{`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"not_found_error","message":"m"}}}}`, sluice.ResultFailed, 404, "", 0},
		{`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"request_too_large","message":"m"}}}}`, sluice.ResultFailed, 413, "", 0},
		{`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"rate_limit_error","message":"m"}}}}`, sluice.ResultRetryable, 429, "", 0},
		{`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"api_error","message":"m"}}}}`, sluice.ResultRetryable, 500, "", 0},
		{`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"overloaded_error","message":"m"}}}}`, sluice.ResultRetryable, 529, "", 0},
		{`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"brand_new_error","message":"m"}}}}`, sluice.ResultRetryable, 500, "", 0},
		{`{"custom_id":"a","result":{"type":"canceled"}}`, sluice.ResultRetryable, 0, sluice.CodeBatchCancelled, 0},
		{`{"custom_id":"a","result":{"type":"expired"}}`, sluice.ResultRetryable, 0, sluice.CodeBatchExpired, 0},
	} {
		r, err := anthropic.DecodeLine([]byte(tc.line))
		if err != nil || r.Kind != tc.kind || r.CustomID != "a" || r.Usage.InputTokens != tc.in {
			t.Errorf("%s: %+v %v", tc.line, r, err)
			continue
		}
		if tc.status != 0 && (r.Line.Response == nil || r.Line.Response.StatusCode != tc.status) {
			t.Errorf("%s: response %+v", tc.line, r.Line.Response)
		}
		if tc.code != "" && (r.Line.Error == nil || r.Line.Error.Code != tc.code || r.Line.Response != nil) {
			t.Errorf("%s: error %+v", tc.line, r.Line.Error)
		}
		if tc.status == 400 {
			if r.Line.Response.RequestID != "req_1" || !json.Valid(r.Line.Response.Body) || !strings.Contains(string(r.Line.Response.Body), "invalid_request_error") {
				t.Errorf("errored body %s", r.Line.Response.Body)
			}
		}
	}
	for _, bad := range []string{`{"result":{"type":"expired"}}`, `{"custom_id":"a"}`, `{"custom_id":"a","result":{"type":"odd"}}`,
		`{"custom_id":"a","result":{"type":"succeeded"}}`, `nope`} {
		if _, err := anthropic.DecodeLine([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestDecodeMalformedNamesFileAndLine(t *testing.T) {
	path := ptest.WriteFile(t, "results.jsonl", `{"custom_id":"a","result":{"type":"expired"}}`+"\n"+`{"custom_id":`+"\n")
	_, err := ptest.Decode(newClient(t, "http://127.0.0.1:1"), nil, path)
	var me *provider.MalformedError
	if !errors.As(err, &me) || me.File != path || me.Line != 2 {
		t.Fatalf("err %v", err)
	}
}

func FuzzDecodeLine(f *testing.F) {
	f.Add([]byte(`{"custom_id":"a","result":{"type":"succeeded","message":{"usage":{"input_tokens":1}}}}`))
	f.Add([]byte(`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"x"}}}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := anthropic.DecodeLine(line)
		if err == nil && (r.CustomID == "" || (r.Line.Response == nil && r.Line.Error == nil)) {
			t.Fatalf("accepted %q as %+v", line, r)
		}
	})
}

// TestFindNeverAdoptsAnEarlierBatch: a batch of the chunk's request count
// stamped before the chunk's create intent (less the clocks' skew) was made
// for something else, such as another state directory's run of the same
// job on other content, and is never adopted (issue 21, item 1); one
// stamped within the skew still is.
func TestFindNeverAdoptsAnEarlierBatch(t *testing.T) {
	clock := httpx.NewFakeClock(time.Now())
	_, base := startEmulator(t, emulator.Options{Seed: 2, BatchTime: time.Hour, Now: clock.Now})
	ctx := context.Background()
	c := newClient(t, base, func(cfg *anthropic.Config) { cfg.Clock = clock })
	earlier := writeChunk(t, "job", 1, ids(5, "a")...)
	made, err := c.Create(ctx, earlier, "")
	if err != nil {
		t.Fatal(err)
	}
	ref := writeChunk(t, "job", 1, ids(5, "d")...) // same job, chunk and count; other bytes
	ref.IntentAt = clock.Now().Add(anthropic.DefaultFindSkew + time.Second)
	if _, batchID, err := newClient(t, base).Find(ctx, ref); err != nil || batchID != "" {
		t.Fatalf("adopted %q (%v), a batch stamped %v before the intent", batchID, err, anthropic.DefaultFindSkew+time.Second)
	}
	ref.IntentAt = clock.Now().Add(anthropic.DefaultFindSkew / 2)
	if _, batchID, err := newClient(t, base).Find(ctx, ref); err != nil || batchID != made.ID {
		t.Fatalf("find within the skew: %q %v, want %s", batchID, err, made.ID)
	}
}
