// Package ptest holds what the tests of provider clients share: an
// emulator behind a loopback server, chunk files written by a provider's
// codec, a batch run to its end, and a handler that loses answers.
package ptest

import (
	"context"
	"encoding/json"
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
	"github.com/sluice-batch/sluice/provider/httpx"
)

// Key is the API key the emulators of these tests accept.
const Key = "test-key-123456"

// Config is the provider.Config of a client under test: base and key,
// a fake clock (no real waits between retries), and no rate limit.
func Config(base, key string) provider.Config {
	return provider.Config{BaseURL: base, APIKey: key, Clock: httpx.NewFakeClock(time.Now()), RateLimit: httpx.RateLimit{PerSecond: -1}}
}

// Emulator runs an emulator enforcing o.APIKey (default Key) behind a loopback server, its
// handler wrapped by wrap (nil: none), and returns it with its root URL.
func Emulator(t *testing.T, o emulator.Options, wrap func(http.Handler) http.Handler) (*emulator.Server, string) {
	t.Helper()
	if o.APIKey == "" {
		o.APIKey = Key
	}
	s, err := emulator.New(o)
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); s.Close() })
	return s, srv.URL
}

// Client is newClient(cfg) after each of mod has changed cfg: a provider
// client for a test, which fails on an error.
func Client[C, P any](t *testing.T, newClient func(C) (P, error), cfg C, mod ...func(*C)) P {
	t.Helper()
	for _, m := range mod {
		m(&cfg)
	}
	c, err := newClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Stats reads GET /_emulator/stats.
func Stats(t *testing.T, root string) emulator.Stats {
	t.Helper()
	resp, err := http.Get(root + "/_emulator/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st emulator.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// IDs are n custom_ids prefix-0 ... prefix-(n-1).
func IDs(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// Chunk writes a chunk file of chat requests for model with the given
// custom_ids, through codec, and returns its ref.
func Chunk(t *testing.T, codec sluice.Codec, job string, chunk int64, attempt int, model string, ids ...string) sluice.BatchRef {
	t.Helper()
	items := make([]*sluice.Item, len(ids))
	for i, id := range ids {
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi %s"}],"max_tokens":50}`, model, id)
		items[i] = &sluice.Item{CustomID: id, URL: "/v1/chat/completions", Model: model, Body: []byte(body),
			Raw: fmt.Appendf(nil, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":%s}`, id, body)}
	}
	return WriteChunk(t, codec, sluice.BatchRef{Job: job, Chunk: chunk, Attempt: attempt, URL: "/v1/chat/completions", Model: model}, items...)
}

// WriteChunk writes items through codec into one chunk file as the
// splitter does (each item validated, the codec's envelope around them)
// and returns ref with the file's path, count, size and digest, and
// IntentAt now.
func WriteChunk(t *testing.T, codec sluice.Codec, ref sluice.BatchRef, items ...*sluice.Item) sluice.BatchRef {
	t.Helper()
	env := codec.Envelope()
	buf := append([]byte(nil), env.Header...)
	for i, it := range items {
		if i > 0 {
			buf = append(buf, env.Sep...)
		}
		if err := codec.Validate(it); err != nil {
			t.Fatal(err)
		}
		var err error
		if buf, err = codec.AppendItem(buf, it); err != nil {
			t.Fatal(err)
		}
	}
	buf = append(buf, env.Footer...)
	ext := ".jsonl"
	if len(env.Header) > 0 {
		ext = ".json"
	}
	ref.Path = filepath.Join(t.TempDir(), fmt.Sprintf("chunk-%d-%d%s", ref.Chunk, ref.Attempt, ext))
	if err := os.WriteFile(ref.Path, buf, 0o600); err != nil {
		t.Fatal(err)
	}
	dg, err := sluice.ChunkDigest(ref.Path)
	if err != nil {
		t.Fatal(err)
	}
	ref.Requests, ref.Bytes, ref.IntentAt, ref.Digest = len(items), int64(len(buf)), time.Now(), dg
	return ref
}

// Cycle uploads ref, creates its batch and runs it to its end (Finish).
func Cycle(t *testing.T, p sluice.Provider, ref sluice.BatchRef) (sluice.Batch, map[string]sluice.Result) {
	t.Helper()
	return Finish(t, p, ref, Submit(t, p, ref))
}

// Submit uploads ref and creates its batch, failing the test on either
// error; it returns the batch as Create answered it.
func Submit(t *testing.T, p sluice.Provider, ref sluice.BatchRef) sluice.Batch {
	t.Helper()
	fileID, err := p.Upload(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Create(context.Background(), ref, fileID)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Finish polls b until it ends, fetches and decodes its results, and
// returns them by custom_id (a custom_id decoded twice fails the test).
func Finish(t *testing.T, p sluice.Provider, ref sluice.BatchRef, b sluice.Batch) (sluice.Batch, map[string]sluice.Result) {
	t.Helper()
	return FinishLookup(t, p, ref, b, nil)
}

// FinishLookup is Finish with the lookup Decode gets (for providers that
// answer by position).
func FinishLookup(t *testing.T, p sluice.Provider, ref sluice.BatchRef, b sluice.Batch, lookup func(int) (string, bool)) (sluice.Batch, map[string]sluice.Result) {
	t.Helper()
	ctx := context.Background()
	var err error
	for i := 0; !b.Status.Ended(); i++ {
		if i > 50 {
			t.Fatalf("batch still %s", b.Status)
		}
		if b, err = p.Poll(ctx, ref, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	files, err := p.Fetch(ctx, ref, b, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]sluice.Result{}
	err = p.Decode(ctx, ref, files, lookup, func(r sluice.Result) error {
		if _, dup := got[r.CustomID]; dup {
			t.Errorf("duplicate result %s", r.CustomID)
		}
		got[r.CustomID] = r.Owned()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b, got
}

// LoseAnswers wraps h: the first n requests that match are served for
// real (their effect happens) and then the connection is closed before
// any answer is written, as when a network drops a response.
func LoseAnswers(n int, match func(*http.Request) bool) func(http.Handler) http.Handler {
	var mu sync.Mutex
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			lose := n > 0 && match(r)
			if lose {
				n--
			}
			mu.Unlock()
			if !lose {
				h.ServeHTTP(w, r)
				return
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(http.ErrAbortHandler)
			}
			conn.Close()
		})
	}
}

// WriteFile writes body to a file called name in a fresh temporary folder
// and returns its path.
func WriteFile(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Decode decodes files with p (lookup as Decode takes it) and returns the
// results it delivered, owned, in order, with Decode's error.
func Decode(p sluice.Provider, lookup func(int) (string, bool), files ...string) ([]sluice.Result, error) {
	var got []sluice.Result
	err := p.Decode(context.Background(), sluice.BatchRef{}, files, lookup, func(r sluice.Result) error {
		got = append(got, r.Owned())
		return nil
	})
	return got, err
}

// CustomIDs lists the custom_ids of rs, comma-separated, in order.
func CustomIDs(rs []sluice.Result) string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.CustomID
	}
	return strings.Join(ids, ",")
}
