package emulator

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice/internal/emutest"
)

// TestGeminiUploadProtocol checks the resumable protocol at the wire: a
// chunk at the wrong offset is refused with the offset the server has, a
// chunk cut short keeps whole granules, query answers the size received,
// the upload path works under v1 too, and the docs' download path serves
// the same bytes.
func TestGeminiUploadProtocol(t *testing.T) {
	t.Parallel()
	_, ts := start(t, Options{GeminiUploadGranularity: 4})
	do := func(method, url string, hdr map[string]string, body io.Reader) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, url, body)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	resp := do("POST", ts.URL+"/gemini/upload/v1/files", map[string]string{"X-Goog-Upload-Protocol": "resumable",
		"X-Goog-Upload-Command": "start", "X-Goog-Upload-Header-Content-Length": "10", "Content-Type": "application/json"},
		strings.NewReader(`{"file":{"display_name":"ten"}}`))
	up := resp.Header.Get("X-Goog-Upload-URL")
	if resp.StatusCode != 200 || !strings.Contains(up, "/gemini/upload/v1/files?upload_id=") ||
		resp.Header.Get("X-Goog-Upload-Chunk-Granularity") != "4" {
		t.Fatalf("start: %d %v", resp.StatusCode, resp.Header)
	}
	chunk := func(cmd string, off int, data string) *http.Response {
		return do("POST", up, map[string]string{"X-Goog-Upload-Command": cmd, "X-Goog-Upload-Offset": fmt.Sprint(off)}, strings.NewReader(data))
	}
	if r := chunk("upload", 0, "abc"); r.StatusCode != 400 { // not a multiple of 4
		t.Errorf("unaligned chunk: %d", r.StatusCode)
	}
	if r := chunk("upload", 0, "abcd"); r.StatusCode != 200 || r.Header.Get("X-Goog-Upload-Status") != "active" ||
		r.Header.Get("X-Goog-Upload-Size-Received") != "4" {
		t.Errorf("first chunk: %d %v", r.StatusCode, r.Header)
	}
	r := chunk("upload", 0, "abcd")
	var e struct {
		Error struct {
			Code            int
			Status, Message string
		}
	}
	json.NewDecoder(r.Body).Decode(&e)
	if r.StatusCode != 400 || e.Error.Code != 400 || e.Error.Status != "INVALID_ARGUMENT" || r.Header.Get("X-Goog-Upload-Size-Received") != "4" {
		t.Errorf("chunk at a stale offset: %d %+v %v", r.StatusCode, e, r.Header)
	}
	if r := do("POST", up, map[string]string{"X-Goog-Upload-Command": "query"}, nil); r.Header.Get("X-Goog-Upload-Size-Received") != "4" ||
		r.Header.Get("X-Goog-Upload-Status") != "active" {
		t.Errorf("query: %v", r.Header)
	}
	r = chunk("upload, finalize", 4, "efghij")
	var fin struct{ File map[string]any }
	json.NewDecoder(r.Body).Decode(&fin)
	if r.StatusCode != 200 || r.Header.Get("X-Goog-Upload-Status") != "final" || fin.File["sizeBytes"] != "10" || fin.File["displayName"] != "ten" {
		t.Fatalf("final chunk: %d %v %v", r.StatusCode, r.Header, fin)
	}
	name := fin.File["name"].(string)
	for _, p := range []string{"/gemini/v1beta/" + name + ":download?alt=media", "/gemini/download/v1/" + name + ":download?alt=media"} {
		r := do("GET", ts.URL+p, nil, nil)
		b, _ := io.ReadAll(r.Body)
		if r.StatusCode != 200 || string(b) != "abcdefghij" {
			t.Errorf("GET %s: %d %q", p, r.StatusCode, b)
		}
	}
	r = do("GET", ts.URL+"/gemini/v1beta/batches/nope", nil, nil)
	json.NewDecoder(r.Body).Decode(&e)
	if r.StatusCode != 404 || e.Error.Status != "NOT_FOUND" {
		t.Errorf("unknown batch: %d %+v", r.StatusCode, e)
	}
	r = do("GET", ts.URL+"/_emulator/info", nil, nil)
	var info struct {
		BaseURLs map[string]string `json:"base_urls"`
	}
	json.NewDecoder(r.Body).Decode(&info)
	want := map[string]string{"openai": ts.URL + "/v1", "azure": ts.URL + "/openai/v1", "anthropic": ts.URL,
		"cloudflare": ts.URL + "/client/v4", "gemini": ts.URL + "/gemini", "mistral": ts.URL + "/mistral", "together": ts.URL + "/together/v1", "xai": ts.URL + "/xai/v1",
		"vertex": ts.URL}
	for k, v := range want {
		if info.BaseURLs[k] != v {
			t.Errorf("info %s = %q, want %q", k, info.BaseURLs[k], v)
		}
	}
}

// TestGeminiPersistence: with DataDir, an upload session half sent, then a
// running batch, survive a restart of the emulator; the batch completes
// with its responses and the duplicate counter still knows its keys.
func TestGeminiPersistence(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := emutest.NewClock()
	opts := Options{DataDir: dir, BatchTime: 10 * time.Second, Now: clk.Now, GeminiUploadGranularity: 8}
	s1, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts1 := httptest.NewServer(s1.Handler())
	req := func(ts *httptest.Server, method, url string, hdr map[string]string, body string) *http.Response {
		t.Helper()
		if !strings.HasPrefix(url, "http") {
			url = ts.URL + url
		}
		r, _ := http.NewRequest(method, url, strings.NewReader(body))
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	data := `{"key":"p-1","request":{"contents":[{"parts":[{"text":"one"}]}]}}` + "\n" +
		`{"key":"p-2","request":{"contents":[{"parts":[{"text":"two"}]}]}}` + "\n"
	resp := req(ts1, "POST", "/gemini/upload/v1beta/files", map[string]string{"X-Goog-Upload-Protocol": "resumable",
		"X-Goog-Upload-Command": "start", "X-Goog-Upload-Header-Content-Length": fmt.Sprint(len(data))}, `{"file":{"displayName":"sluice-jp-c1-a1.jsonl"}}`)
	up := resp.Header.Get("X-Goog-Upload-URL")
	if r := req(ts1, "POST", up, map[string]string{"X-Goog-Upload-Command": "upload", "X-Goog-Upload-Offset": "0"}, data[:64]); r.StatusCode != 200 {
		t.Fatalf("first chunk: %d", r.StatusCode)
	}
	ts1.Close()
	s1.Close()

	s2, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts2 := httptest.NewServer(s2.Handler())
	up2 := strings.Replace(up, ts1.URL, ts2.URL, 1)
	if r := req(ts2, "POST", up2, map[string]string{"X-Goog-Upload-Command": "query"}, ""); r.Header.Get("X-Goog-Upload-Size-Received") != "64" {
		t.Fatalf("query after restart: %v", r.Header)
	}
	r := req(ts2, "POST", up2, map[string]string{"X-Goog-Upload-Command": "upload, finalize", "X-Goog-Upload-Offset": "64"}, data[64:])
	var fin struct{ File struct{ Name string } }
	json.NewDecoder(r.Body).Decode(&fin)
	if r.StatusCode != 200 || fin.File.Name == "" {
		t.Fatalf("finalize after restart: %d", r.StatusCode)
	}
	r = req(ts2, "POST", "/gemini/v1beta/models/gemini-x:batchGenerateContent", nil,
		`{"batch":{"display_name":"sluice-jp-c1-a1","input_config":{"file_name":"`+fin.File.Name+`"}}}`)
	var op struct{ Name string }
	json.NewDecoder(r.Body).Decode(&op)
	if r.StatusCode != 200 || op.Name == "" {
		t.Fatalf("create: %d", r.StatusCode)
	}
	clk.Advance(5 * time.Second)
	req(ts2, "GET", "/gemini/v1beta/"+op.Name, nil, "") // running
	ts2.Close()
	s2.Close()

	s3, ts3 := start(t, opts)
	clk.Advance(6 * time.Second)
	r = req(ts3, "GET", "/gemini/v1/"+op.Name, nil, "")
	var got struct {
		Done     bool
		Metadata struct {
			State  string
			Output struct{ ResponsesFile string }
		}
	}
	json.NewDecoder(r.Body).Decode(&got)
	if !got.Done || got.Metadata.State != "BATCH_STATE_SUCCEEDED" || got.Metadata.Output.ResponsesFile == "" {
		t.Fatalf("after the second restart: %+v", got)
	}
	b, _ := io.ReadAll(req(ts3, "GET", "/gemini/v1beta/"+got.Metadata.Output.ResponsesFile+":download?alt=media", nil, "").Body)
	if strings.Count(string(b), `"response"`) != 2 {
		t.Fatalf("responses: %s", b)
	}
	if st := s3.Stats().ByFamily["gemini"]; st.BatchesCreated != 1 || st.RequestsProcessed != 2 {
		t.Errorf("stats after restarts: %+v", st)
	}
}
