package emulator

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Together's batch API at /together/v1 (base URL
// http://HOST:PORT/together/v1, as the SDKs take it). Every upload flow of
// the SDKs is served: the Go SDK's multipart POST /files/upload, the docs'
// multipart POST /files, and the Python and JS SDKs' redirect flow (POST
// /files without a file answers 302 to a signed URL under
// /together/upload/, PUT the bytes there, POST /files/{id}/preprocess).
// Wire facts and decisions: docs/providers/together.md.

// togetherUploadPath is where signed upload URLs point (outside /v1, as a
// storage host would be; no API key, a signature instead).
const togetherUploadPath = "/together/upload/"

var (
	togetherEndpoints = []string{"/v1/chat/completions", "/v1/completions"}
	togetherStatuses  = map[string]string{stValidating: "VALIDATING", stInProgress: "IN_PROGRESS", stFinalizing: "IN_PROGRESS",
		stCompleted: "COMPLETED", stFailed: "FAILED", stExpired: "EXPIRED", stCancelling: "CANCELLING", stCancelled: "CANCELLED"}
)

func (s *Server) togetherRoutes(mux *http.ServeMux) {
	const p = "/together/v1"
	for _, ep := range []string{"/chat/completions", "/completions"} {
		mux.HandleFunc("POST "+p+ep, s.syncOpenAIShape(famTogether, "/v1"+ep))
	}
	mux.HandleFunc("POST "+p+"/files/upload", s.togetherUploadMultipart)
	mux.HandleFunc("POST "+p+"/files", s.togetherFiles)
	mux.HandleFunc("PUT "+togetherUploadPath+"{id}", s.togetherPut)
	mux.HandleFunc("POST "+p+"/files/{id}/preprocess", s.togetherPreprocess)
	mux.HandleFunc("GET "+p+"/files", s.togetherListFiles)
	s.fileRoutes(mux, p, fileAPI{fam: famTogether, render: func(f *fileRec) any { return s.togetherFileJSON(f) },
		missing: togetherFileNotFound, errs: openaiFam, deleted: func(f *fileRec) any { return map[string]any{"id": f.ID, "deleted": true} }})
	mux.HandleFunc("POST "+p+"/batches", s.togetherCreate)
	mux.HandleFunc("GET "+p+"/batches", s.togetherList)
	mux.HandleFunc("GET "+p+"/batches/{id}", s.togetherGet)
	mux.HandleFunc("POST "+p+"/batches/{id}/cancel", s.togetherCancel)
}

func (s *Server) togetherFileID(seq int64) string {
	return "file-" + uuidFrom(s.opts.Seed, "tfile", "", int(seq))
}

func togetherFileNotFound(id string) *apiError {
	return &apiError{Status: http.StatusNotFound, Msg: "File " + id + " not found", Code: "not_found"}
}

func (s *Server) togetherFileJSON(f *fileRec) map[string]any {
	status := "COMPLETED"
	if !f.Processed {
		status = "PENDING"
	}
	return map[string]any{"id": f.ID, "object": "file", "bytes": f.Bytes, "created_at": f.CreatedAt,
		"filename": f.Filename, "purpose": f.Purpose, "FileType": "jsonl", "Processed": f.Processed,
		"processing_status": status, "LineCount": f.Lines}
}

// signature is the signature of the upload URL of file id.
func (s *Server) signature(id string) string {
	m := hmac.New(sha256.New, []byte(fmt.Sprint("emulator-upload", s.opts.Seed, s.opts.APIKey)))
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))[:32]
}

// togetherCheckFields validates the fields of an upload: purpose and
// file_name required, file_type jsonl (the emulator reads only JSONL).
func togetherCheckFields(w http.ResponseWriter, purpose, name, ftype string) bool {
	switch {
	case purpose == "":
		oaiError(w, 400, "invalid_request_error", "purpose is required", "purpose", "")
	case purpose != "batch-api" && purpose != "fine-tune" && purpose != "eval":
		oaiError(w, 400, "invalid_request_error", "Invalid purpose '"+purpose+"'", "purpose", "")
	case name == "":
		oaiError(w, 400, "invalid_request_error", "file_name is required", "file_name", "")
	case ftype != "" && ftype != "jsonl":
		oaiError(w, 400, "invalid_request_error", "file_type '"+ftype+"' is not served by the emulator (jsonl only)", "file_type", "")
	default:
		return true
	}
	return false
}

// togetherUploadMultipart is the Go SDK's POST /files/upload.
func (s *Server) togetherUploadMultipart(w http.ResponseWriter, r *http.Request) {
	s.togetherMultipart(w, r, true)
}

// togetherFiles is POST /files: multipart with a file part (the docs'
// curl), or the first step of the redirect flow (a form without the file,
// urlencoded or multipart).
func (s *Server) togetherFiles(w http.ResponseWriter, r *http.Request) {
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct == "multipart/form-data" {
		s.togetherMultipart(w, r, false)
		return
	}
	if err := r.ParseForm(); err != nil {
		oaiError(w, 400, "invalid_request_error", "Malformed form body: "+err.Error(), "", "")
		return
	}
	s.togetherAnnounce(w, r, r.PostForm.Get("purpose"), r.PostForm.Get("file_name"), r.PostForm.Get("file_type"))
}

func (s *Server) togetherMultipart(w http.ResponseWriter, r *http.Request, needFile bool) {
	u, uerr := s.readUpload(r, s.opts.MaxFileBytes)
	if uerr != nil {
		openaiFam.write(w, uerr)
		return
	}
	defer u.discard()
	name := u.fields["file_name"]
	if name == "" {
		name = u.filename
	}
	if u.tmp == nil && !needFile {
		s.togetherAnnounce(w, r, u.fields["purpose"], name, u.fields["file_type"])
		return
	}
	if u.tmp == nil {
		oaiError(w, 400, "invalid_request_error", "file is required", "file", "")
		return
	}
	if !togetherCheckFields(w, u.fields["purpose"], name, u.fields["file_type"]) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := s.nextSeq()
	f := &fileRec{ID: s.togetherFileID(seq), Seq: seq, CreatedAt: s.now().Unix(), Filename: name,
		Purpose: u.fields["purpose"], Family: famTogether, Processed: true}
	if err := s.storeUpload(u, f); err != nil {
		oaiError(w, 500, "server_error", err.Error(), "", "")
		return
	}
	writeJSON(w, http.StatusOK, s.togetherFileJSON(f))
}

// togetherAnnounce answers the first step of the redirect flow: a pending
// file, 302 to its signed upload URL, and its id in X-Together-File-Id.
func (s *Server) togetherAnnounce(w http.ResponseWriter, r *http.Request, purpose, name, ftype string) {
	if !togetherCheckFields(w, purpose, name, ftype) {
		return
	}
	s.mu.Lock()
	seq := s.nextSeq()
	f := &fileRec{ID: s.togetherFileID(seq), Seq: seq, CreatedAt: s.now().Unix(), Filename: name,
		Purpose: purpose, Family: famTogether, Pending: true, Signed: true}
	s.files[f.ID] = f
	s.saveFile(f)
	s.mu.Unlock()
	loc := "http://" + r.Host + togetherUploadPath + f.ID + "?signature=" + s.signature(f.ID)
	w.Header().Set("Location", loc)
	w.Header().Set("X-Together-File-Id", f.ID)
	w.WriteHeader(http.StatusFound)
}

// togetherPut stores the bytes PUT to a signed upload URL (200, empty
// body, as object storage answers). Repeating the PUT replaces the bytes
// (batches made from the file keep the bytes they were made from).
func (s *Server) togetherPut(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !hmac.Equal([]byte(r.URL.Query().Get("signature")), []byte(s.signature(id))) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, "<Error><Code>SignatureDoesNotMatch</Code></Error>")
		return
	}
	s.mu.Lock()
	f := s.files[id]
	ok := f != nil && f.Family == famTogether && f.Signed
	s.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, "<Error><Code>NoSuchUpload</Code></Error>")
		return
	}
	tmp, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "put-*")
	if err != nil {
		w.WriteHeader(500)
		return
	}
	u := &received{tmp: tmp}
	defer u.discard()
	n, err := io.Copy(io.MultiWriter(tmp, &u.lc), io.LimitReader(r.Body, s.opts.MaxFileBytes+1))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if n > s.opts.MaxFileBytes {
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f = s.files[id]; f == nil {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	if err := s.storeUpload(u, f); err != nil {
		w.WriteHeader(500)
		return
	}
	// The JS SDK's helper goes on with GET /files/{id} and creates batches
	// from the file without calling preprocess: the bytes complete it.
	f.Pending, f.Processed = false, true
	s.saveFile(f)
	w.Header().Set("ETag", `"`+hexID(s.opts.Seed, "etag", id, int(f.Bytes), 16)+`"`)
	w.WriteHeader(http.StatusOK)
}

// togetherPreprocess is the Python SDKs' last step of a redirect upload:
// the file must have its bytes (the PUT already made it usable).
// Repeating it answers the file again.
func (s *Server) togetherPreprocess(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.togetherFile(w, r)
	if f == nil {
		return
	}
	if f.Pending && !fileExists(s.filePath(f.ID)) {
		oaiError(w, 400, "invalid_request_error", "File "+f.ID+" has no content: PUT it to the upload URL first", "", "")
		return
	}
	f.Pending, f.Processed = false, true
	s.saveFile(f)
	writeJSON(w, http.StatusOK, s.togetherFileJSON(f))
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (s *Server) togetherFile(w http.ResponseWriter, r *http.Request) *fileRec {
	id := r.PathValue("id")
	if f := s.files[id]; f != nil && f.Family == famTogether {
		return f
	}
	openaiFam.write(w, togetherFileNotFound(id))
	return nil
}

func (s *Server) togetherListFiles(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*fileRec
	for _, f := range s.files {
		if f.Family == famTogether {
			all = append(all, f)
		}
	}
	slices.SortFunc(all, func(a, b *fileRec) int { return int(b.Seq - a.Seq) })
	data := []any{}
	for _, f := range all {
		data = append(data, s.togetherFileJSON(f))
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (s *Server) togetherCreate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Endpoint         string `json:"endpoint"`
		InputFileID      string `json:"input_file_id"`
		CompletionWindow string `json:"completion_window"`
		Priority         *int   `json:"priority"`
		ModelID          string `json:"model_id"`
	}
	body, err := readLimited(r, 1<<20)
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	switch {
	case err != nil:
		togetherError(w, 400, "Invalid JSON body: "+err.Error())
		return
	case req.InputFileID == "":
		togetherError(w, 400, "input_file_id is required")
		return
	case req.Endpoint == "":
		togetherError(w, 400, "endpoint is required")
		return
	case !slices.Contains(togetherEndpoints, req.Endpoint):
		togetherError(w, 400, fmt.Sprintf("Invalid endpoint %q: supported endpoints are %s", req.Endpoint, strings.Join(togetherEndpoints, ", ")))
		return
	case req.CompletionWindow != "" && req.CompletionWindow != "24h":
		togetherError(w, 400, "Invalid completion_window: only 24h is supported")
		return
	}
	now := s.now()
	s.mu.Lock()
	s.tick(now)
	f := s.files[req.InputFileID]
	switch {
	case f == nil || f.Family != famTogether:
		s.mu.Unlock()
		togetherError(w, 400, "Input file "+req.InputFileID+" not found")
		return
	case !f.Processed:
		s.mu.Unlock()
		togetherError(w, 400, "Input file "+req.InputFileID+" has not been processed")
		return
	case f.Purpose != "batch-api":
		s.mu.Unlock()
		togetherError(w, 400, "Input file "+req.InputFileID+" has purpose "+f.Purpose+", not batch-api")
		return
	}
	seq := s.nextSeq()
	id := uuidFrom(s.opts.Seed, "tbatch", "", int(seq))
	err = linkOrCopy(s.filePath(f.ID), s.batchInput(id))
	s.mu.Unlock()
	if err != nil {
		togetherError(w, 500, err.Error())
		return
	}
	sc, err := s.scanBodyLines(s.batchInput(id), f.Bytes, bodyScan{maxBytes: s.opts.TogetherMaxBytes,
		maxRequests: s.opts.TogetherMaxRequests, maxCustomID: 64, jobModel: req.ModelID})
	if err != nil {
		os.Remove(s.batchInput(id))
		togetherError(w, 500, err.Error())
		return
	}
	b := &batchRec{ID: id, Family: famTogether, Seq: seq, Created: now, Endpoint: req.Endpoint, Model: sc.model,
		InputFileID: f.ID, CompletionWindow: "24h", JobKey: jobKeyFromFilename(f.Filename),
		N: sc.n, Tokens: sc.tokens, ScanErrors: sc.errs,
		FailInjected: s.fated("vfail", id, 0, s.opts.ValidationFailRate),
		ExpireFate:   s.fated("expire", id, 0, s.opts.ExpireRate),
		Status:       stValidating}
	if req.ModelID == "" {
		b.Model = sc.model
	} else {
		b.Model = req.ModelID
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addBatch(b)
	answer := map[string]any{"job": s.togetherJobJSON(b, now), "warning": ""}
	if s.forgets(b) {
		s.forget(b)
	}
	writeJSON(w, http.StatusCreated, answer)
}

// togetherJobJSON renders a BatchJob as of now (times RFC 3339).
func (s *Server) togetherJobJSON(b *batchRec, now time.Time) map[string]any {
	ts := func(t *time.Time) any {
		if t == nil {
			return nil
		}
		return t.UTC().Format(time.RFC3339)
	}
	var size int64
	if f := s.files[b.InputFileID]; f != nil {
		size = f.Bytes
	}
	errMsg := ""
	if len(b.Errors) > 0 {
		var msgs []string
		for _, e := range b.Errors {
			msgs = append(msgs, e.Message)
		}
		errMsg = strings.Join(msgs, "; ")
	}
	progress := float64(int(s.progressOf(b, now)*10000)) / 100
	return map[string]any{
		"id": b.ID, "user_id": "user-emulator", "input_file_id": b.InputFileID, "file_size_bytes": size,
		"status": togetherStatuses[b.Status], "job_deadline": b.Created.Add(b.window()).UTC().Format(time.RFC3339),
		"created_at": b.Created.UTC().Format(time.RFC3339), "endpoint": b.Endpoint, "progress": progress,
		"model_id": b.Model, "output_file_id": b.OutputFileID, "error_file_id": b.ErrorFileID,
		"error": errMsg, "completed_at": ts(b.endedAt()),
	}
}

func (s *Server) togetherGet(w http.ResponseWriter, r *http.Request) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tick(now)
	if b := s.lookupBatch(w, r.PathValue("id"), famTogether); b != nil {
		writeJSON(w, http.StatusOK, s.togetherJobJSON(b, now))
	}
}

// togetherCancel cancels a VALIDATING or IN_PROGRESS batch at once: the
// requests done so far stay in its output, the others are in no file.
func (s *Server) togetherCancel(w http.ResponseWriter, r *http.Request) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tick(now)
	b := s.lookupBatch(w, r.PathValue("id"), famTogether)
	if b == nil {
		return
	}
	if b.Status != stValidating && b.Status != stInProgress {
		togetherError(w, http.StatusBadRequest, fmt.Sprintf("Batch job %s is %s and cannot be cancelled", b.ID, togetherStatuses[b.Status]))
		return
	}
	if s.cancel(b, now) {
		s.apply(b, evCancelled, now)
	}
	writeJSON(w, http.StatusOK, s.togetherJobJSON(b, now))
}

func (s *Server) togetherList(w http.ResponseWriter, r *http.Request) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tick(now)
	data := []any{}
	for _, b := range s.sortedBatches(famTogether) {
		data = append(data, s.togetherJobJSON(b, now))
	}
	writeJSON(w, http.StatusOK, data)
}
