package httpx_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider/httpx"
)

func TestRateLimiterFakeClock(t *testing.T) {
	clock := httpx.NewFakeClock(epoch)
	lim := httpx.NewLimiter(httpx.RateLimit{PerSecond: 10, Burst: 2}, clock)
	for i := 0; i < 6; i++ {
		if err := lim.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Two at once (burst), then one every 100 ms.
	if got := clock.Now().Sub(epoch); got != 400*time.Millisecond {
		t.Fatalf("6 requests took %v, want 400ms", got)
	}
	lim.PauseUntil(clock.Now().Add(5 * time.Second))
	start := clock.Now()
	lim.Wait(context.Background())
	if got := clock.Now().Sub(start); got < 5*time.Second {
		t.Fatalf("pause not honoured: %v", got)
	}
	if httpx.NewLimiter(httpx.RateLimit{PerSecond: -1}, nil) != nil {
		t.Fatal("negative rate must be unlimited")
	}
}

// TestRateLimiterRealHTTP: a client at 20 requests/s with burst 1 spaces
// its requests on the wall clock.
func TestRateLimiterRealHTTP(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1) }))
	defer srv.Close()
	c := httpx.New(httpx.Config{RateLimit: httpx.RateLimit{PerSecond: 20, Burst: 1}})
	start := time.Now()
	for i := 0; i < 6; i++ {
		if err := c.JSON(context.Background(), httpx.Call{Method: "GET", URL: srv.URL}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if el := time.Since(start); el < 240*time.Millisecond || n.Load() != 6 {
		t.Fatalf("6 requests in %v (want >= 250ms)", el)
	}
}

// Test429PausesEveryRequest: a 429 with Retry-After holds back the other
// requests of the client too.
func Test429PausesEveryRequest(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request){status(429, "Retry-After", "30"), ok}}
	clock := httpx.NewFakeClock(epoch)
	c := httpx.New(httpx.Config{Clock: clock, RateLimit: httpx.RateLimit{PerSecond: 100}})
	url := serve(t, s)
	if err := getJSON(c, url); err != nil {
		t.Fatal(err)
	}
	if clock.Now().Sub(epoch) < 30*time.Second {
		t.Fatalf("clock at %v", clock.Now().Sub(epoch))
	}
}

func TestRedactsSecretsEchoedInErrors(t *testing.T) {
	const key = "sk-live-Sup3rSecretValue42"
	echo := func(decoder httpx.ErrorDecoder, shape string) http.HandlerFunc {
		var n atomic.Int32
		return func(w http.ResponseWriter, r *http.Request) {
			var hdrs strings.Builder
			r.Header.Write(&hdrs) // a server that echoes the request's headers
			if n.Add(1) == 1 {
				w.WriteHeader(503) // retried, so logged
			} else {
				w.WriteHeader(401)
			}
			fmt.Fprintf(w, shape, strings.ReplaceAll(strings.ReplaceAll(hdrs.String(), "\r\n", " | "), `"`, `'`))
		}
	}
	for _, tc := range []struct {
		name, header, scheme, shape string
		dec                         httpx.ErrorDecoder
	}{
		{"openai", "Authorization", "Bearer", `{"error":{"message":"bad request: %s","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, httpx.OpenAIErrors},
		{"azure", "api-key", "", `{"error":{"message":"denied %s","type":"x","param":null,"code":"401"}}`, httpx.OpenAIErrors},
		{"anthropic", "x-api-key", "", `{"type":"error","error":{"type":"authentication_error","message":"got %s"}}`, httpx.AnthropicErrors},
		{"cloudflare", "Authorization", "Bearer", `{"success":false,"errors":[{"code":10000,"message":"auth %s"}]}`, httpx.CloudflareErrors},
		{"plain text", "Authorization", "Bearer", `<html>request was %s</html>`, httpx.OpenAIErrors},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(echo(tc.dec, tc.shape))
			defer srv.Close()
			var logs bytes.Buffer
			c := httpx.New(httpx.Config{APIKey: key, AuthHeader: tc.header, AuthScheme: tc.scheme, Errors: tc.dec,
				Clock: httpx.NewFakeClock(epoch), Logger: zerolog.New(&logs).Level(zerolog.DebugLevel)})
			err := c.JSON(context.Background(), httpx.Call{Method: "GET", URL: srv.URL}, nil)
			var ae *sluice.APIError
			if !errors.As(err, &ae) || ae.Status != 401 {
				t.Fatalf("err %v", err)
			}
			if strings.Contains(err.Error(), "Sup3rSecret") || strings.Contains(logs.String(), "Sup3rSecret") {
				t.Fatalf("secret leaked: %s\n%s", err, logs.String())
			}
			if !strings.Contains(logs.String(), "retrying") {
				t.Fatalf("no retry logged: %s", logs.String())
			}
			if !strings.Contains(err.Error(), "[REDACTED]") {
				t.Fatalf("expected a redaction mark: %s", err)
			}
		})
	}
}

func TestErrorDecoders(t *testing.T) {
	for _, tc := range []struct {
		dec             httpx.ErrorDecoder
		body, code, msg string
	}{
		{httpx.OpenAIErrors, `{"error":{"message":"m","type":"invalid_request_error","param":"model","code":null}}`, "invalid_request_error", "m (param model)"},
		{httpx.OpenAIErrors, `{"error":{"message":"m","type":"t","param":null,"code":"rate_limit_exceeded"}}`, "rate_limit_exceeded", "m"},
		{httpx.OpenAIErrors, `{"error":"plain"}`, "", "plain"},
		{httpx.AnthropicErrors, `{"type":"error","error":{"type":"overloaded_error","message":"busy"},"request_id":"req_1"}`, "overloaded_error", "busy"},
		{httpx.CloudflareErrors, `{"result":null,"success":false,"errors":[{"code":7003,"message":"a"},{"code":3040,"message":"b"}],"messages":[]}`, "7003", "7003: a; 3040: b"},
		{httpx.CloudflareErrors, `not json`, "", ""},
	} {
		code, msg := tc.dec([]byte(tc.body))
		if code != tc.code || msg != tc.msg {
			t.Errorf("%s: got %q %q", tc.body, code, msg)
		}
	}
}

func TestAPIErrorCarriesRetryAfterMs(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request){status(429, "retry-after-ms", "2500")}}
	c, _ := newClient(t, httpx.Retry{MaxAttempts: 1})
	err := getJSON(c, serve(t, s))
	var ae *sluice.APIError
	if !errors.As(err, &ae) || ae.RetryAfter != "3" || !ae.Retryable() {
		t.Fatalf("err %#v", err)
	}
}

// TestMultipartExactAndStreamed: the upload body is multipart/form-data
// with purpose then file, sent with an exact Content-Length, and the same
// bytes on every attempt.
func TestMultipartExactAndStreamed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "chunk.jsonl")
	content := []byte("{\"custom_id\":\"a\"}\n{\"custom_id\":\"b\"}\n")
	os.WriteFile(path, content, 0o600)
	body, ctype, total, err := httpx.Multipart([]httpx.Field{{"purpose", "batch"}}, "file", `sluice-j"1-c2-a1.jsonl`, path)
	if err != nil {
		t.Fatal(err)
	}
	var bodies [][]byte
	s := &script{answers: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			bodies = append(bodies, b)
			w.WriteHeader(502)
		},
		func(w http.ResponseWriter, r *http.Request) {
			if r.ContentLength != total || len(r.TransferEncoding) != 0 {
				t.Errorf("content-length %d (want %d), transfer-encoding %v", r.ContentLength, total, r.TransferEncoding)
			}
			b, _ := io.ReadAll(r.Body)
			bodies = append(bodies, b)
			_, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
			mr := multipart.NewReader(bytes.NewReader(b), params["boundary"])
			var names []string
			for {
				p, err := mr.NextPart()
				if err != nil {
					break
				}
				v, _ := io.ReadAll(p)
				names = append(names, p.FormName())
				switch p.FormName() {
				case "purpose":
					if string(v) != "batch" {
						t.Errorf("purpose %q", v)
					}
				case "file":
					if !bytes.Equal(v, content) || p.FileName() != `sluice-j"1-c2-a1.jsonl` {
						t.Errorf("file %q name %q", v, p.FileName())
					}
				}
			}
			if strings.Join(names, ",") != "purpose,file" {
				t.Errorf("parts %v", names)
			}
			w.Write([]byte(`{"id":"file-1"}`))
		},
	}}
	c, _ := newClient(t, httpx.Retry{})
	err = c.JSON(context.Background(), httpx.Call{Method: "POST", URL: serve(t, s), Header: http.Header{"Content-Type": {ctype}}, Body: body}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 2 || !bytes.Equal(bodies[0], bodies[1]) || int64(len(bodies[0])) != total {
		t.Fatalf("bodies differ or wrong length")
	}
}

// TestUpload200MBStaysSmall uploads a 200 MB chunk (a sparse file with a
// little data) to a loopback server that discards it, and checks the heap
// does not grow with the file.
func TestUpload200MBStaysSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("200 MB upload")
	}
	const size = 200 << 20
	path := filepath.Join(t.TempDir(), "big.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for off := int64(0); off < size; off += 16 << 20 {
		f.WriteAt([]byte(`{"custom_id":"x","method":"POST","url":"/v1/embeddings","body":{}}`+"\n"), off)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got.Store(n)
		w.Write([]byte(`{"id":"file-big"}`))
	}))
	defer srv.Close()
	body, ctype, total, err := httpx.Multipart([]httpx.Field{{"purpose", "batch"}}, "file", "big.jsonl", path)
	if err != nil {
		t.Fatal(err)
	}
	c := httpx.New(httpx.Config{})
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	var out struct{ ID string }
	err = c.JSON(context.Background(), httpx.Call{Method: "POST", URL: srv.URL, Header: http.Header{"Content-Type": {ctype}}, Body: body}, &out)
	if err != nil || out.ID != "file-big" || got.Load() != total {
		t.Fatalf("err %v id %q got %d of %d", err, out.ID, got.Load(), total)
	}
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	heap := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("200 MB upload in %v: allocated %d KB, heap in use %+d KB", time.Since(start), alloc>>10, heap>>10)
	if alloc > 32<<20 || heap > 32<<20 {
		t.Fatalf("upload allocated %d bytes, heap grew %d bytes", alloc, heap)
	}
}
