package emulator

import (
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// An upload is streamed to disk: the heap does not grow with the file.
func TestUploadIsStreamed(t *testing.T) {
	// Not parallel: it measures the process's heap, which other tests
	// would grow.
	s, ts := start(t, Options{})
	const size = 64 << 20
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		fw, _ := mw.CreateFormFile("file", "huge.jsonl")
		line := append(bytes.Repeat([]byte("x"), 1023), '\n')
		for range size / len(line) {
			fw.Write(line)
		}
		mw.WriteField("purpose", "batch")
		mw.Close()
		pw.Close()
	}()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	req, _ := http.NewRequest("POST", ts.URL+"/v1/files", pr)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	close(stop)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), fmt.Sprintf(`"bytes":%d`, size)) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if grew := int64(peak) - int64(base); grew > size/4 {
		t.Fatalf("heap grew by %d MB during a %d MB upload", grew>>20, size>>20)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.files {
		if f.Lines != size/1024 {
			t.Fatalf("lines %d", f.Lines)
		}
	}
}

// A chunked Anthropic body (no Content-Length) over the limit is refused
// while it is being read.
func TestAnthropicChunkedTooLarge(t *testing.T) {
	t.Parallel()
	_, ts := start(t, Options{AnthropicMaxBytes: 1 << 20})
	pr, pw := io.Pipe()
	go func() {
		io.WriteString(pw, `{"requests":[`)
		item := `{"custom_id":"%s","params":{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("z", 1000) + `"}]}}`
		for i := range 5000 {
			if i > 0 {
				io.WriteString(pw, ",")
			}
			if _, err := fmt.Fprintf(pw, item, fmt.Sprint("id", i)); err != nil {
				return
			}
		}
		io.WriteString(pw, `]}`)
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", ts.URL+"/v1/messages/batches", pr)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	pr.CloseWithError(io.ErrClosedPipe)
	if resp.StatusCode != 413 || !strings.Contains(string(body), `"request_too_large"`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

func TestUnknownFaultKind(t *testing.T) {
	t.Parallel()
	if _, err := New(Options{FaultKinds: []string{"418"}}); err == nil {
		t.Fatal("accepted an unknown fault kind")
	}
}
