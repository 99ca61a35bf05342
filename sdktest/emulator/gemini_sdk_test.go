package emulator_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/internal/check"
	"github.com/sluice-batch/sluice/internal/emutest"

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
	clk := emutest.NewClock()
	s, ts := start(t, Options{BatchTime: 10 * time.Second, Now: clk.Now, APIKey: "gm-key"})
	ctx := context.Background()
	c := genaiClient(t, ts.URL+"/gemini", "v1beta", "gm-key")

	const n = 1100
	path, keys := gemRequestsFile(t, "request", n, 8000) // ~9.2 MB: "upload" then "upload, finalize"
	st, _ := os.Stat(path)
	check.Fatal(t, "input size, want more than one 8 MiB chunk", st.Size(), st.Size() > 8<<20)
	f := check.Try(c.Files.UploadFromPath(ctx, path, &genai.UploadFileConfig{MIMEType: "jsonl", DisplayName: "sdk-requests"})).Must(t, "upload")
	check.Fatal(t, "uploaded file", f, strings.HasPrefix(f.Name, "files/"), f.DisplayName == "sdk-requests", f.MIMEType == "jsonl",
		check.Deref(f.SizeBytes) == st.Size(), f.State == genai.FileStateActive, f.Source == genai.FileSourceUploaded,
		len(f.Sha256Hash) != 0, f.ExpirationTime.Sub(f.CreateTime) == 48*time.Hour)
	got := check.Try(c.Files.Get(ctx, f.Name, nil)).Must(t, "files.get")
	check.Fatal(t, "files.get", got, got.Name == f.Name, check.Deref(got.SizeBytes) == st.Size())

	job := check.Try(c.Batches.Create(ctx, "gemini-2.5-flash", &genai.BatchJobSource{FileName: f.Name},
		&genai.CreateBatchJobConfig{DisplayName: "sdk-job"})).Must(t, "create")
	check.Fatal(t, "created job", job, strings.HasPrefix(job.Name, "batches/"), job.State == genai.JobStatePending, job.DisplayName == "sdk-job",
		job.Model == "models/gemini-2.5-flash", !job.CreateTime.IsZero(), job.Dest == nil)
	clk.Advance(5 * time.Second)
	job = check.Try(c.Batches.Get(ctx, job.Name, nil)).Must(t, "get while running")
	check.Fatal(t, "get while running", job, job.State == genai.JobStateRunning)
	clk.Advance(6 * time.Second)
	job = check.Try(c.Batches.Get(ctx, job.Name, nil)).Must(t, "get after the batch time")
	check.Fatal(t, "get after the batch time", job, job.State == genai.JobStateSucceeded, job.Dest != nil, !job.EndTime.IsZero())
	check.Fatal(t, "get after the batch time", job, job.Dest.FileName != "")
	check.Error(t, "responses file, want files/batch-<id>", job.Dest.FileName, strings.HasPrefix(job.Dest.FileName, "files/batch-"))
	data := check.Try(c.Files.Download(ctx, genai.NewDownloadURIFromFile(&genai.File{DownloadURI: job.Dest.FileName}), nil)).Must(t, "download")
	checkGemResponses(t, data, keys)

	// Cancel a second batch while it runs: it ends CANCELLED.
	path2, _ := gemRequestsFile(t, "other", 40, 10)
	f2 := check.Try(c.Files.UploadFromPath(ctx, path2, &genai.UploadFileConfig{MIMEType: "application/jsonl"})).Must(t, "upload")
	job2 := check.Try(c.Batches.Create(ctx, "models/gemini-2.5-flash", &genai.BatchJobSource{FileName: f2.Name},
		&genai.CreateBatchJobConfig{DisplayName: "to-cancel"})).Must(t, "create")
	clk.Advance(3 * time.Second)
	check.NoErr(t, "cancel", c.Batches.Cancel(ctx, job2.Name, nil))
	job2 = check.Try(c.Batches.Get(ctx, job2.Name, nil)).Must(t, "after cancel")
	check.Fatal(t, "after cancel", job2, job2.State == genai.JobStateCancelled)
	checkGenaiErr(t, "cancelling an ended batch", c.Batches.Cancel(ctx, job2.Name, nil), 400, "FAILED_PRECONDITION", "")

	// List, one per page, through both API versions.
	for _, v := range []string{"v1beta", "v1"} {
		cv := genaiClient(t, ts.URL+"/gemini", v, "gm-key")
		page := check.Try(cv.Batches.List(ctx, &genai.ListBatchJobsConfig{PageSize: 1})).Must(t, v+" list")
		var names []string
		for {
			for _, j := range page.Items {
				names = append(names, j.Name+"="+j.DisplayName)
			}
			var err error
			if page, err = page.Next(ctx); err == genai.ErrPageDone {
				break
			}
			check.NoErr(t, v+" next page", err)
		}
		want := []string{job2.Name + "=to-cancel", job.Name + "=sdk-job"}
		check.Error(t, v+" list, want "+strings.Join(want, " ")+" (newest first)", names, strings.Join(names, " ") == strings.Join(want, " "))
		var files []string
		for fl, err := range cv.Files.All(ctx) {
			check.NoErr(t, v+" files", err)
			files = append(files, fl.Name)
		}
		// two uploads, two responses files (the cancelled batch ran part of its lines)
		check.Error(t, v+" files", files, len(files) == 4)
	}

	check.Try(c.Batches.Delete(ctx, job2.Name, nil)).Must(t, "delete")
	_, err := c.Batches.Get(ctx, job2.Name, nil)
	checkGenaiErr(t, "get after delete", err, 404, "NOT_FOUND", "")

	// A wrong key: 400 INVALID_ARGUMENT, as Google answers it.
	bad := genaiClient(t, ts.URL+"/gemini", "v1beta", "wrong")
	_, err = bad.Batches.Get(ctx, job.Name, nil)
	checkGenaiErr(t, "wrong key", err, 400, "INVALID_ARGUMENT", "API key not valid")
	// The direct call the batch lines stand for.
	resp, err := c.Models.GenerateContent(ctx, "gemini-2.5-flash", genai.Text("hello there"), nil)
	check.Error(t, "generateContent", fmt.Sprint(resp, err), err == nil, err == nil && resp.Text() == "echo: ereht olleh")
	g := s.Stats().ByFamily["gemini"]
	check.Error(t, "gemini stats", g, g.BatchesCreated == 2, g.RequestsProcessed >= n, g.RequestsProcessedMoreThanOnce == 0)
}

// checkGemResponses checks a batch's responses file: one SDK-readable echo
// answer for each of keys, none twice, no other.
func checkGemResponses(t *testing.T, data []byte, keys []string) {
	t.Helper()
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
		check.Fatal(t, "response of "+line.Key, sc.Text(), r != nil)
		u := check.Deref(r.UsageMetadata)
		check.Fatal(t, "response of "+line.Key, sc.Text(), len(r.Candidates) == 1)
		check.Fatal(t, "response of "+line.Key, sc.Text(), r.Candidates[0].FinishReason == genai.FinishReasonStop,
			strings.HasPrefix(r.Text(), "echo: "), r.UsageMetadata != nil, u.PromptTokenCount != 0,
			u.TotalTokenCount == u.PromptTokenCount+u.CandidatesTokenCount, r.ModelVersion == "gemini-2.5-flash", r.ResponseID != "")
		check.Fatal(t, "key twice", line.Key, !seen[line.Key])
		seen[line.Key] = true
	}
	check.Fatal(t, fmt.Sprintf("responses, want %d", len(keys)), len(seen), len(seen) == len(keys))
	for _, k := range keys {
		check.Fatal(t, "no response for key", k, seen[k])
	}
}

// checkGenaiErr checks that err is the API error Google answers: its HTTP
// code, its status, and (when msg is not empty) a message containing msg.
func checkGenaiErr(t *testing.T, what string, err error, code int, status, msg string) {
	t.Helper()
	var apiErr genai.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != code || apiErr.Status != status || !strings.Contains(apiErr.Message, msg) {
		t.Errorf("%s: %v, want %d %s %q", what, err, code, status, msg)
	}
}

// TestGeminiSDKInlinedRequests: a batch of inlined requests (the docs'
// first example) through the SDK: responses come back in the Operation, in
// request order, with their metadata, and a system instruction and
// generation config of the SDK's InlinedRequest.Config reach the model.
func TestGeminiSDKInlinedRequests(t *testing.T) {
	clk := emutest.NewClock()
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
