package httpx_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sluice-batch/sluice/internal/cputime"

	"github.com/sluice-batch/sluice/provider/httpx"
)

// TestDownloadWhole: a download of many megabytes, answered in pieces of
// every size, lands whole and byte for byte in its file.
func TestDownloadWhole(t *testing.T) {
	body := bytes.Repeat([]byte(`{"custom_id":"a","response":{"status_code":200,"body":{"x":"é"}}}`+"\n"), 80000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		rc := http.NewResponseController(w)
		for i, n := 0, 1; i < len(body); n = n*3 + 1 {
			if n > 3<<20 {
				n = 1
			}
			j := min(i+n, len(body))
			w.Write(body[i:j])
			rc.Flush()
			i = j
		}
	}))
	defer srv.Close()
	c, _ := newClient(t, httpx.Retry{MaxAttempts: 1})
	dst := filepath.Join(t.TempDir(), "out.jsonl")
	n, err := c.Download(context.Background(), httpx.Call{Method: "GET", URL: srv.URL}, dst)
	if err != nil || n != int64(len(body)) {
		t.Fatalf("n %d (want %d), err %v", n, len(body), err)
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("file differs from the body (%d bytes, %v)", len(got), err)
	}
}

// BenchmarkDownload: a 64 MB result file from a loopback server into a
// file (the client and the server are both in this process; the server's
// share is the same whatever the client does).
func BenchmarkDownload(b *testing.B) {
	body := bytes.Repeat([]byte(`{"custom_id":"a","response":{"status_code":200,"body":{"x":"é"}}}`+"\n"), 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	}))
	defer srv.Close()
	c := httpx.New(httpx.Config{Retry: httpx.Retry{MaxAttempts: 1}})
	dst := filepath.Join(b.TempDir(), "out.jsonl")
	b.SetBytes(int64(len(body)))
	cpu := cputime.Process()
	for b.Loop() {
		if n, err := c.Download(context.Background(), httpx.Call{Method: "GET", URL: srv.URL}, dst); err != nil || n != int64(len(body)) {
			b.Fatal(n, err)
		}
	}
	b.ReportMetric(float64(cputime.Process()-cpu)/float64(b.N), "cpu-ns/op")
}
