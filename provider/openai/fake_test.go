package openai_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// specFacts are the schema facts of testdata/spec-facts.json, copied from
// the official OpenAPI file.
type specFacts struct {
	CreateBatchRequest struct {
		Required             []string `json:"required"`
		Properties           []string `json:"properties"`
		EndpointEnum         []string `json:"endpoint_enum"`
		CompletionWindowEnum []string `json:"completion_window_enum"`
		Metadata             struct {
			MaxPairs    int `json:"max_pairs"`
			MaxKeyLen   int `json:"max_key_len"`
			MaxValueLen int `json:"max_value_len"`
		} `json:"metadata"`
		OutputExpiresAfter struct {
			Required   []string `json:"required"`
			SecondsMin int64    `json:"seconds_min"`
			SecondsMax int64    `json:"seconds_max"`
		} `json:"output_expires_after"`
	} `json:"CreateBatchRequest"`
	CreateFileRequest struct {
		Required    []string `json:"required"`
		Properties  []string `json:"properties"`
		PurposeEnum []string `json:"purpose_enum"`
	} `json:"CreateFileRequest"`
	ListBatches struct {
		LimitMax int `json:"limit_max"`
	} `json:"ListBatches"`
	ListFiles struct {
		LimitMax int `json:"limit_max"`
	} `json:"ListFiles"`
}

func loadFacts(t *testing.T) specFacts {
	b, err := os.ReadFile("testdata/spec-facts.json")
	if err != nil {
		t.Fatal(err)
	}
	var f specFacts
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

type fakeFile struct {
	ID, Name, Purpose string
	Data              []byte
	Created           int64
}

type fakeBatch struct {
	obj   map[string]any
	polls int
	input string
}

// fakeOpenAI is a small OpenAI Files + Batches server following
// docs/providers.md, which checks every request against the spec facts.
// Batches go validating → in_progress → completed on successive GETs.
type fakeOpenAI struct {
	t     *testing.T
	facts specFacts
	// authHeader/authValue: the credential every request must carry.
	authHeader, authValue string
	// azure: statuses capitalised, created_at as RFC 3339, an empty error
	// file on clean batches.
	azure bool

	mu      sync.Mutex
	seq     int
	clock   int64
	files   []*fakeFile // oldest first
	batches []*fakeBatch
	// lose names calls ("POST /files") whose answer is lost after the
	// call took effect: the connection is reset instead.
	lose  map[string]int
	calls []string
}

func newFake(t *testing.T) (*fakeOpenAI, string) {
	f := &fakeOpenAI{t: t, facts: loadFacts(t), clock: time.Now().Unix(), lose: map[string]int{},
		authHeader: "Authorization", authValue: "Bearer sk-test-key-123456"}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/files", f.upload)
	mux.HandleFunc("GET /v1/files", f.listFiles)
	mux.HandleFunc("GET /v1/files/{id}/content", f.content)
	mux.HandleFunc("DELETE /v1/files/{id}", f.deleteFile)
	mux.HandleFunc("POST /v1/batches", f.create)
	mux.HandleFunc("GET /v1/batches", f.listBatches)
	mux.HandleFunc("GET /v1/batches/{id}", f.get)
	mux.HandleFunc("POST /v1/batches/{id}/cancel", f.cancel)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get(f.authHeader); got != f.authValue {
			w.WriteHeader(401)
			fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)
			return
		}
		f.mu.Lock()
		f.calls = append(f.calls, r.Method+" "+strings.TrimPrefix(r.URL.Path, "/v1"))
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return f, srv.URL + "/v1"
}

func (f *fakeOpenAI) id(prefix string) string {
	f.seq++
	f.clock++
	return fmt.Sprintf("%s%04d", prefix, f.seq)
}

func (f *fakeOpenAI) fail(w http.ResponseWriter, code int, msg string) {
	f.t.Errorf("fake openai: %s", msg)
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "param": nil, "code": nil}})
}

// answer writes v, unless the call is to lose its answer.
func (f *fakeOpenAI) answer(w http.ResponseWriter, call string, v any) {
	f.mu.Lock()
	lose := f.lose[call] > 0
	if lose {
		f.lose[call]--
	}
	f.mu.Unlock()
	if lose {
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (f *fakeOpenAI) upload(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength <= 0 || len(r.TransferEncoding) > 0 {
		f.fail(w, 400, "upload without an exact Content-Length")
		return
	}
	mr, err := r.MultipartReader()
	if err != nil {
		f.fail(w, 400, err.Error())
		return
	}
	vals := map[string]string{}
	var file *fakeFile
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			f.fail(w, 400, err.Error())
			return
		}
		name := p.FormName()
		if i := strings.IndexByte(name, '['); i > 0 {
			name = name[:i] // expires_after[anchor] → expires_after
		}
		if !slices.Contains(f.facts.CreateFileRequest.Properties, name) {
			f.fail(w, 400, "CreateFileRequest has no field "+p.FormName())
			return
		}
		data, _ := io.ReadAll(p)
		if name == "file" {
			file = &fakeFile{Name: p.FileName(), Data: data}
		} else {
			vals[p.FormName()] = string(data)
		}
	}
	for _, req := range f.facts.CreateFileRequest.Required {
		if (req == "file" && file == nil) || (req != "file" && vals[req] == "") {
			f.fail(w, 400, "CreateFileRequest misses "+req)
			return
		}
	}
	if !slices.Contains(f.facts.CreateFileRequest.PurposeEnum, vals["purpose"]) || vals["purpose"] != "batch" {
		f.fail(w, 400, "bad purpose "+vals["purpose"])
		return
	}
	f.mu.Lock()
	file.ID, file.Purpose, file.Created = f.id("file-"), "batch", f.clock
	f.files = append(f.files, file)
	f.mu.Unlock()
	f.answer(w, "POST /files", f.fileJSON(file))
}

func (f *fakeOpenAI) fileJSON(x *fakeFile) map[string]any {
	return map[string]any{"id": x.ID, "object": "file", "bytes": len(x.Data), "created_at": f.ts(x.Created),
		"filename": x.Name, "purpose": x.Purpose, "status": "processed"}
}

func (f *fakeOpenAI) ts(unix int64) any {
	if f.azure {
		return time.Unix(unix, 0).UTC().Format(time.RFC3339)
	}
	return unix
}

func (f *fakeOpenAI) file(id string) *fakeFile {
	for _, x := range f.files {
		if x.ID == id {
			return x
		}
	}
	return nil
}

// page returns the items after the cursor, newest first.
func page[T any](items []T, id func(T) string, r *http.Request, max int) ([]T, bool, error) {
	limit := 20
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > max {
			return nil, false, fmt.Errorf("limit %q out of 1..%d", s, max)
		}
		limit = n
	}
	rev := slices.Clone(items)
	slices.Reverse(rev)
	if after := r.URL.Query().Get("after"); after != "" {
		i := slices.IndexFunc(rev, func(x T) bool { return id(x) == after })
		rev = rev[i+1:]
	}
	if len(rev) > limit {
		return rev[:limit], true, nil
	}
	return rev, false, nil
}

func (f *fakeOpenAI) listFiles(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var files []*fakeFile
	for _, x := range f.files {
		if p := r.URL.Query().Get("purpose"); p == "" || p == x.Purpose {
			files = append(files, x)
		}
	}
	items, more, err := page(files, func(x *fakeFile) string { return x.ID }, r, f.facts.ListFiles.LimitMax)
	if err != nil {
		f.fail(w, 400, err.Error())
		return
	}
	data := []any{}
	for _, x := range items {
		data = append(data, f.fileJSON(x))
	}
	last := ""
	if len(items) > 0 {
		last = items[len(items)-1].ID
	}
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "has_more": more, "first_id": "", "last_id": last})
}

func (f *fakeOpenAI) content(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	x := f.file(r.PathValue("id"))
	f.mu.Unlock()
	if x == nil {
		w.WriteHeader(404)
		fmt.Fprint(w, `{"error":{"message":"No such File object","type":"invalid_request_error","param":"id","code":null}}`)
		return
	}
	w.Write(x.Data)
}

func (f *fakeOpenAI) deleteFile(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.IndexFunc(f.files, func(x *fakeFile) bool { return x.ID == r.PathValue("id") })
	if i < 0 {
		w.WriteHeader(404)
		fmt.Fprint(w, `{"error":{"message":"No such File object","type":"invalid_request_error","param":"id","code":null}}`)
		return
	}
	f.files = slices.Delete(f.files, i, i+1)
	json.NewEncoder(w).Encode(map[string]any{"id": r.PathValue("id"), "object": "file", "deleted": true})
}

func (f *fakeOpenAI) create(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		f.fail(w, 400, "create batch content type "+ct)
		return
	}
	var req map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		f.fail(w, 400, err.Error())
		return
	}
	facts := f.facts.CreateBatchRequest
	for k := range req {
		if !slices.Contains(facts.Properties, k) {
			f.fail(w, 400, "CreateBatchRequest has no field "+k)
			return
		}
	}
	for _, k := range facts.Required {
		if _, ok := req[k]; !ok {
			f.fail(w, 400, "CreateBatchRequest misses "+k)
			return
		}
	}
	var input, endpoint, window string
	json.Unmarshal(req["input_file_id"], &input)
	json.Unmarshal(req["endpoint"], &endpoint)
	json.Unmarshal(req["completion_window"], &window)
	if !f.azure && !slices.Contains(facts.EndpointEnum, endpoint) || !slices.Contains(facts.CompletionWindowEnum, window) {
		f.fail(w, 400, "endpoint or completion_window out of the enum: "+endpoint+" "+window)
		return
	}
	md := map[string]string{}
	if raw, ok := req["metadata"]; ok {
		if err := json.Unmarshal(raw, &md); err != nil || len(md) > facts.Metadata.MaxPairs {
			f.fail(w, 400, "metadata is not a map of at most 16 strings")
			return
		}
		for k, v := range md {
			if len(k) > facts.Metadata.MaxKeyLen || len(v) > facts.Metadata.MaxValueLen {
				f.fail(w, 400, "metadata pair too long")
				return
			}
		}
	}
	if raw, ok := req["output_expires_after"]; ok {
		var ea struct {
			Anchor  string `json:"anchor"`
			Seconds int64  `json:"seconds"`
		}
		json.Unmarshal(raw, &ea)
		if ea.Anchor != "created_at" || ea.Seconds < facts.OutputExpiresAfter.SecondsMin || ea.Seconds > facts.OutputExpiresAfter.SecondsMax {
			f.fail(w, 400, "bad output_expires_after")
			return
		}
	}
	f.mu.Lock()
	if f.file(input) == nil {
		f.mu.Unlock()
		w.WriteHeader(400)
		fmt.Fprint(w, `{"error":{"message":"input file not found","type":"invalid_request_error","param":"input_file_id","code":null}}`)
		return
	}
	b := &fakeBatch{input: input, obj: map[string]any{
		"id": f.id("batch_"), "object": "batch", "endpoint": endpoint, "input_file_id": input,
		"completion_window": window, "status": f.status("validating"), "output_file_id": nil, "error_file_id": nil,
		"errors": nil, "metadata": md, "request_counts": map[string]int{"total": 0, "completed": 0, "failed": 0},
	}}
	b.obj["created_at"] = f.ts(f.clock)
	f.batches = append(f.batches, b)
	obj := maps(b.obj)
	f.mu.Unlock()
	f.answer(w, "POST /batches", obj)
}

func maps(m map[string]any) map[string]any {
	c := make(map[string]any, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func (f *fakeOpenAI) status(s string) string {
	if f.azure {
		return strings.ToUpper(s[:1]) + s[1:]
	}
	return s
}

// batch is the batch the request's path names; when there is none it
// answers 404 as OpenAI does and returns nil.
func (f *fakeOpenAI) batch(w http.ResponseWriter, r *http.Request) *fakeBatch {
	for _, b := range f.batches {
		if b.obj["id"] == r.PathValue("id") {
			return b
		}
	}
	w.WriteHeader(404)
	fmt.Fprint(w, `{"error":{"message":"No batch found","type":"invalid_request_error","param":null,"code":null}}`)
	return nil
}

func (f *fakeOpenAI) listBatches(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	items, more, err := page(f.batches, func(b *fakeBatch) string { return b.obj["id"].(string) }, r, f.facts.ListBatches.LimitMax)
	if err != nil {
		f.fail(w, 400, err.Error())
		return
	}
	data := []any{}
	for _, b := range items {
		data = append(data, b.obj)
	}
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "has_more": more})
}

func (f *fakeOpenAI) get(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.batch(w, r)
	if b == nil {
		return
	}
	b.polls++
	switch strings.ToLower(b.obj["status"].(string)) {
	case "validating":
		b.obj["status"] = f.status("in_progress")
	case "in_progress":
		f.finish(b, "completed")
	case "cancelling":
		f.finish(b, "cancelled")
	}
	json.NewEncoder(w).Encode(b.obj)
}

func (f *fakeOpenAI) cancel(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.batch(w, r)
	if b == nil {
		return
	}
	b.obj["status"] = f.status("cancelling")
	json.NewEncoder(w).Encode(b.obj)
}

// finish runs the batch: custom_ids starting "fail" get a 400, "slow" a
// 429, "exp" an error batch_expired (every unfinished line, when
// cancelled), the others a 200 with usage.
func (f *fakeOpenAI) finish(b *fakeBatch, status string) {
	var out, errs bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(f.file(b.input).Data))
	total, failed := 0, 0
	for sc.Scan() {
		var in struct {
			CustomID string          `json:"custom_id"`
			Body     json.RawMessage `json:"body"`
		}
		json.Unmarshal(sc.Bytes(), &in)
		total++
		id := in.CustomID
		switch {
		case status == "cancelled" || strings.HasPrefix(id, "exp"):
			code := "batch_expired"
			if status == "cancelled" {
				code = "batch_cancelled"
			}
			fmt.Fprintf(&errs, `{"id":"batch_req_%d","custom_id":%q,"response":null,"error":{"code":%q,"message":"not run"}}`+"\n", total, id, code)
			failed++
		case strings.HasPrefix(id, "fail"):
			fmt.Fprintf(&errs, `{"id":"batch_req_%d","custom_id":%q,"response":{"status_code":400,"request_id":"req_%d","body":{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}},"error":null}`+"\n", total, id, total)
			failed++
		case strings.HasPrefix(id, "slow"):
			fmt.Fprintf(&errs, `{"id":"batch_req_%d","custom_id":%q,"response":{"status_code":429,"request_id":"req_%d","body":{"error":{"message":"slow down","type":"requests","param":null,"code":"rate_limit_exceeded"}}},"error":null}`+"\n", total, id, total)
			failed++
		default:
			fmt.Fprintf(&out, `{"id":"batch_req_%d","custom_id":%q,"response":{"status_code":200,"request_id":"req_%d","body":{"object":"chat.completion","echo":%s,"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}},"error":null}`+"\n", total, id, total, in.Body)
		}
	}
	b.obj["status"] = f.status(status)
	b.obj["request_counts"] = map[string]int{"total": total, "completed": total - failed, "failed": failed}
	if out.Len() > 0 {
		o := &fakeFile{ID: f.id("file-"), Name: "batch_output.jsonl", Purpose: "batch_output", Data: out.Bytes(), Created: f.clock}
		f.files = append(f.files, o)
		b.obj["output_file_id"] = o.ID
	}
	if errs.Len() > 0 || f.azure {
		e := &fakeFile{ID: f.id("file-"), Name: "batch_error.jsonl", Purpose: "batch_output", Data: errs.Bytes(), Created: f.clock}
		f.files = append(f.files, e)
		b.obj["error_file_id"] = e.ID
	}
}

func (f *fakeOpenAI) batchCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.batches)
}

func (f *fakeOpenAI) fileCount(purpose string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, x := range f.files {
		if x.Purpose == purpose {
			n++
		}
	}
	return n
}

func newServer(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
