package emulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice/internal/emutest"
)

// The wire shapes of Mistral (docs/providers/mistral.md) and Together
// (docs/providers/together.md), checked field by field over real HTTP.

const mtKey = "test-key-mt"

type wire struct {
	t    *testing.T
	base string
	hc   *http.Client // never follows redirects
}

type wireAnswer struct {
	status int
	header http.Header
	raw    []byte
	obj    map[string]any
	arr    []any
}

func (w *wire) do(method, path, key, ctype string, body []byte) wireAnswer {
	w.t.Helper()
	u := path
	if !strings.HasPrefix(path, "http") {
		u = w.base + path
	}
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		w.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := w.hc.Do(req)
	if err != nil {
		w.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	a := wireAnswer{status: resp.StatusCode, header: resp.Header}
	a.raw, _ = io.ReadAll(resp.Body)
	json.Unmarshal(a.raw, &a.obj)
	json.Unmarshal(a.raw, &a.arr)
	return a
}

func (w *wire) json(method, path string, v any) wireAnswer {
	w.t.Helper()
	var b []byte
	if v != nil {
		b, _ = json.Marshal(v)
	}
	return w.do(method, path, mtKey, "application/json", b)
}

func multipartBody(fields map[string]string, filename string, data []byte) ([]byte, string) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range fields {
		mw.WriteField(k, v)
	}
	if data != nil {
		fw, _ := mw.CreateFormFile("file", filename)
		fw.Write(data)
	}
	mw.Close()
	return buf.Bytes(), mw.FormDataContentType()
}

func newWire(t *testing.T, opts Options) (*wire, *emutest.Clock) {
	clock := emutest.NewClock()
	opts.Now, opts.APIKey = clock.Now, mtKey
	_, ts := start(t, opts)
	return &wire{t: t, base: ts.URL, hc: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}, clock
}

// hasKeys fails for each key missing from obj.
// jsonLines decodes each line of a JSONL body as an object.
func jsonLines(t *testing.T, what string, raw []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%s line %q: %v", what, l, err)
		}
		out = append(out, m)
	}
	return out
}

func hasKeys(t *testing.T, what string, obj map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := obj[k]; !ok {
			t.Errorf("%s: no %q in %v", what, k, obj)
		}
	}
}

func want(t *testing.T, what string, got, wantV any) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(wantV) {
		t.Errorf("%s = %v, want %v", what, got, wantV)
	}
}

var uuidRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func bodyLines(n int, withModel bool) []byte {
	var b bytes.Buffer
	for i := range n {
		model := ""
		if withModel {
			model = `"model":"m-1",`
		}
		fmt.Fprintf(&b, `{"custom_id":"%d","body":{%s"max_tokens":100,"messages":[{"role":"user","content":"q %d"}]}}`+"\n", i, model, i)
	}
	return b.Bytes()
}

// TestMistralWireShapes checks each call, field, status and envelope of
// Mistral's batch API as docs/providers/mistral.md states them.
func TestMistralWireShapes(t *testing.T) {
	t.Parallel()
	w, clock := newWire(t, Options{BatchTime: 100 * time.Second, Seed: 3, LineErrorRate: 0.3})
	body, ct := multipartBody(map[string]string{"purpose": "batch"}, "in.jsonl", bodyLines(6, false))
	f := w.do("POST", "/mistral/v1/files", mtKey, ct, body)
	want(t, "upload status", f.status, 200)
	hasKeys(t, "file", f.obj, "id", "object", "bytes", "created_at", "filename", "purpose", "sample_type", "source", "num_lines", "mimetype", "signature", "expires_at", "visibility")
	want(t, "file.object", f.obj["object"], "file")
	want(t, "file.bytes", f.obj["bytes"], len(bodyLines(6, false)))
	want(t, "file.purpose", f.obj["purpose"], "batch")
	want(t, "file.sample_type", f.obj["sample_type"], "batch_request")
	want(t, "file.source", f.obj["source"], "upload")
	want(t, "file.num_lines", f.obj["num_lines"], 6)
	fileID, _ := f.obj["id"].(string)
	if !uuidRe.MatchString(fileID) {
		t.Errorf("file id %q is not a uuid", fileID)
	}

	// 422 {"detail":[{loc,msg,type}]} on a missing file and a bad endpoint.
	body, ct = multipartBody(map[string]string{"purpose": "batch"}, "", nil)
	e := w.do("POST", "/mistral/v1/files", mtKey, ct, body)
	want(t, "no file status", e.status, 422)
	d, _ := e.obj["detail"].([]any)
	if len(d) != 1 {
		t.Fatalf("422 body %s", e.raw)
	}
	hasKeys(t, "detail[0]", d[0].(map[string]any), "loc", "msg", "type")
	e = w.json("POST", "/mistral/v1/batch/jobs", map[string]any{"input_files": []string{fileID}, "endpoint": "/v1/nope", "model": "m-1"})
	want(t, "bad endpoint status", e.status, 422)

	// create -> QUEUED, every required field, nullable ones present.
	j := w.json("POST", "/mistral/v1/batch/jobs", map[string]any{"input_files": []string{fileID}, "endpoint": "/v1/chat/completions",
		"model": "mistral-small-latest", "metadata": map[string]any{"sluice_job": "j1", "n": 3}, "timeout_hours": 24})
	want(t, "create status", j.status, 200)
	hasKeys(t, "job", j.obj, "id", "object", "input_files", "metadata", "endpoint", "model", "agent_id", "output_file", "error_file",
		"errors", "outputs", "status", "created_at", "total_requests", "completed_requests", "succeeded_requests", "failed_requests",
		"started_at", "completed_at")
	want(t, "job.object", j.obj["object"], "batch")
	want(t, "job.status", j.obj["status"], "QUEUED")
	want(t, "job.input_files", j.obj["input_files"], []any{fileID})
	want(t, "job.metadata", j.obj["metadata"], map[string]any{"sluice_job": "j1", "n": "3"})
	want(t, "job.model", j.obj["model"], "mistral-small-latest")
	want(t, "job.errors", j.obj["errors"], []any{})
	jobID := j.obj["id"].(string)
	if !uuidRe.MatchString(jobID) {
		t.Errorf("job id %q is not a uuid", jobID)
	}

	clock.Advance(50 * time.Second)
	g := w.json("GET", "/mistral/v1/batch/jobs/"+jobID, nil)
	want(t, "running status", g.obj["status"], "RUNNING")
	if g.obj["started_at"] == nil {
		t.Error("RUNNING job without started_at")
	}
	clock.Advance(60 * time.Second)
	g = w.json("GET", "/mistral/v1/batch/jobs/"+jobID, nil)
	want(t, "final status", g.obj["status"], "SUCCESS")
	want(t, "total_requests", g.obj["total_requests"], 6)
	if g.obj["completed_at"] == nil || g.obj["output_file"] == nil {
		t.Fatalf("finished job %s", g.raw)
	}
	want(t, "succeeded+failed", g.obj["succeeded_requests"].(float64)+g.obj["failed_requests"].(float64), 6)

	// output and error files: octet-stream, OpenAI batch output lines.
	seen := 0
	for _, k := range []string{"output_file", "error_file"} {
		id, _ := g.obj[k].(string)
		if id == "" {
			continue
		}
		c := w.do("GET", "/mistral/v1/files/"+id+"/content", mtKey, "", nil)
		want(t, k+" content type", c.header.Get("Content-Type"), "application/octet-stream")
		for _, line := range jsonLines(t, k, c.raw) {
			hasKeys(t, k+" line", line, "id", "custom_id", "response", "error")
			resp := line["response"].(map[string]any)
			hasKeys(t, k+" response", resp, "status_code", "body")
			if ok := resp["status_code"].(float64) == 200; ok != (k == "output_file") {
				t.Errorf("%s line with status %v", k, resp["status_code"])
			}
			seen++
		}
		fo := w.json("GET", "/mistral/v1/files/"+id, nil)
		wantType := map[string]string{"output_file": "batch_result", "error_file": "batch_error"}[k]
		want(t, k+" sample_type", fo.obj["sample_type"], wantType)
	}
	want(t, "result lines", seen, 6)
	inline := w.json("GET", "/mistral/v1/batch/jobs/"+jobID+"?inline=true", nil)
	if outs, _ := inline.obj["outputs"].([]any); len(outs) == 0 {
		t.Errorf("inline=true gave no outputs: %s", inline.raw)
	}

	// list: {data, object:"list", total}, paged.
	j2 := w.json("POST", "/mistral/v1/batch/jobs", map[string]any{"input_files": []string{fileID}, "endpoint": "/v1/chat/completions", "model": "m-2"})
	l := w.json("GET", "/mistral/v1/batch/jobs?page=0&page_size=1", nil)
	hasKeys(t, "list", l.obj, "data", "object", "total")
	want(t, "list.object", l.obj["object"], "list")
	want(t, "list.total", l.obj["total"], 2)
	if data := l.obj["data"].([]any); len(data) != 1 || data[0].(map[string]any)["id"] != j2.obj["id"] {
		t.Errorf("page 0 size 1, newest first: %s", l.raw)
	}
	l = w.json("GET", "/mistral/v1/batch/jobs?status=SUCCESS", nil)
	want(t, "status filter total", l.obj["total"], 1)

	// cancel: CANCELLATION_REQUESTED, then CANCELLED.
	c := w.json("POST", "/mistral/v1/batch/jobs/"+j2.obj["id"].(string)+"/cancel", nil)
	want(t, "cancel status", c.obj["status"], "CANCELLATION_REQUESTED")
	clock.Advance(20 * time.Second)
	c = w.json("GET", "/mistral/v1/batch/jobs/"+j2.obj["id"].(string), nil)
	want(t, "cancelled status", c.obj["status"], "CANCELLED")

	// timeout_hours: a job past it ends TIMEOUT_EXCEEDED.
	w2, clock2 := newWire(t, Options{BatchTime: 3 * time.Hour})
	body, ct = multipartBody(map[string]string{"purpose": "batch"}, "in.jsonl", bodyLines(4, true))
	f2 := w2.do("POST", "/mistral/v1/files", mtKey, ct, body)
	j3 := w2.json("POST", "/mistral/v1/batch/jobs", map[string]any{"input_files": []any{f2.obj["id"]}, "endpoint": "/v1/chat/completions", "timeout_hours": 1})
	clock2.Advance(2 * time.Hour)
	want(t, "timed out", w2.json("GET", "/mistral/v1/batch/jobs/"+j3.obj["id"].(string), nil).obj["status"], "TIMEOUT_EXCEEDED")

	// errors: 404 and 401 in {"object":"error","message","type","param","code"}.
	for _, a := range []wireAnswer{w.json("GET", "/mistral/v1/batch/jobs/nope", nil), w.do("GET", "/mistral/v1/batch/jobs", "bad", "", nil)} {
		hasKeys(t, fmt.Sprintf("error %d", a.status), a.obj, "object", "message", "type", "param", "code")
		want(t, "error.object", a.obj["object"], "error")
	}
	want(t, "401", w.do("GET", "/mistral/v1/batch/jobs", "bad", "", nil).status, 401)
	want(t, "404", w.json("GET", "/mistral/v1/batch/jobs/nope", nil).status, 404)
	// delete job and file.
	del := w.json("DELETE", "/mistral/v1/batch/jobs/"+jobID, nil)
	want(t, "job delete", del.obj, map[string]any{"id": jobID, "object": "batch", "deleted": true})
	del = w.json("DELETE", "/mistral/v1/files/"+fileID, nil)
	want(t, "file delete", del.obj, map[string]any{"id": fileID, "object": "file", "deleted": true})
	// Inline requests instead of input_files.
	in := w.json("POST", "/mistral/v1/batch/jobs", map[string]any{"endpoint": "/v1/chat/completions", "model": "m-3",
		"requests": []any{map[string]any{"custom_id": "i0", "body": map[string]any{"messages": []any{map[string]any{"role": "user", "content": "x"}}}},
			map[string]any{"custom_id": "i1", "body": map[string]any{"messages": []any{map[string]any{"role": "user", "content": "y"}}}}}})
	want(t, "inline create", in.status, 200)
	want(t, "inline input_files", in.obj["input_files"], []any{})
	clock.Advance(200 * time.Second)
	in = w.json("GET", "/mistral/v1/batch/jobs/"+in.obj["id"].(string), nil)
	want(t, "inline job", fmt.Sprint(in.obj["status"], " ", in.obj["total_requests"]), "SUCCESS 2")
	// Mistral files are not OpenAI's.
	want(t, "openai sees mistral file", w.json("GET", "/v1/files/"+g.obj["output_file"].(string), nil).status, 404)
}

// TestTogetherWireShapes checks each upload flow, call, field, status and
// envelope of Together's batch API as docs/providers/together.md states
// them.
func TestTogetherWireShapes(t *testing.T) {
	t.Parallel()
	w, clock := newWire(t, Options{BatchTime: 100 * time.Second, Seed: 9, LineErrorRate: 0.4})
	data := bodyLines(8, true)
	fileFields := []string{"id", "object", "bytes", "created_at", "filename", "purpose", "FileType", "Processed", "processing_status"}

	// Redirect flow (Python and JS SDKs): 302 + Location + X-Together-File-Id, PUT, preprocess.
	form := url.Values{"purpose": {"batch-api"}, "file_name": {"in.jsonl"}, "file_type": {"jsonl"}}
	r1 := w.do("POST", "/together/v1/files", mtKey, "application/x-www-form-urlencoded", []byte(form.Encode()))
	want(t, "step 1 status", r1.status, 302)
	loc, id := r1.header.Get("Location"), r1.header.Get("X-Together-File-Id")
	if loc == "" || !strings.HasPrefix(id, "file-") || !uuidRe.MatchString(strings.TrimPrefix(id, "file-")) {
		t.Fatalf("302 without Location/X-Together-File-Id: %v", r1.header)
	}
	pre := w.json("POST", "/together/v1/batches", map[string]any{"endpoint": "/v1/chat/completions", "input_file_id": id})
	want(t, "create from an unprocessed file", pre.status, 400)
	want(t, "bad signature", w.do("PUT", loc+"x", "", "application/octet-stream", data).status, 403)
	want(t, "PUT status", w.do("PUT", loc, "", "application/octet-stream", data).status, 200)
	p := w.json("POST", "/together/v1/files/"+id+"/preprocess", nil)
	want(t, "preprocess status", p.status, 200)
	hasKeys(t, "FileResponse", p.obj, fileFields...)
	want(t, "Processed", p.obj["Processed"], true)
	want(t, "FileType", p.obj["FileType"], "jsonl")
	want(t, "bytes", p.obj["bytes"], len(data))
	want(t, "purpose", p.obj["purpose"], "batch-api")

	// Go SDK flow and the docs' curl: one multipart POST.
	for _, path := range []string{"/together/v1/files/upload", "/together/v1/files"} {
		body, ct := multipartBody(map[string]string{"purpose": "batch-api", "file_name": "x.jsonl", "file_type": "jsonl"}, "x.jsonl", data)
		u := w.do("POST", path, mtKey, ct, body)
		want(t, path+" status", u.status, 200)
		hasKeys(t, path, u.obj, fileFields...)
		want(t, path+" Processed", u.obj["Processed"], true)
	}
	fl := w.json("GET", "/together/v1/files", nil)
	if d, _ := fl.obj["data"].([]any); len(d) != 3 {
		t.Errorf("file list %s", fl.raw)
	}

	// create: 201 {"job","warning"}.
	c := w.json("POST", "/together/v1/batches", map[string]any{"endpoint": "/v1/chat/completions", "input_file_id": id, "completion_window": "24h", "priority": 1})
	want(t, "create status", c.status, 201)
	hasKeys(t, "create wireAnswer", c.obj, "job", "warning")
	job := c.obj["job"].(map[string]any)
	jobFields := []string{"id", "user_id", "input_file_id", "file_size_bytes", "status", "job_deadline", "created_at", "endpoint",
		"progress", "model_id", "output_file_id", "error_file_id", "error", "completed_at"}
	hasKeys(t, "job", job, jobFields...)
	want(t, "status", job["status"], "VALIDATING")
	want(t, "file_size_bytes", job["file_size_bytes"], len(data))
	want(t, "model_id", job["model_id"], "m-1")
	batchID := job["id"].(string)
	if !uuidRe.MatchString(batchID) {
		t.Errorf("batch id %q", batchID)
	}
	for _, k := range []string{"job_deadline", "created_at"} {
		if _, err := time.Parse(time.RFC3339, job[k].(string)); err != nil {
			t.Errorf("%s %v: %v", k, job[k], err)
		}
	}

	// get: the job bare; list: a bare array.
	clock.Advance(50 * time.Second)
	g := w.json("GET", "/together/v1/batches/"+batchID, nil)
	hasKeys(t, "get", g.obj, jobFields...)
	want(t, "running", g.obj["status"], "IN_PROGRESS")
	if pr := g.obj["progress"].(float64); pr <= 0 || pr >= 100 {
		t.Errorf("progress %v", pr)
	}
	l := w.json("GET", "/together/v1/batches", nil)
	if l.arr == nil || len(l.arr) != 1 || l.obj != nil {
		t.Fatalf("list is not a bare array: %s", l.raw)
	}
	clock.Advance(60 * time.Second)
	g = w.json("GET", "/together/v1/batches/"+batchID, nil)
	want(t, "completed", g.obj["status"], "COMPLETED")
	want(t, "progress", g.obj["progress"], 100)
	if _, err := time.Parse(time.RFC3339, fmt.Sprint(g.obj["completed_at"])); err != nil {
		t.Errorf("completed_at %v", g.obj["completed_at"])
	}
	lines := 0
	out := w.do("GET", "/together/v1/files/"+g.obj["output_file_id"].(string)+"/content", mtKey, "", nil)
	for _, m := range jsonLines(t, "output", out.raw) {
		hasKeys(t, "output line", m, "custom_id", "response")
		hasKeys(t, "output response", m["response"].(map[string]any), "status_code", "body")
		lines++
	}
	errOut := w.do("GET", "/together/v1/files/"+g.obj["error_file_id"].(string)+"/content", mtKey, "", nil)
	for _, m := range jsonLines(t, "error", errOut.raw) {
		hasKeys(t, "error line", m, "custom_id", "error")
		hasKeys(t, "error line error", m["error"].(map[string]any), "message", "code")
		lines++
	}
	want(t, "result lines", lines, 8)

	// cancel: VALIDATING|IN_PROGRESS only; CANCELLED.
	c2 := w.json("POST", "/together/v1/batches", map[string]any{"endpoint": "/v1/chat/completions", "input_file_id": id})
	id2 := c2.obj["job"].(map[string]any)["id"].(string)
	want(t, "cancel", w.json("POST", "/together/v1/batches/"+id2+"/cancel", nil).obj["status"], "CANCELLED")
	again := w.json("POST", "/together/v1/batches/"+id2+"/cancel", nil)
	want(t, "cancel again", again.status, 400)

	// errors: {"error":"string"} on batch endpoints (400, 401, 404); the
	// OpenAI envelope elsewhere.
	for _, a := range []wireAnswer{again, w.json("GET", "/together/v1/batches/nope", nil),
		w.do("GET", "/together/v1/batches", "bad", "", nil),
		w.json("POST", "/together/v1/batches", map[string]any{"endpoint": "/v1/embeddings", "input_file_id": id})} {
		if s, ok := a.obj["error"].(string); !ok || s == "" {
			t.Errorf("%d: want {\"error\":\"…\"}, got %s", a.status, a.raw)
		}
	}
	want(t, "404", w.json("GET", "/together/v1/batches/nope", nil).status, 404)
	want(t, "401", w.do("GET", "/together/v1/batches", "bad", "", nil).status, 401)
	fe := w.do("GET", "/together/v1/files", "bad", "", nil)
	if e, ok := fe.obj["error"].(map[string]any); fe.status != 401 || !ok || e["message"] == nil {
		t.Errorf("file 401: %d %s", fe.status, fe.raw)
	}
	del := w.json("DELETE", "/together/v1/files/"+id, nil)
	want(t, "delete", del.obj, map[string]any{"id": id, "deleted": true})

	// expiry: EXPIRED.
	w3, clock3 := newWire(t, Options{ExpireRate: 1, BatchTime: time.Second})
	body, ct := multipartBody(map[string]string{"purpose": "batch-api", "file_name": "x.jsonl"}, "x.jsonl", data)
	u := w3.do("POST", "/together/v1/files/upload", mtKey, ct, body)
	c3 := w3.json("POST", "/together/v1/batches", map[string]any{"endpoint": "/v1/chat/completions", "input_file_id": u.obj["id"]})
	clock3.Advance(2 * time.Second)
	want(t, "expired", w3.json("GET", "/together/v1/batches/"+c3.obj["job"].(map[string]any)["id"].(string), nil).obj["status"], "EXPIRED")
}

// TestMistralTogetherPersist: with a DataDir, a restarted emulator still
// has both families' files, batches, pending redirect uploads and
// counters, and runs the batches to the end.
func TestMistralTogetherPersist(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clock := emutest.NewClock()
	open := func() (*wire, func()) {
		s, err := New(Options{DataDir: dir, Now: clock.Now, APIKey: mtKey, BatchTime: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(s.Handler())
		return &wire{t: t, base: ts.URL, hc: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}}, func() { ts.Close(); s.Close() }
	}
	w, stop := open()
	body, ct := multipartBody(map[string]string{"purpose": "batch"}, "sluice-j-c1-a1.jsonl", bodyLines(5, true))
	mf := w.do("POST", "/mistral/v1/files", mtKey, ct, body).obj["id"].(string)
	mj := w.json("POST", "/mistral/v1/batch/jobs", map[string]any{"input_files": []string{mf}, "endpoint": "/v1/chat/completions",
		"metadata": map[string]string{"sluice_job": "j"}}).obj["id"].(string)
	body, ct = multipartBody(map[string]string{"purpose": "batch-api", "file_name": "sluice-k-c1-a1.jsonl"}, "x.jsonl", bodyLines(5, true))
	tf := w.do("POST", "/together/v1/files/upload", mtKey, ct, body).obj["id"].(string)
	tj := w.json("POST", "/together/v1/batches", map[string]any{"endpoint": "/v1/chat/completions", "input_file_id": tf}).obj["job"].(map[string]any)["id"].(string)
	form := url.Values{"purpose": {"batch-api"}, "file_name": {"later.jsonl"}}
	r1 := w.do("POST", "/together/v1/files", mtKey, "application/x-www-form-urlencoded", []byte(form.Encode()))
	loc, pending := r1.header.Get("Location"), r1.header.Get("X-Together-File-Id")
	stop()

	clock.Advance(2 * time.Minute)
	w, stop = open()
	defer stop()
	want(t, "mistral job after restart", w.json("GET", "/mistral/v1/batch/jobs/"+mj, nil).obj["status"], "SUCCESS")
	want(t, "together batch after restart", w.json("GET", "/together/v1/batches/"+tj, nil).obj["status"], "COMPLETED")
	want(t, "mistral file after restart", w.json("GET", "/mistral/v1/files/"+mf, nil).status, 200)
	// The pending upload continues on the new server (same port not
	// needed: the path and signature are what count).
	u, _ := url.Parse(loc)
	want(t, "PUT after restart", w.do("PUT", w.base+u.RequestURI(), "", "application/octet-stream", bodyLines(2, true)).status, 200)
	want(t, "preprocess after restart", w.json("POST", "/together/v1/files/"+pending+"/preprocess", nil).obj["Processed"], true)
	var st Stats
	json.Unmarshal(w.json("GET", "/_emulator/stats", nil).raw, &st)
	if st.ByFamily["mistral"].BatchesCreated != 1 || st.ByFamily["together"].BatchesCreated != 1 ||
		st.ByFamily["mistral"].RequestsProcessed != 5 || st.ByFamily["together"].RequestsProcessed != 5 {
		t.Fatalf("counters after restart %+v", st.ByFamily)
	}
}
