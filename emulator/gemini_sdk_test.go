package emulator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genai"
)

func genaiClient(t *testing.T, base, version, key string) *genai.Client {
	t.Helper()
	c, err := genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey: key, Backend: genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: base, APIVersion: version},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// gemRequestsFile writes n {"key","request"} lines; pad makes each prompt
// longer, so the file can span several 8 MiB upload chunks.
func gemRequestsFile(t *testing.T, prefix string, n, pad int) (string, []string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "requests.jsonl")
	var b bytes.Buffer
	var keys []string
	filler := strings.Repeat("x", pad)
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("%s-%d", prefix, i)
		keys = append(keys, k)
		fmt.Fprintf(&b, `{"key":%q,"request":{"contents":[{"role":"user","parts":[{"text":"Question %d? %s"}]}],"systemInstruction":{"parts":[{"text":"be brief"}]},"generation_config":{"temperature":0.7}}}`+"\n", k, i, filler)
	}
	if err := os.WriteFile(p, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, keys
}

// TestGeminiSDKRoundTrip drives the emulator with google.golang.org/genai:
// a resumable upload in two 8 MiB chunks, a batch created from the file,
// polled to success, its responses file downloaded and parsed with the
// SDK's GenerateContentResponse, then cancel, list (paged, both API
// versions), delete and the error envelope.
func TestGeminiSDKRoundTrip(t *testing.T) {
	clk := newClock()
	s, ts := start(t, Options{BatchTime: 10 * time.Second, Now: clk.Now, APIKey: "gm-key"})
	ctx := context.Background()
	c := genaiClient(t, ts.URL+"/gemini", "v1beta", "gm-key")

	const n = 1100
	path, keys := gemRequestsFile(t, "request", n, 8000) // ~9.2 MB: "upload" then "upload, finalize"
	st, _ := os.Stat(path)
	if st.Size() <= 8<<20 {
		t.Fatalf("input is %d bytes, want more than one 8 MiB chunk", st.Size())
	}
	f, err := c.Files.UploadFromPath(ctx, path, &genai.UploadFileConfig{MIMEType: "jsonl", DisplayName: "sdk-requests"})
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	if !strings.HasPrefix(f.Name, "files/") || f.DisplayName != "sdk-requests" || f.MIMEType != "jsonl" ||
		f.SizeBytes == nil || *f.SizeBytes != st.Size() || f.State != genai.FileStateActive || f.Source != genai.FileSourceUploaded ||
		len(f.Sha256Hash) == 0 || f.ExpirationTime.Sub(f.CreateTime) != 48*time.Hour {
		t.Fatalf("uploaded file: %+v", f)
	}
	got, err := c.Files.Get(ctx, f.Name, nil)
	if err != nil || got.Name != f.Name || *got.SizeBytes != st.Size() {
		t.Fatalf("files.get: %+v, %v", got, err)
	}

	job, err := c.Batches.Create(ctx, "gemini-2.5-flash", &genai.BatchJobSource{FileName: f.Name},
		&genai.CreateBatchJobConfig{DisplayName: "sdk-job"})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if !strings.HasPrefix(job.Name, "batches/") || job.State != genai.JobStatePending || job.DisplayName != "sdk-job" ||
		job.Model != "models/gemini-2.5-flash" || job.CreateTime.IsZero() || job.Dest != nil {
		t.Fatalf("created job: %+v", job)
	}
	clk.Advance(5 * time.Second)
	job, err = c.Batches.Get(ctx, job.Name, nil)
	if err != nil || job.State != genai.JobStateRunning {
		t.Fatalf("get while running: %+v, %v", job, err)
	}
	clk.Advance(6 * time.Second)
	job, err = c.Batches.Get(ctx, job.Name, nil)
	if err != nil || job.State != genai.JobStateSucceeded || job.Dest == nil || job.Dest.FileName == "" || job.EndTime.IsZero() {
		t.Fatalf("get after the batch time: %+v, %v", job, err)
	}
	if !strings.HasPrefix(job.Dest.FileName, "files/batch-") {
		t.Errorf("responses file %q, want files/batch-<id>", job.Dest.FileName)
	}
	data, err := c.Files.Download(ctx, genai.NewDownloadURIFromFile(&genai.File{DownloadURI: job.Dest.FileName}), nil)
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			Key      string                         `json:"key"`
			Response *genai.GenerateContentResponse `json:"response"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("responses line: %v: %s", err, sc.Bytes())
		}
		r := line.Response
		if r == nil || len(r.Candidates) != 1 || r.Candidates[0].FinishReason != genai.FinishReasonStop ||
			!strings.HasPrefix(r.Text(), "echo: ") || r.UsageMetadata == nil || r.UsageMetadata.PromptTokenCount == 0 ||
			r.UsageMetadata.TotalTokenCount != r.UsageMetadata.PromptTokenCount+r.UsageMetadata.CandidatesTokenCount ||
			r.ModelVersion != "gemini-2.5-flash" || r.ResponseID == "" {
			t.Fatalf("response of %s: %s", line.Key, sc.Bytes())
		}
		if seen[line.Key] {
			t.Fatalf("key %s twice", line.Key)
		}
		seen[line.Key] = true
	}
	if len(seen) != n {
		t.Fatalf("%d responses, want %d", len(seen), n)
	}
	for _, k := range keys {
		if !seen[k] {
			t.Fatalf("no response for %s", k)
		}
	}

	// Cancel a second batch while it runs: it ends CANCELLED.
	path2, _ := gemRequestsFile(t, "other", 40, 10)
	f2, err := c.Files.UploadFromPath(ctx, path2, &genai.UploadFileConfig{MIMEType: "application/jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	job2, err := c.Batches.Create(ctx, "models/gemini-2.5-flash", &genai.BatchJobSource{FileName: f2.Name},
		&genai.CreateBatchJobConfig{DisplayName: "to-cancel"})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(3 * time.Second)
	if err := c.Batches.Cancel(ctx, job2.Name, nil); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	job2, err = c.Batches.Get(ctx, job2.Name, nil)
	if err != nil || job2.State != genai.JobStateCancelled {
		t.Fatalf("after cancel: %+v, %v", job2, err)
	}
	var apiErr genai.APIError
	if err := c.Batches.Cancel(ctx, job2.Name, nil); !errors.As(err, &apiErr) || apiErr.Code != 400 || apiErr.Status != "FAILED_PRECONDITION" {
		t.Errorf("cancelling an ended batch: %v", err)
	}

	// List, one per page, through both API versions.
	for _, v := range []string{"v1beta", "v1"} {
		cv := genaiClient(t, ts.URL+"/gemini", v, "gm-key")
		page, err := cv.Batches.List(ctx, &genai.ListBatchJobsConfig{PageSize: 1})
		if err != nil {
			t.Fatalf("%s list: %v", v, err)
		}
		var names []string
		for {
			for _, j := range page.Items {
				names = append(names, j.Name+"="+j.DisplayName)
			}
			if page, err = page.Next(ctx); err == genai.ErrPageDone {
				break
			} else if err != nil {
				t.Fatalf("%s next page: %v", v, err)
			}
		}
		want := []string{job2.Name + "=to-cancel", job.Name + "=sdk-job"}
		if strings.Join(names, " ") != strings.Join(want, " ") {
			t.Errorf("%s list: %v, want %v (newest first)", v, names, want)
		}
		var files []string
		for fl, err := range cv.Files.All(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, fl.Name)
		}
		if len(files) != 4 { // two uploads, two responses files (the cancelled batch ran part of its lines)
			t.Errorf("%s files: %v", v, files)
		}
	}

	if _, err := c.Batches.Delete(ctx, job2.Name, nil); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := c.Batches.Get(ctx, job2.Name, nil); !errors.As(err, &apiErr) || apiErr.Code != 404 || apiErr.Status != "NOT_FOUND" {
		t.Errorf("get after delete: %v", err)
	}

	// A wrong key: 400 INVALID_ARGUMENT, as Google answers it.
	bad := genaiClient(t, ts.URL+"/gemini", "v1beta", "wrong")
	if _, err := bad.Batches.Get(ctx, job.Name, nil); !errors.As(err, &apiErr) || apiErr.Code != 400 || apiErr.Status != "INVALID_ARGUMENT" ||
		!strings.Contains(apiErr.Message, "API key not valid") {
		t.Errorf("wrong key: %v", err)
	}
	// The direct call the batch lines stand for.
	resp, err := c.Models.GenerateContent(ctx, "gemini-2.5-flash", genai.Text("hello there"), nil)
	if err != nil || resp.Text() != "echo: ereht olleh" {
		t.Errorf("generateContent: %+v, %v", resp, err)
	}
	stats := s.Stats()
	if g := stats.ByFamily["gemini"]; g.BatchesCreated != 2 || g.RequestsProcessed < n || g.RequestsProcessedMoreThanOnce != 0 {
		t.Errorf("gemini stats: %+v", g)
	}
}

// TestGeminiUploadProtocol checks the resumable protocol at the wire: a
// chunk at the wrong offset is refused with the offset the server has, a
// chunk cut short keeps whole granules, query answers the size received,
// the upload path works under v1 too, and the docs' download path serves
// the same bytes.
func TestGeminiUploadProtocol(t *testing.T) {
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
		"cloudflare": ts.URL + "/client/v4", "gemini": ts.URL + "/gemini", "mistral": ts.URL + "/mistral", "together": ts.URL + "/together/v1",
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
	dir := t.TempDir()
	clk := newClock()
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

// TestGeminiSDKInlinedRequests: a batch of inlined requests (the docs'
// first example) through the SDK: responses come back in the Operation, in
// request order, with their metadata, and a system instruction and
// generation config of the SDK's InlinedRequest.Config reach the model.
func TestGeminiSDKInlinedRequests(t *testing.T) {
	clk := newClock()
	_, ts := start(t, Options{BatchTime: 10 * time.Second, Now: clk.Now, LineErrorRate: 0.3, Seed: 2})
	ctx := context.Background()
	c := genaiClient(t, ts.URL+"/gemini", "v1beta", "any")
	var reqs []*genai.InlinedRequest
	for i := 0; i < 12; i++ {
		reqs = append(reqs, &genai.InlinedRequest{Contents: genai.Text(fmt.Sprintf("question number %d", i)),
			Metadata: map[string]string{"key": fmt.Sprintf("req-%d", i)},
			Config:   &genai.GenerateContentConfig{SystemInstruction: genai.NewContentFromText("be brief", genai.RoleUser), MaxOutputTokens: 3}})
	}
	job, err := c.Batches.Create(ctx, "gemini-2.5-flash", &genai.BatchJobSource{InlinedRequests: reqs}, &genai.CreateBatchJobConfig{DisplayName: "inline"})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if job.State != genai.JobStatePending || job.Dest != nil {
		t.Fatalf("created: %+v", job)
	}
	clk.Advance(11 * time.Second)
	job, err = c.Batches.Get(ctx, job.Name, nil)
	if err != nil || job.State != genai.JobStateSucceeded || job.Dest == nil || len(job.Dest.InlinedResponses) != 12 {
		t.Fatalf("after the batch time: %+v, %v", job, err)
	}
	errs := 0
	for i, r := range job.Dest.InlinedResponses {
		if r.Metadata["key"] != fmt.Sprintf("req-%d", i) {
			t.Fatalf("response %d has metadata %v: not in request order", i, r.Metadata)
		}
		switch {
		case r.Error != nil:
			errs++
			if r.Error.Code == nil || *r.Error.Code == 0 || r.Error.Message == "" {
				t.Errorf("response %d: error %+v", i, r.Error)
			}
		case r.Response == nil || r.Response.Candidates[0].FinishReason != genai.FinishReasonMaxTokens:
			t.Errorf("response %d: %+v, want cut at 3 tokens", i, r.Response)
		}
	}
	if errs == 0 || errs == 12 {
		t.Errorf("%d of 12 inlined responses are errors at LineErrorRate 0.3", errs)
	}
}

// TestGeminiSDKJSONModeAndForcedCall: the fake model answers JSON mode
// (responseMimeType application/json) with a JSON value as the text, and
// a forced function call (mode ANY) with a functionCall part carrying the
// answer as its arguments, as Gemini does; the SDK reads both.
func TestGeminiSDKJSONModeAndForcedCall(t *testing.T) {
	_, ts := start(t, Options{APIKey: "gm-key"})
	ctx := context.Background()
	c := genaiClient(t, ts.URL+"/gemini", "v1beta", "gm-key")
	prompt := genai.Text("q 1: what?")

	r, err := c.Models.GenerateContent(ctx, "gemini-2.5-flash", prompt, &genai.GenerateContentConfig{ResponseMIMEType: "application/json"})
	if err != nil {
		t.Fatal(err)
	}
	var js struct{ Echo string }
	if err := json.Unmarshal([]byte(r.Text()), &js); err != nil || js.Echo != "echo: ?tahw :1 q" {
		t.Fatalf("JSON mode: text %q (%v)", r.Text(), err)
	}

	tools := []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{{Name: "other"}, {Name: "lookup"}}}}
	for _, tc := range []struct {
		cfg  *genai.FunctionCallingConfig
		want string
	}{
		{&genai.FunctionCallingConfig{Mode: genai.FunctionCallingConfigModeAny, AllowedFunctionNames: []string{"lookup"}}, "lookup"},
		{&genai.FunctionCallingConfig{Mode: genai.FunctionCallingConfigModeAny}, "other"},
		{&genai.FunctionCallingConfig{Mode: genai.FunctionCallingConfigModeNone}, ""},
	} {
		r, err := c.Models.GenerateContent(ctx, "gemini-2.5-flash", prompt, &genai.GenerateContentConfig{
			Tools: tools, ToolConfig: &genai.ToolConfig{FunctionCallingConfig: tc.cfg}})
		if err != nil {
			t.Fatal(err)
		}
		calls := r.FunctionCalls()
		if tc.want == "" {
			if len(calls) != 0 || r.Text() != "echo: ?tahw :1 q" {
				t.Fatalf("mode %s: calls %v, text %q", tc.cfg.Mode, calls, r.Text())
			}
			continue
		}
		if len(calls) != 1 || calls[0].Name != tc.want || calls[0].Args["echo"] != "echo: ?tahw :1 q" ||
			r.Candidates[0].FinishReason != genai.FinishReasonStop {
			t.Fatalf("mode %s: want a call of %s, got %+v", tc.cfg.Mode, tc.want, r.Candidates[0].Content)
		}
	}
}
