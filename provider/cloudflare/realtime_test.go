package cloudflare_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/emulator"
)

// TestCallRealtime: a chunk item goes to the model's run URL (slashes
// literal, no queueRequest) without its external_reference, naming its
// job and custom_id; the answer is the batch item's shape (status 200,
// body the result) and the emulator counts it, twice when sent twice. An
// input the model refuses is that request's 400, not the call's error.
func TestCallRealtime(t *testing.T) {
	s, err := emulator.New(emulator.Options{APIKey: testToken})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []*http.Request
	var bodies [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen, bodies = append(seen, r), append(bodies, b)
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		s.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); s.Close() })
	c := newClient(t, srv.URL+"/client/v4")
	ref := writeChunk(t, 1, "doc/1")
	chunk, err := os.ReadFile(ref.Path)
	if err != nil {
		t.Fatal(err)
	}
	item := []byte(gjson.GetBytes(chunk, "requests.0").Raw)
	for n := 1; n <= 2; n++ {
		res, err := c.CallRealtime(context.Background(), ref, item)
		if err != nil {
			t.Fatal(err)
		}
		if res.CustomID != "doc/1" || res.Kind != sluice.ResultSucceeded || res.Line.Response == nil || res.Line.Response.StatusCode != 200 ||
			!gjson.GetBytes(res.Line.Response.Body, "response").Exists() {
			t.Fatalf("call %d: %+v %+v", n, res, res.Line.Response)
		}
		if st := s.Stats(); st.RequestsProcessed != int64(n) || st.RequestsProcessedMoreThanOnce != int64(n-1) {
			t.Fatalf("call %d: processed %d, twice %d", n, st.RequestsProcessed, st.RequestsProcessedMoreThanOnce)
		}
	}
	r, b := seen[0], bodies[0]
	if !strings.HasSuffix(r.URL.EscapedPath(), "/accounts/"+account+"/ai/run/"+llm) || r.URL.RawQuery != "" ||
		r.Header.Get("X-Sluice-Job") != "job" || r.Header.Get("X-Sluice-Custom-Id") != "doc%2F1" ||
		gjson.GetBytes(b, "external_reference").Exists() || !gjson.GetBytes(b, "prompt").Exists() {
		t.Fatalf("sent %s?%s %v %s", r.URL.EscapedPath(), r.URL.RawQuery, r.Header, b)
	}
	bad := []byte(`{"prompt":5,"external_reference":"doc-bad"}`)
	res, err := c.CallRealtime(context.Background(), ref, bad)
	if err != nil || res.CustomID != "doc-bad" || res.Kind != sluice.ResultFailed || res.Line.Error == nil {
		t.Fatalf("refused input: %+v %v", res, err)
	}
	if _, err := c.CallRealtime(context.Background(), ref, []byte(`{"prompt":"no reference"}`)); err == nil {
		t.Fatal("an item without external_reference was sent")
	}
}
