package cloudflare_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/cloudflare"
	"github.com/sluice-batch/sluice/provider/httpx"
	"github.com/sluice-batch/sluice/provider/internal/ptest"
)

const (
	testToken = "cf-test-token-0123456789"
	account   = "acct123"
	llm       = "@cf/meta/llama-3.3-70b-instruct-fp8-fast"
)

func startEmulator(t *testing.T, o emulator.Options) (*emulator.Server, string) {
	t.Helper()
	o.APIKey = testToken
	s, root := ptest.Emulator(t, o, nil)
	return s, root + "/client/v4"
}

func newClient(t *testing.T, base string, mod ...func(*cloudflare.Config)) *cloudflare.Client {
	t.Helper()
	return ptest.Client(t, cloudflare.New, cloudflare.Config{BaseURL: base, AccountID: account, APIToken: testToken, TempDir: t.TempDir(),
		Clock: httpx.NewFakeClock(time.Now()), RateLimit: httpx.RateLimit{PerSecond: -1}}, mod...)
}

// writeChunk writes a chunk file through the preset's codec.
func writeChunk(t *testing.T, chunk int64, ids ...string) sluice.BatchRef {
	t.Helper()
	items := make([]*sluice.Item, len(ids))
	for i, id := range ids {
		items[i] = &sluice.Item{CustomID: id, URL: "/ai/run/" + llm, Body: []byte(fmt.Sprintf(`{"prompt":"tell me about %s","max_tokens":20}`, id))}
	}
	return ptest.WriteChunk(t, provider.Presets["cloudflare"].Codec(), sluice.BatchRef{Job: "job", Chunk: chunk, Attempt: 1, URL: "/ai/run/" + llm, Model: llm}, items...)
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("doc-%d", i)
	}
	return out
}

func run(t *testing.T, c *cloudflare.Client, ref sluice.BatchRef, b sluice.Batch, lookup func(int) (string, bool)) (sluice.Batch, map[string]sluice.Result) {
	t.Helper()
	return ptest.FinishLookup(t, c, ref, b, lookup)
}

func TestEmulatorFullCycle(t *testing.T) {
	for _, errString := range []bool{false, true} {
		t.Run(fmt.Sprintf("error-string-%v", errString), func(t *testing.T) {
			_, base := startEmulator(t, emulator.Options{Seed: 5, LineErrorRate: 0.3, CloudflareItemErrorString: errString})
			c := newClient(t, base)
			ref := writeChunk(t, 1, ids(30)...)
			b, err := c.Create(context.Background(), ref, "")
			if err != nil || b.ID == "" {
				t.Fatalf("create %+v %v", b, err)
			}
			b, got := run(t, c, ref, b, nil)
			if b.Status != sluice.BatchCompleted || len(got) != 30 {
				t.Fatalf("batch %+v, %d results", b, len(got))
			}
			withUsage, kinds := 0, map[sluice.ResultKind]int{}
			for _, r := range got {
				kinds[r.Kind]++
				if r.Usage != (sluice.Usage{}) {
					withUsage++
				}
				if r.Kind == sluice.ResultSucceeded && (r.Line.Response.StatusCode != 200 || !bytes.Contains(r.Line.Response.Body, []byte("response"))) {
					t.Errorf("success %s", r.Line.Response.Body)
				}
				if r.Kind != sluice.ResultSucceeded && r.Line.Response.StatusCode < 400 {
					t.Errorf("failure %+v", r.Line.Response)
				}
			}
			if withUsage != 1 || kinds[sluice.ResultSucceeded] == 0 || kinds[sluice.ResultSucceeded] == 30 {
				t.Fatalf("usage on %d results; kinds %v", withUsage, kinds)
			}
			if errString && kinds[sluice.ResultFailed] != 0 {
				t.Errorf("a bare error message must be retryable: %v", kinds)
			}
		})
	}
}

// TestEmulatorFaults: 429s and 5xx on a third of the calls; the cycle
// ends on a fake clock.
func TestEmulatorFaults(t *testing.T) {
	s, base := startEmulator(t, emulator.Options{Seed: 9, HTTPFaultRate: 0.35, FaultKinds: []string{"429", "500", "503"}, BatchTime: 0})
	c := newClient(t, base, func(cfg *cloudflare.Config) { cfg.Retry = httpx.Retry{MaxAttempts: 20} })
	for i := int64(1); i <= 4; i++ {
		ref := writeChunk(t, i, ids(int(3*i))...)
		b, err := c.Create(context.Background(), ref, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, got := run(t, c, ref, b, nil); len(got) != ref.Requests {
			t.Fatalf("chunk %d: %d results", i, len(got))
		}
	}
	if st := s.Stats(); st.FaultsInjected == 0 || st.BatchesCreated != 4 {
		t.Fatalf("stats %+v", st)
	}
}

// pollFake is Cloudflare's async REST API for one queued batch, req-1:
// the create must carry the chunk's exact bytes, and the polls answer
// queued, running, then the final answer; it records each poll's query.
type pollFake struct {
	t     *testing.T
	want  []byte
	mu    sync.Mutex
	polls []string // the queries of the polls since the last reset
	count int      // every poll, never reset
}

func (f *pollFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := f.t
	if r.Header.Get("Authorization") != "Bearer "+testToken || r.URL.Path != "/client/v4/accounts/"+account+"/ai/run/"+llm {
		t.Errorf("request %s %v", r.URL.Path, r.Header)
	}
	body, _ := io.ReadAll(r.Body)
	if bytes.Contains(body, []byte(`"requests"`)) {
		if !bytes.Equal(body, f.want) || r.ContentLength != int64(len(f.want)) || r.URL.RawQuery != "queueRequest=true" {
			t.Errorf("create: %d bytes, length %d, query %q", len(body), r.ContentLength, r.URL.RawQuery)
		}
		fmt.Fprint(w, `{"result":{"status":"queued","request_id":"req-1","model":"m"},"success":true,"errors":[],"messages":[]}`)
		return
	}
	f.mu.Lock()
	f.polls = append(f.polls, r.URL.RawQuery)
	f.count++
	n := f.count
	f.mu.Unlock()
	if string(body) != `{"request_id":"req-1"}` {
		t.Errorf("poll body %s", body)
	}
	switch n {
	case 1:
		fmt.Fprint(w, `{"result":{"status":"queued","request_id":"req-1"},"success":true,"errors":[],"messages":[]}`)
	case 2:
		fmt.Fprint(w, `{"result":{"status":"running","request_id":"req-1"},"success":true,"errors":[],"messages":[]}`)
	default:
		fmt.Fprint(w, `{"success":true,"result":{"usage":{"prompt_tokens":22,"completion_tokens":243},"responses":[`+
			`{"id":1,"result":{"response":"B"},"success":true,"external_reference":"b"},`+
			`{"id":0,"result":{"response":"A"},"success":true}]},"errors":[],"messages":[]}`)
	}
}

// TestPollWire: the create is the chunk file byte for byte with an exact
// length; polls keep ?queueRequest=true unless configured not to; pending
// answers leave no files behind.
func TestPollWire(t *testing.T) {
	ref := writeChunk(t, 1, "a", "b")
	want, _ := os.ReadFile(ref.Path)
	fake := &pollFake{t: t, want: want}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	tmp := t.TempDir()
	c := newClient(t, srv.URL+"/client/v4", func(cfg *cloudflare.Config) { cfg.TempDir = tmp })
	b, err := c.Create(context.Background(), ref, "")
	if err != nil || b.ID != "req-1" || b.Status != sluice.BatchValidating {
		t.Fatalf("create %+v %v", b, err)
	}
	for _, want := range []sluice.BatchStatus{sluice.BatchValidating, sluice.BatchInProgress} {
		b, err = c.Poll(context.Background(), ref, b.ID)
		if err != nil || b.Status != want {
			t.Fatalf("poll %+v %v, want %s", b, err, want)
		}
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Fatalf("pending polls left %d files", len(ents))
	}
	lookup := func(i int) (string, bool) { return []string{"a", "b"}[i], true }
	b, got := run(t, c, ref, b, lookup)
	if b.Status != sluice.BatchCompleted || got["a"].Line.Response == nil || string(got["a"].Line.Response.Body) != `{"response":"A"}` ||
		string(got["b"].Line.Response.Body) != `{"response":"B"}` {
		t.Fatalf("results %+v", got)
	}
	if u := got["b"].Usage; u.InputTokens != 22 || u.OutputTokens != 243 || got["a"].Usage != (sluice.Usage{}) {
		t.Fatalf("usage a %+v b %+v", got["a"].Usage, got["b"].Usage)
	}
	for _, q := range fake.polls {
		if q != "queueRequest=true" {
			t.Fatalf("poll query %q", q)
		}
	}
	// The knob: polls without queueRequest.
	fake.polls = nil
	c2 := newClient(t, srv.URL+"/client/v4", func(cfg *cloudflare.Config) { cfg.PollWithoutQueueRequest = true })
	c2.Poll(context.Background(), ref, "req-1")
	if len(fake.polls) != 1 || fake.polls[0] != "" {
		t.Fatalf("poll queries %q", fake.polls)
	}
	// Fetch when the final poll's file is gone polls again.
	if b, err := c.Poll(context.Background(), ref, "req-1"); err != nil || b.Status != sluice.BatchCompleted {
		t.Fatalf("final poll %+v %v", b, err)
	}
	ents, _ := os.ReadDir(tmp)
	if len(ents) != 1 {
		t.Fatalf("the final poll left %d files, want its answer", len(ents))
	}
	os.Remove(filepath.Join(tmp, ents[0].Name()))
	n := len(fake.polls)
	files, err := c.Fetch(context.Background(), ref, sluice.Batch{ID: "req-1"}, t.TempDir())
	if err != nil || len(files) != 1 || len(fake.polls) != n+1 {
		t.Fatalf("fetch again: %v %v after %d polls, want one more", files, err, len(fake.polls)-n)
	}
	// And a client that never polled the batch (a new run) polls it too.
	c3 := newClient(t, srv.URL+"/client/v4", func(cfg *cloudflare.Config) { cfg.TempDir = t.TempDir() })
	if files, err := c3.Fetch(context.Background(), ref, sluice.Batch{ID: "req-1"}, t.TempDir()); err != nil || len(files) != 1 {
		t.Fatalf("fetch by a new client: %v %v", files, err)
	}
}

func TestNoListingNoCancel(t *testing.T) {
	c := newClient(t, "http://127.0.0.1:1/client/v4")
	if _, _, err := c.Find(context.Background(), sluice.BatchRef{}); !errors.Is(err, sluice.ErrNoListing) {
		t.Fatal(err)
	}
	if _, err := c.Cancel(context.Background(), "x"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatal(err)
	}
	if c.Capabilities().Files || c.Name() != "cloudflare" || c.Limits().MaxBatchBytes != 9_999_999 {
		t.Fatal("preset")
	}
	if _, err := cloudflare.New(cloudflare.Config{}); err == nil {
		t.Fatal("no account id accepted")
	}
}

func TestDecodeItems(t *testing.T) {
	answer := `{"result":{"responses":[` + strings.Join([]string{
		`{"id":0,"result":{"response":"ok"},"success":true,"external_reference":"ok"}`,
		`{"id":1,"success":false,"external_reference":"str","error":"model crashed"}`,
		`{"id":2,"success":false,"external_reference":"bad","error":{"code":5004,"message":"Invalid data"}}`,
		`{"id":3,"success":false,"external_reference":"busy","errors":[{"code":3040,"message":"Out of capacity"}]}`,
		`{"id":4,"success":false,"external_reference":"gone","error":{"code":"x","message":"m","status":404}}`,
		`{"id":5,"success":false,"external_reference":"slow","error":{"code":3007,"message":"timeout"}}`,
		`{"id":6,"result":{"response":"by index"},"success":true}`,
	}, ",") + `]},"success":true,"errors":[],"messages":[]}`
	c := newClient(t, "http://127.0.0.1:1/client/v4")
	lookup := func(i int) (string, bool) { return fmt.Sprintf("index-%d", i), true }
	rs, err := ptest.Decode(c, lookup, ptest.WriteFile(t, "answer.json", answer))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]sluice.Result{}
	for _, r := range rs {
		got[r.CustomID] = r
	}
	for id, want := range map[string]struct {
		kind   sluice.ResultKind
		status int
	}{
		"ok": {sluice.ResultSucceeded, 200}, "str": {sluice.ResultRetryable, 500}, "bad": {sluice.ResultFailed, 400},
		"busy": {sluice.ResultRetryable, 429}, "gone": {sluice.ResultFailed, 404}, "slow": {sluice.ResultRetryable, 408},
		"index-6": {sluice.ResultSucceeded, 200},
	} {
		r, ok := got[id]
		if !ok || r.Kind != want.kind || r.Line.Response.StatusCode != want.status {
			t.Errorf("%s: %+v", id, r)
		}
	}
	if b := string(got["bad"].Line.Response.Body); b != `{"error":{"code":5004,"message":"Invalid data"}}` {
		t.Errorf("body %s", b)
	}
	// An item naming no custom_id, and a truncated answer, are malformed.
	for _, bad := range []string{`{"result":{"responses":[{"id":9,"success":true}]}}`, `{"result":{"responses":[{"id":0,"success":tr`} {
		_, err := ptest.Decode(c, nil, ptest.WriteFile(t, "answer.json", bad))
		if !errors.Is(err, provider.ErrMalformed) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// TestDecodeLargeAnswerStreams: an answer of 20,000 items decodes item by
// item with usage before or after the responses.
func TestDecodeLargeAnswerStreams(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"success":true,"result":{"usage":{"prompt_tokens":1,"completion_tokens":2},"responses":[`)
	for i := 0; i < 20000; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%d,"result":{"response":%q},"success":true,"external_reference":"r%d"}`, i, strings.Repeat("z", 200), i)
	}
	b.WriteString(`]}}`)
	c := newClient(t, "http://127.0.0.1:1/client/v4")
	rs, err := ptest.Decode(c, nil, ptest.WriteFile(t, "answer.json", b.String()))
	n, usage := len(rs), sluice.Usage{}
	for _, r := range rs {
		usage.InputTokens += r.Usage.InputTokens
		usage.OutputTokens += r.Usage.OutputTokens
	}
	if err != nil || n != 20000 || usage != (sluice.Usage{InputTokens: 1, OutputTokens: 2}) {
		t.Fatalf("err %v n %d usage %+v", err, n, usage)
	}
}

func FuzzDecodeAnswer(f *testing.F) {
	f.Add([]byte(`{"result":{"responses":[{"id":0,"result":{"response":"A"},"success":true,"external_reference":"a"}],"usage":{"prompt_tokens":1}},"success":true}`))
	f.Add([]byte(`{"result":{"responses":[{"id":1,"success":false,"errors":[{"code":3040}]}]}}`))
	f.Add([]byte(`{"result":null,"success":false,"errors":[{"code":7003,"message":"x"}]}`))
	c, err := cloudflare.New(cloudflare.Config{AccountID: "a"})
	if err != nil {
		f.Fatal(err)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, answer []byte) {
		path := filepath.Join(dir, "answer.json")
		if err := os.WriteFile(path, answer, 0o600); err != nil {
			t.Fatal(err)
		}
		lookup := func(i int) (string, bool) { return "by-index", i >= 0 && i < 3 }
		c.Decode(context.Background(), sluice.BatchRef{}, []string{path}, lookup, func(r sluice.Result) error {
			if r.CustomID == "" || r.Line.Response == nil {
				t.Fatalf("result %+v from %q", r, answer)
			}
			return nil
		})
	})
}

// TestCutCreateAnswer: a create answer cut after its request_id keeps the
// batch; one cut inside the id cannot, and the create is repeated.
func TestCutCreateAnswer(t *testing.T) {
	ref := writeChunk(t, 1, "a")
	for _, tc := range []struct {
		partial string
		creates int
	}{
		{`{"result":{"status":"queued","request_id":"req-cut","mod`, 1},
		{`{"result":{"status":"queued","request_id":"req-c`, 2},
	} {
		var mu sync.Mutex
		creates := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			mu.Lock()
			creates++
			n := creates
			mu.Unlock()
			if n > 1 {
				fmt.Fprint(w, `{"result":{"status":"queued","request_id":"req-2"},"success":true,"errors":[],"messages":[]}`)
				return
			}
			conn, buf, _ := w.(http.Hijacker).Hijack()
			fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 300\r\n\r\n%s", tc.partial)
			buf.Flush()
			conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
		}))
		c := newClient(t, srv.URL+"/client/v4")
		b, err := c.Create(context.Background(), ref, "")
		srv.Close()
		want := map[int]string{1: "req-cut", 2: "req-2"}[tc.creates]
		if err != nil || b.ID != want || creates != tc.creates {
			t.Errorf("%s: batch %q err %v, %d creates", tc.partial, b.ID, err, creates)
		}
	}
}

// modelChunk writes a chunk of n requests for model with the body each
// request gets from body(i).
func modelChunk(t *testing.T, model string, n int, body func(int) string) sluice.BatchRef {
	t.Helper()
	items := make([]*sluice.Item, n)
	for i := range n {
		items[i] = &sluice.Item{CustomID: fmt.Sprint("r", i), URL: "/ai/run/" + model, Body: []byte(body(i))}
	}
	return ptest.WriteChunk(t, provider.Presets["cloudflare"].Codec(), sluice.BatchRef{Job: "job", Chunk: 1, Attempt: 1, URL: "/ai/run/" + model, Model: model}, items...)
}

// TestModelSlashesNotEncoded: the client sends the model's slashes as
// they are (/ai/run/@cf/meta/...), never %2F, which the live API answers
// 400 code 7000 "No route for that URI" and so does the emulator. Every
// create and poll is seen on the wire, and each batch runs to its end.
func TestModelSlashesNotEncoded(t *testing.T) {
	s, err := emulator.New(emulator.Options{APIKey: testToken})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var uris []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		uris = append(uris, r.RequestURI)
		mu.Unlock()
		s.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); s.Close() })
	c := newClient(t, srv.URL+"/client/v4")
	for model, body := range map[string]func(int) string{
		llm:                          func(i int) string { return fmt.Sprintf(`{"prompt":"p %d","max_tokens":8}`, i) },
		"@cf/baai/bge-small-en-v1.5": func(i int) string { return fmt.Sprintf(`{"text":["d %d"]}`, i) },
	} {
		mu.Lock()
		uris = nil
		mu.Unlock()
		ref := modelChunk(t, model, 5, body)
		b, err := c.Create(context.Background(), ref, "")
		if err != nil {
			t.Fatalf("%s: create: %v", model, err)
		}
		b, got := run(t, c, ref, b, nil)
		if b.Status != sluice.BatchCompleted || len(got) != 5 {
			t.Fatalf("%s: batch %+v, %d results", model, b, len(got))
		}
		for _, r := range got {
			if r.Kind != sluice.ResultSucceeded {
				t.Errorf("%s: %s %+v", model, r.CustomID, r.Line.Response)
			}
		}
		mu.Lock()
		want := "/client/v4/accounts/" + account + "/ai/run/" + model + "?queueRequest=true"
		if len(uris) < 2 {
			t.Errorf("%s: %d calls seen", model, len(uris))
		}
		for _, u := range uris {
			if u != want || strings.Contains(strings.ToLower(u), "%2f") {
				t.Errorf("%s: request URI %s, want %s", model, u, want)
			}
		}
		mu.Unlock()
	}
}
