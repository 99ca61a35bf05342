package emulator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Mistral's batch API at /mistral (base URL http://HOST:PORT/mistral, the
// SDK's server_url; paths /mistral/v1/...). Wire facts and the decisions
// taken where they are unconfirmed: docs/providers/mistral.md.

var (
	mistralPurposes  = []string{"batch", "fine-tune", "ocr"}
	mistralEndpoints = []string{"/v1/chat/completions", "/v1/embeddings", "/v1/fim/completions", "/v1/moderations",
		"/v1/chat/moderations", "/v1/ocr", "/v1/classifications", "/v1/chat/classifications", "/v1/conversations",
		"/v1/audio/transcriptions"}
	mistralStatuses = map[string]string{stValidating: "QUEUED", stInProgress: "RUNNING", stFinalizing: "RUNNING",
		stCompleted: "SUCCESS", stFailed: "FAILED", stExpired: "TIMEOUT_EXCEEDED",
		stCancelling: "CANCELLATION_REQUESTED", stCancelled: "CANCELLED"}
)

func (s *Server) mistralRoutes(mux *http.ServeMux) {
	const p = "/mistral/v1"
	for _, ep := range []string{"/chat/completions", "/embeddings"} {
		mux.HandleFunc("POST "+p+ep, s.syncOpenAIShape(famMistral, "/v1"+ep))
	}
	h := mistralFam.h
	mux.HandleFunc("POST "+p+"/files", h(s.mistralUpload))
	mux.HandleFunc("GET "+p+"/files", h(s.mistralListFiles))
	s.fileRoutes(mux, p, fileAPI{fam: famMistral, render: func(f *fileRec) any { return s.mistralFileJSON(f) },
		missing: missingFile(mistralFam, func(id string) *apiError { return mistralNotFound("File", id) }),
		deleted: func(f *fileRec) any { return map[string]any{"id": f.ID, "object": "file", "deleted": true} }})
	mux.HandleFunc("POST "+p+"/batch/jobs", h(s.mistralCreate))
	mux.HandleFunc("GET "+p+"/batch/jobs", h(s.mistralList))
	mux.HandleFunc("GET "+p+"/batch/jobs/{id}", s.getBatch(mistralFam, "id", func(b *batchRec, r *http.Request, now time.Time) any {
		return s.mistralJobJSON(b, now, r.URL.Query().Get("inline") == "true")
	}))
	mux.HandleFunc("POST "+p+"/batch/jobs/{id}/cancel", h(s.mistralCancel))
	mux.HandleFunc("DELETE "+p+"/batch/jobs/{id}", h(s.mistralDelete))
}

// mistral422 writes the validation error {"detail":[{"loc","msg","type"}]}.
func mistral422(w http.ResponseWriter, loc []string, msg, typ string) {
	l := []any{"body"}
	for _, x := range loc {
		l = append(l, x)
	}
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": []any{
		map[string]any{"loc": l, "msg": msg, "type": typ}}})
}

// mistralInvalid is the validation error {"detail":[{"loc","msg","type"}]}.
func mistralInvalid(loc []string, msg, typ string) *apiError {
	return &apiError{Status: http.StatusUnprocessableEntity, Loc: loc, Msg: msg, Type: typ}
}

func mistralNotFound(what, id string) *apiError {
	return errf(http.StatusNotFound, what+" "+id+" not found")
}

func (s *Server) mistralFileID(seq int64) string { return uuidFrom(s.opts.Seed, "mfile", "", int(seq)) }

func (s *Server) mistralFileJSON(f *fileRec) map[string]any {
	var exp any
	if f.ExpiresAt != nil {
		exp = *f.ExpiresAt
	}
	source := "upload"
	if f.Result {
		source = "mistral"
	}
	return map[string]any{"id": f.ID, "object": "file", "bytes": f.Bytes, "created_at": f.CreatedAt,
		"filename": f.Filename, "purpose": f.Purpose, "sample_type": f.SampleType, "source": source,
		"num_lines": f.Lines, "mimetype": "application/jsonl", "signature": nil, "expires_at": exp,
		"visibility": "workspace"}
}

func (s *Server) mistralUpload(w http.ResponseWriter, r *http.Request) error {
	u, uerr := s.readUpload(r, s.opts.MaxFileBytes)
	if uerr != nil {
		if uerr.Status >= 500 || uerr.Status == http.StatusRequestEntityTooLarge {
			return errf(uerr.Status, uerr.Msg)
		}
		return mistralInvalid([]string{uerr.Param}, uerr.Msg, "value_error")
	}
	defer u.discard()
	purpose := u.fields["purpose"]
	if purpose == "" {
		purpose = "fine-tune" // the SDK's default
	}
	switch {
	case u.tmp == nil:
		return mistralInvalid([]string{"file"}, "Field required", "missing")
	case !slices.Contains(mistralPurposes, purpose):
		return mistralInvalid([]string{"purpose"}, "Input should be 'batch', 'fine-tune' or 'ocr'", "enum")
	}
	sample := map[string]string{"batch": "batch_request", "fine-tune": "instruct", "ocr": "ocr_input"}[purpose]
	now := s.now().Unix()
	var exp *int64
	if v := u.fields["expiry"]; v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return mistralInvalid([]string{"expiry"}, "Input should be a valid integer", "int_parsing")
		}
		e := now + n*3600
		exp = &e
	}
	return s.newFile(w, u, func(seq int64) *fileRec {
		return &fileRec{ID: s.mistralFileID(seq), Seq: seq, CreatedAt: now, ExpiresAt: exp, Filename: u.filename,
			Purpose: purpose, Family: famMistral, SampleType: sample}
	}, func(f *fileRec) any { return s.mistralFileJSON(f) })
}

// pageOf parses Mistral's page (from 0) and page_size (default 100).
func pageOf(q map[string][]string) (page, size int, err error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	page, size = 0, 100
	if v := get("page"); v != "" {
		if page, err = strconv.Atoi(v); err != nil || page < 0 {
			return 0, 0, mistralInvalid([]string{"query", "page"}, "Input should be a valid integer", "int_parsing")
		}
	}
	if v := get("page_size"); v != "" {
		if size, err = strconv.Atoi(v); err != nil || size < 1 {
			return 0, 0, mistralInvalid([]string{"query", "page_size"}, "Input should be a valid integer", "int_parsing")
		}
	}
	return page, size, nil
}

func pageSlice[T any](all []T, page, size int) []T {
	lo := min(page*size, len(all))
	return all[lo:min(lo+size, len(all))]
}

func (s *Server) mistralListFiles(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	page, size, err := pageOf(q)
	if err != nil {
		return err
	}
	return s.locked(func() error {
		all := s.familyFiles(famMistral, func(f *fileRec) bool {
			return (q.Get("purpose") == "" || f.Purpose == q.Get("purpose")) &&
				(q.Get("sample_type") == "" || f.SampleType == q.Get("sample_type")) &&
				(q.Get("search") == "" || strings.Contains(f.Filename, q.Get("search")))
		})
		data := []any{}
		for _, f := range pageSlice(all, page, size) {
			data = append(data, s.mistralFileJSON(f))
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": data, "object": "list", "total": len(all)})
		return nil
	})
}

// mistralCreateReq is the body of POST /batch/jobs.
type mistralCreateReq struct {
	InputFiles   []string          `json:"input_files"`
	Requests     []json.RawMessage `json:"requests"`
	Endpoint     string            `json:"endpoint"`
	Model        *string           `json:"model"`
	AgentID      *string           `json:"agent_id"`
	Metadata     map[string]any    `json:"metadata"`
	TimeoutHours *int              `json:"timeout_hours"`
}

func (req *mistralCreateReq) check() error {
	switch {
	case req.Endpoint == "":
		return mistralInvalid([]string{"endpoint"}, "Field required", "missing")
	case !slices.Contains(mistralEndpoints, req.Endpoint):
		return mistralInvalid([]string{"endpoint"}, fmt.Sprintf("Input should be one of %s", strings.Join(mistralEndpoints, ", ")), "enum")
	case len(req.InputFiles) == 0 && len(req.Requests) == 0:
		return mistralInvalid([]string{"input_files"}, "Either input_files or requests must be given", "value_error")
	case req.TimeoutHours != nil && (*req.TimeoutHours < 1 || *req.TimeoutHours > 168):
		return mistralInvalid([]string{"timeout_hours"}, "Input should be between 1 and 168", "value_error")
	}
	return nil
}

func (s *Server) mistralCreate(w http.ResponseWriter, r *http.Request) error {
	req, err := decodeChecked[mistralCreateReq](r, 64<<20, mistralFam)
	if err != nil {
		return err
	}
	md := map[string]string{}
	for k, v := range req.Metadata {
		if str, ok := v.(string); ok {
			md[k] = str
		} else {
			md[k] = string(mustJSON(v))
		}
	}
	model := ""
	if req.Model != nil {
		model = *req.Model
	}
	hours := 24
	if req.TimeoutHours != nil {
		hours = *req.TimeoutHours
	}
	var files []*fileRec
	var sp spooled
	err = s.ticked(func(now time.Time) error {
		for _, id := range req.InputFiles {
			f := s.files[id]
			if f == nil || f.Family != famMistral {
				return mistralNotFound("File", id)
			}
			files = append(files, f)
		}
		sp = spooled{seq: s.nextSeq(), now: now}
		sp.id = uuidFrom(s.opts.Seed, "mjob", "", int(sp.seq))
		return s.spoolInputs(sp.id, files, req.Requests)
	})
	if err != nil {
		return err
	}
	id, now := sp.id, sp.now
	var size int64
	var name string
	for _, f := range files {
		size += f.Bytes
		name = f.Filename
	}
	sc, err := s.scanBodyLines(s.batchInput(id), size, bodyScan{maxBytes: s.opts.MaxFileBytes,
		maxRequests: s.opts.MistralMaxRequests, jobModel: model})
	if err != nil {
		os.Remove(s.batchInput(id))
		return err
	}
	b := &batchRec{ID: id, Family: famMistral, Seq: sp.seq, Created: now, Endpoint: req.Endpoint, Model: model,
		InputFiles: req.InputFiles, Metadata: md, WindowSec: int64(hours) * 3600,
		JobKey: jobKeyOpenAI(md, name), N: sc.n, Tokens: sc.tokens, ScanErrors: sc.errs,
		FailInjected: s.fated("vfail", id, 0, s.opts.ValidationFailRate),
		ExpireFate:   s.fated("expire", id, 0, s.opts.ExpireRate),
		Status:       stValidating}
	if len(req.Metadata) == 0 {
		b.Metadata = nil
	}
	return s.locked(func() error {
		s.register(w, b, http.StatusOK, func() any { return s.mistralJobJSON(b, now, false) })
		return nil
	})
}

// spoolInputs writes a batch's input (its files one after another, or the
// inline requests) to its spool. Caller holds s.mu.
func (s *Server) spoolInputs(id string, files []*fileRec, inline []json.RawMessage) error {
	if len(files) == 1 && len(inline) == 0 {
		return linkOrCopy(s.filePath(files[0].ID), s.batchInput(id))
	}
	out, err := os.Create(s.batchInput(id))
	if err != nil {
		return err
	}
	for _, f := range files {
		in, err := os.ReadFile(s.filePath(f.ID))
		if err != nil {
			out.Close()
			return err
		}
		if len(in) > 0 && in[len(in)-1] != '\n' {
			in = append(in, '\n')
		}
		out.Write(in)
	}
	for _, r := range inline {
		out.Write(append(compactJSON(r), '\n'))
	}
	return out.Close()
}

func compactJSON(b []byte) []byte {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return b
	}
	return mustJSON(v)
}

// mistralJobJSON renders a BatchJob as of now.
func (s *Server) mistralJobJSON(b *batchRec, now time.Time, inline bool) map[string]any {
	ts := func(t *time.Time) any { return optTime(t, func(t time.Time) any { return t.Unix() }) }
	var total, succeeded, failed int
	switch b.Status {
	case stInProgress, stCancelling:
		total = b.N
		succeeded, failed = s.liveCounts(b, now)
	case stCompleted, stExpired, stCancelled:
		if b.InProgressAt != nil {
			total = b.N
			succeeded, failed = b.Counts.Succeeded, b.Counts.Errored
		}
	}
	errs := []any{}
	for _, e := range b.Errors {
		errs = append(errs, map[string]any{"message": e.Message, "count": 1})
	}
	var md any
	if b.Metadata != nil {
		md = b.Metadata
	}
	var outputs any
	if inline && terminal(b.Status) && b.OutputFileID != "" {
		outputs = s.inlineOutputs(b.OutputFileID)
	}
	return map[string]any{
		"id": b.ID, "object": "batch", "input_files": nonNil(b.InputFiles), "metadata": md,
		"endpoint": b.Endpoint, "model": nullable(b.Model), "agent_id": nil,
		"output_file": nullable(b.OutputFileID), "error_file": nullable(b.ErrorFileID),
		"errors": errs, "outputs": outputs, "status": mistralStatuses[b.Status],
		"created_at": b.Created.Unix(), "total_requests": total, "completed_requests": succeeded + failed,
		"succeeded_requests": succeeded, "failed_requests": failed,
		"started_at": ts(b.InProgressAt), "completed_at": ts(b.endedAt()),
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// inlineOutputs reads an output file's lines for GET ?inline=true (small
// files only: the inline form is for small jobs). Caller holds s.mu.
func (s *Server) inlineOutputs(fileID string) []json.RawMessage {
	f := s.files[fileID]
	if f == nil || f.Bytes > 8<<20 {
		return nil
	}
	data, err := os.ReadFile(s.filePath(fileID))
	if err != nil {
		return nil
	}
	var out []json.RawMessage
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if json.Valid([]byte(l)) {
			out = append(out, json.RawMessage(l))
		}
	}
	return out
}

func (s *Server) mistralCancel(w http.ResponseWriter, r *http.Request) error {
	return s.withBatch(mistralFam, r.PathValue("id"), func(b *batchRec, now time.Time) error {
		if !s.cancel(b, now) {
			return errf(http.StatusBadRequest, "Batch job %s is %s and cannot be cancelled.", b.ID, mistralStatuses[b.Status])
		}
		writeJSON(w, http.StatusOK, s.mistralJobJSON(b, now, false))
		return nil
	})
}

func (s *Server) mistralDelete(w http.ResponseWriter, r *http.Request) error {
	return s.withBatch(mistralFam, r.PathValue("id"), func(b *batchRec, _ time.Time) error {
		if !terminal(b.Status) {
			return errf(http.StatusBadRequest, "Batch job %s is %s: only a finished job can be deleted.", b.ID, mistralStatuses[b.Status])
		}
		s.deleteBatch(b)
		writeJSON(w, http.StatusOK, map[string]any{"id": b.ID, "object": "batch", "deleted": true})
		return nil
	})
}

func (s *Server) mistralList(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	page, size, err := pageOf(q)
	if err != nil {
		return err
	}
	var after time.Time
	if v := q.Get("created_after"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return mistralInvalid([]string{"query", "created_after"}, "Input should be a valid datetime", "datetime_parsing")
		}
		after = t
	}
	order := q.Get("order_by")
	if order == "" {
		order = "-created"
	}
	if order != "created" && order != "-created" {
		return mistralInvalid([]string{"query", "order_by"}, "Input should be 'created' or '-created'", "enum")
	}
	statuses := q["status"]
	return s.ticked(func(now time.Time) error {
		s.mistralListPage(w, q, now, after, order, statuses, page, size)
		return nil
	})
}

// mistralListPage answers one page of the listing. Caller holds s.mu.
func (s *Server) mistralListPage(w http.ResponseWriter, q url.Values, now, after time.Time, order string, statuses []string, page, size int) {
	var all []*batchRec
	for _, b := range s.sortedBatches(famMistral) {
		if (q.Get("model") == "" || b.Model == q.Get("model")) && (after.IsZero() || b.Created.After(after)) &&
			(len(statuses) == 0 || slices.Contains(statuses, mistralStatuses[b.Status])) {
			all = append(all, b)
		}
	}
	if order == "created" {
		slices.Reverse(all)
	}
	data := []any{}
	for _, b := range pageSlice(all, page, size) {
		data = append(data, s.mistralJobJSON(b, now, false))
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data, "object": "list", "total": len(all)})
}
