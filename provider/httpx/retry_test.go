package httpx_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider/httpx"
)

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// newClient returns a client on a fake clock, without jitter.
func newClient(t *testing.T, r httpx.Retry) (*httpx.Client, *httpx.FakeClock) {
	t.Helper()
	clock := httpx.NewFakeClock(epoch)
	if r.Jitter == 0 {
		r.Jitter = -1
	}
	return httpx.New(httpx.Config{Retry: r, Clock: clock, APIKey: "sk-test-secret-0123456789", AuthScheme: "Bearer"}), clock
}

// script serves the answers in order (the last one repeats) and counts
// attempts.
type script struct {
	mu      sync.Mutex
	answers []func(w http.ResponseWriter, r *http.Request)
	n       int
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	i := s.n
	s.n++
	s.mu.Unlock()
	if i >= len(s.answers) {
		i = len(s.answers) - 1
	}
	s.answers[i](w, r)
}

func (s *script) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func status(code int, hdr ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		for i := 0; i+1 < len(hdr); i += 2 {
			w.Header()[hdr[i]] = []string{hdr[i+1]} // verbatim key, maybe not canonical
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"error":{"message":"status %d","type":"t","param":null,"code":"c%d"}}`, code, code)
	}
}

func ok(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Write([]byte(`{"ok":true}`))
}

// reset closes the connection with a TCP RST, without answering.
func reset(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// halfBody announces 100 bytes, sends 10, and resets.
func halfBody(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	conn, buf, _ := w.(http.Hijacker).Hijack()
	buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"ok\":tru")
	buf.Flush()
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

func serve(t *testing.T, s *script) string {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv.URL
}

func getJSON(c *httpx.Client, url string) error {
	var out map[string]any
	return c.JSON(context.Background(), httpx.Call{Method: "GET", URL: url}, &out)
}

func TestRetry429HonoursRetryAfterAboveCap(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request){
		status(429, "Retry-After", "7"), status(429, "Retry-After", "7"), ok,
	}}
	c, clock := newClient(t, httpx.Retry{MaxDelay: time.Second})
	if err := getJSON(c, serve(t, s)); err != nil {
		t.Fatal(err)
	}
	if got := clock.Sleeps(); len(got) != 2 || got[0] != 7*time.Second || got[1] != 7*time.Second {
		t.Fatalf("sleeps %v, want [7s 7s]", got)
	}
}

func TestRetryAfterForms(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  []string
		want time.Duration
	}{
		{"Retry-After-Ms", []string{"Retry-After-Ms", "1500"}, 1500 * time.Millisecond},
		{"retry-after-ms lowercase", []string{"retry-after-ms", "250", "Retry-After", "9"}, 250 * time.Millisecond},
		{"Retry-After seconds", []string{"Retry-After", "3"}, 3 * time.Second},
		{"Retry-After date", []string{"Retry-After", epoch.Add(90 * time.Second).Format(http.TimeFormat)}, 90 * time.Second},
		{"Retry-After garbage", []string{"Retry-After", "soon"}, 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{answers: []func(http.ResponseWriter, *http.Request){status(503, tc.hdr...), ok}}
			c, clock := newClient(t, httpx.Retry{})
			if err := getJSON(c, serve(t, s)); err != nil {
				t.Fatal(err)
			}
			if got := clock.Sleeps(); len(got) != 1 || got[0] != tc.want {
				t.Fatalf("sleeps %v, want [%v]", got, tc.want)
			}
		})
	}
}

func TestRetryAfterAboveMaxWaitReturnsAPIError(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request){status(429, "Retry-After", "3600"), ok}}
	c, clock := newClient(t, httpx.Retry{MaxWait: time.Minute})
	err := getJSON(c, serve(t, s))
	var ae *sluice.APIError
	if !errors.As(err, &ae) || ae.Status != 429 || ae.RetryAfter != "3600" || ae.Code != "c429" {
		t.Fatalf("err %#v", err)
	}
	if s.count() != 1 || len(clock.Sleeps()) != 0 {
		t.Fatalf("attempts %d sleeps %v", s.count(), clock.Sleeps())
	}
}

func TestRetry5xxExponentialBackoff(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request){
		status(500), status(502), status(503), status(529), status(504), ok,
	}}
	c, clock := newClient(t, httpx.Retry{MaxDelay: 4 * time.Second})
	if err := getJSON(c, serve(t, s)); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}
	if got := clock.Sleeps(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("sleeps %v, want %v", got, want)
	}
}

func TestRetryJitterStaysInRange(t *testing.T) {
	r := httpx.Retry{}.WithDefaults()
	for n := 1; n < 12; n++ {
		full := r.Backoff(n, 0)
		low := r.Backoff(n, 0.999999)
		if full > r.MaxDelay || low < time.Duration(float64(full)*0.75)-1 {
			t.Fatalf("n=%d: backoff %v..%v", n, low, full)
		}
	}
}

func TestRetry408And409(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request){status(408), status(409), ok}}
	c, _ := newClient(t, httpx.Retry{})
	if err := getJSON(c, serve(t, s)); err != nil || s.count() != 3 {
		t.Fatalf("err %v attempts %d", err, s.count())
	}
}

func TestNeverRetriesOther4xx(t *testing.T) {
	for _, code := range []int{400, 401, 403, 404, 413, 422} {
		s := &script{answers: []func(http.ResponseWriter, *http.Request){status(code), ok}}
		c, clock := newClient(t, httpx.Retry{})
		err := getJSON(c, serve(t, s))
		var ae *sluice.APIError
		if !errors.As(err, &ae) || ae.Status != code {
			t.Fatalf("%d: err %v", code, err)
		}
		if s.count() != 1 || len(clock.Sleeps()) != 0 {
			t.Fatalf("%d: %d attempts", code, s.count())
		}
	}
}

func TestXShouldRetryFalse(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request){status(500, "X-Should-Retry", "false"), ok}}
	c, _ := newClient(t, httpx.Retry{})
	if err := getJSON(c, serve(t, s)); err == nil || s.count() != 1 {
		t.Fatalf("err %v attempts %d", err, s.count())
	}
}

func TestRetryConnectionResets(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request){reset, halfBody, reset, ok}}
	c, clock := newClient(t, httpx.Retry{})
	if err := getJSON(c, serve(t, s)); err != nil {
		t.Fatal(err)
	}
	if s.count() != 4 || len(clock.Sleeps()) != 3 {
		t.Fatalf("attempts %d sleeps %v", s.count(), clock.Sleeps())
	}
}

func TestRetryConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, clock := newClient(t, httpx.Retry{MaxAttempts: 3})
	err = getJSON(c, "http://"+addr+"/x")
	if err == nil || len(clock.Sleeps()) != 2 {
		t.Fatalf("err %v sleeps %v", err, clock.Sleeps())
	}
}

func TestAttemptCeiling(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request){status(500)}}
	c, _ := newClient(t, httpx.Retry{MaxAttempts: 5})
	err := getJSON(c, serve(t, s))
	var ae *sluice.APIError
	if !errors.As(err, &ae) || ae.Status != 500 || s.count() != 5 {
		t.Fatalf("err %v attempts %d", err, s.count())
	}
	s = &script{answers: []func(http.ResponseWriter, *http.Request){status(500)}}
	c, _ = newClient(t, httpx.Retry{})
	getJSON(c, serve(t, s))
	if s.count() != httpx.DefaultMaxAttempts {
		t.Fatalf("default ceiling: %d attempts", s.count())
	}
}

func TestTotalWaitCeiling(t *testing.T) {
	// Waits 0.5, 1, 2, 4, 8 s: the sixth would pass 10 s in total.
	s := &script{answers: []func(http.ResponseWriter, *http.Request){status(503)}}
	c, clock := newClient(t, httpx.Retry{MaxAttempts: 100, MaxTotalWait: 10 * time.Second})
	if err := getJSON(c, serve(t, s)); err == nil {
		t.Fatal("no error")
	}
	var total time.Duration
	for _, d := range clock.Sleeps() {
		total += d
	}
	if total > 10*time.Second || len(clock.Sleeps()) != 4 || s.count() != 5 {
		t.Fatalf("sleeps %v attempts %d", clock.Sleeps(), s.count())
	}
}

func TestContextCheckedFirst(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request){ok}}
	c, _ := newClient(t, httpx.Retry{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := c.JSON(ctx, httpx.Call{Method: "GET", URL: serve(t, s)}, nil)
	if !errors.Is(err, context.Canceled) || s.count() != 0 {
		t.Fatalf("err %v attempts %d", err, s.count())
	}
}

// TestBodyReopenedPerAttempt: a chunk file body is re-read from disk on
// every attempt, with identical bytes and an exact Content-Length.
func TestBodyReopenedPerAttempt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "chunk.jsonl")
	content := make([]byte, 3<<20+17)
	for i := range content {
		content[i] = byte('a' + i%26)
	}
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(content)
	var mu sync.Mutex
	var sums [][32]byte
	var lengths []int64
	var chunked []bool
	record := func(w http.ResponseWriter, r *http.Request) bool {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		sums = append(sums, sha256.Sum256(b))
		lengths = append(lengths, r.ContentLength)
		chunked = append(chunked, len(r.TransferEncoding) > 0)
		return true
	}
	s := &script{answers: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, r *http.Request) { record(w, r); w.WriteHeader(503) },
		func(w http.ResponseWriter, r *http.Request) { record(w, r); reset(w, r) },
		func(w http.ResponseWriter, r *http.Request) { record(w, r); w.Write([]byte(`{}`)) },
	}}
	body, size, err := httpx.FileBody(path)
	if err != nil || size != int64(len(content)) {
		t.Fatal(err, size)
	}
	opened := 0
	counted := func() (io.ReadCloser, int64, error) { opened++; return body() }
	c, _ := newClient(t, httpx.Retry{})
	if err := c.JSON(context.Background(), httpx.Call{Method: "POST", URL: serve(t, s), Body: counted}, nil); err != nil {
		t.Fatal(err)
	}
	if opened != 3 || len(sums) != 3 {
		t.Fatalf("opened %d, attempts %d", opened, len(sums))
	}
	for i := range sums {
		if sums[i] != want || lengths[i] != int64(len(content)) || chunked[i] {
			t.Fatalf("attempt %d: sum ok %v, length %d, chunked %v", i, sums[i] == want, lengths[i], chunked[i])
		}
	}
}

// TestReconcileAfterAmbiguousFailure: the body was sent and the connection
// died before an answer: Reconcile runs before the repeat and can adopt.
func TestReconcileAfterAmbiguousFailure(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request){reset, ok}}
	c, _ := newClient(t, httpx.Retry{})
	var calls atomic.Int32
	call := httpx.Call{Method: "POST", URL: serve(t, s), Body: httpx.BytesBody([]byte(`{"x":1}`)),
		Reconcile: func(context.Context) (bool, error) { calls.Add(1); return true, nil }}
	if err := c.JSON(context.Background(), call, nil); !errors.Is(err, httpx.ErrReconciled) {
		t.Fatalf("err %v", err)
	}
	if calls.Load() != 1 || s.count() != 1 {
		t.Fatalf("reconcile %d attempts %d", calls.Load(), s.count())
	}
	// Not found: the call is repeated; a 5xx answer is not ambiguous.
	s = &script{answers: []func(http.ResponseWriter, *http.Request){reset, status(500), ok}}
	calls.Store(0)
	call.URL = serve(t, s)
	call.Reconcile = func(context.Context) (bool, error) { calls.Add(1); return false, nil }
	if err := c.JSON(context.Background(), call, nil); err != nil || calls.Load() != 1 || s.count() != 3 {
		t.Fatalf("err %v reconcile %d attempts %d", err, calls.Load(), s.count())
	}
}

// TestFailedReconcileIsUnsettled: the body was sent, the connection died,
// and the lookup failed: the call is not repeated blind, and its error says
// the outcome is unknown (sluice.ErrUnsettled), with both failures.
func TestFailedReconcileIsUnsettled(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request){reset, ok}}
	c, _ := newClient(t, httpx.Retry{})
	call := httpx.Call{Method: "POST", URL: serve(t, s), Body: httpx.BytesBody([]byte(`{"x":1}`)),
		Reconcile: func(context.Context) (bool, error) {
			return false, &sluice.APIError{Status: 502, Message: "listing down"}
		}}
	err := c.JSON(context.Background(), call, nil)
	var ae *sluice.APIError
	if !errors.Is(err, sluice.ErrUnsettled) || !errors.As(err, &ae) || ae.Status != 502 {
		t.Fatalf("err %v, want the 502 and sluice.ErrUnsettled", err)
	}
	if s.count() != 1 {
		t.Fatalf("%d attempts: a call whose outcome is unknown was repeated", s.count())
	}
}

func TestDownloadRestartsAfterMidBodyReset(t *testing.T) {
	full := []byte(`{"ok":true}` + "\n" + `{"line":2}` + "\n")
	s := &script{answers: []func(http.ResponseWriter, *http.Request){halfBody, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(full)))
		w.Write(full)
	}}}
	c, _ := newClient(t, httpx.Retry{})
	dir := t.TempDir()
	dst := filepath.Join(dir, "out.jsonl")
	n, err := c.Download(context.Background(), httpx.Call{Method: "GET", URL: serve(t, s)}, dst)
	if err != nil || n != int64(len(full)) {
		t.Fatal(err, n)
	}
	got, _ := os.ReadFile(dst)
	if string(got) != string(full) {
		t.Fatalf("got %q", got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("temp files left: %v", ents)
	}
	// A failed download leaves nothing.
	s = &script{answers: []func(http.ResponseWriter, *http.Request){status(404)}}
	if _, err := c.Download(context.Background(), httpx.Call{Method: "GET", URL: serve(t, s)}, filepath.Join(dir, "x")); !httpx.IsNotFound(err) {
		t.Fatalf("err %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("files left: %v", ents)
	}
}
