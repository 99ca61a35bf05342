package cloudflare_test

import (
	"context"
	"fmt"
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
)

// modelChunk writes a chunk of n requests for model with the body each
// request gets from body(i).
func modelChunk(t *testing.T, model string, n int, body func(int) string) sluice.BatchRef {
	t.Helper()
	codec := provider.Presets["cloudflare"].Codec()
	env := codec.Envelope()
	buf := append([]byte(nil), env.Header...)
	for i := range n {
		if i > 0 {
			buf = append(buf, env.Sep...)
		}
		it := &sluice.Item{CustomID: fmt.Sprint("r", i), URL: "/ai/run/" + model, Body: []byte(body(i))}
		if err := codec.Validate(it); err != nil {
			t.Fatal(err)
		}
		var err error
		if buf, err = codec.AppendItem(buf, it); err != nil {
			t.Fatal(err)
		}
	}
	buf = append(buf, env.Footer...)
	path := filepath.Join(t.TempDir(), "chunk.json")
	if err := os.WriteFile(path, buf, 0o600); err != nil {
		t.Fatal(err)
	}
	return sluice.BatchRef{Job: "job", Chunk: 1, Attempt: 1, URL: "/ai/run/" + model, Model: model,
		Path: path, Requests: n, Bytes: int64(len(buf)), IntentAt: time.Now()}
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
