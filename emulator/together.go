package emulator

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
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
	files, batches := openaiFam.h, togetherFam.h // the file endpoints answer errors in OpenAI's envelope
	mux.HandleFunc("POST "+p+"/files/upload", files(s.togetherUploadMultipart))
	mux.HandleFunc("POST "+p+"/files", files(s.togetherFiles))
	mux.HandleFunc("PUT "+togetherUploadPath+"{id}", s.togetherPut)
	mux.HandleFunc("POST "+p+"/files/{id}/preprocess", files(s.togetherPreprocess))
	mux.HandleFunc("GET "+p+"/files", s.togetherListFiles)
	s.fileRoutes(mux, p, fileAPI{fam: famTogether, render: func(f *fileRec) any { return s.togetherFileJSON(f) },
		missing: missingFile(openaiFam, togetherFileNotFound), deleted: func(f *fileRec) any { return map[string]any{"id": f.ID, "deleted": true} }})
	mux.HandleFunc("POST "+p+"/batches", batches(s.togetherCreate))
	mux.HandleFunc("GET "+p+"/batches", s.togetherList)
	mux.HandleFunc("GET "+p+"/batches/{id}", s.getBatch(togetherFam, "id", func(b *batchRec, _ *http.Request, now time.Time) any {
		return s.togetherJobJSON(b, now)
	}))
	mux.HandleFunc("POST "+p+"/batches/{id}/cancel", batches(s.togetherCancel))
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
func togetherCheckFields(purpose, name, ftype string) error {
	switch {
	case purpose == "":
		return oaiBad("purpose is required", "purpose", "")
	case purpose != "batch-api" && purpose != "fine-tune" && purpose != "eval":
		return oaiBad("Invalid purpose '"+purpose+"'", "purpose", "")
	case name == "":
		return oaiBad("file_name is required", "file_name", "")
	case ftype != "" && ftype != "jsonl":
		return oaiBad("file_type '"+ftype+"' is not served by the emulator (jsonl only)", "file_type", "")
	}
	return nil
}

// togetherUploadMultipart is the Go SDK's POST /files/upload.
func (s *Server) togetherUploadMultipart(w http.ResponseWriter, r *http.Request) error {
	return s.togetherMultipart(w, r, true)
}

// togetherFiles is POST /files: multipart with a file part (the docs'
// curl), or the first step of the redirect flow (a form without the file,
// urlencoded or multipart).
func (s *Server) togetherFiles(w http.ResponseWriter, r *http.Request) error {
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct == "multipart/form-data" {
		return s.togetherMultipart(w, r, false)
	}
	if err := r.ParseForm(); err != nil {
		return errf(400, "Malformed form body: "+err.Error())
	}
	return s.togetherAnnounce(w, r, r.PostForm.Get("purpose"), r.PostForm.Get("file_name"), r.PostForm.Get("file_type"))
}

func (s *Server) togetherMultipart(w http.ResponseWriter, r *http.Request, needFile bool) error {
	u, uerr := s.readUpload(r, s.opts.MaxFileBytes)
	if uerr != nil {
		return uerr
	}
	defer u.discard()
	name := u.fields["file_name"]
	if name == "" {
		name = u.filename
	}
	if u.tmp == nil && !needFile {
		return s.togetherAnnounce(w, r, u.fields["purpose"], name, u.fields["file_type"])
	}
	if u.tmp == nil {
		return oaiBad("file is required", "file", "")
	}
	if err := togetherCheckFields(u.fields["purpose"], name, u.fields["file_type"]); err != nil {
		return err
	}
	return s.newFile(w, u, func(seq int64) *fileRec {
		return &fileRec{ID: s.togetherFileID(seq), Seq: seq, CreatedAt: s.now().Unix(), Filename: name,
			Purpose: u.fields["purpose"], Family: famTogether, Processed: true}
	}, func(f *fileRec) any { return s.togetherFileJSON(f) })
}

// togetherAnnounce answers the first step of the redirect flow: a pending
// file, 302 to its signed upload URL, and its id in X-Together-File-Id.
func (s *Server) togetherAnnounce(w http.ResponseWriter, r *http.Request, purpose, name, ftype string) error {
	if err := togetherCheckFields(purpose, name, ftype); err != nil {
		return err
	}
	var f *fileRec
	s.locked(func() error {
		seq := s.nextSeq()
		f = &fileRec{ID: s.togetherFileID(seq), Seq: seq, CreatedAt: s.now().Unix(), Filename: name,
			Purpose: purpose, Family: famTogether, Pending: true, Signed: true}
		s.files[f.ID] = f
		s.saveFile(f)
		return nil
	})
	loc := "http://" + r.Host + togetherUploadPath + f.ID + "?signature=" + s.signature(f.ID)
	w.Header().Set("Location", loc)
	w.Header().Set("X-Together-File-Id", f.ID)
	w.WriteHeader(http.StatusFound)
	return nil
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
	var f *fileRec
	if s.locked(func() error {
		f = s.files[id]
		if f != nil && f.Family == famTogether && f.Signed {
			return nil
		}
		return errNoFile
	}) != nil {
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
func (s *Server) togetherPreprocess(w http.ResponseWriter, r *http.Request) error {
	return s.locked(func() error {
		id := r.PathValue("id")
		f := s.files[id]
		switch {
		case f == nil || f.Family != famTogether:
			return togetherFileNotFound(id)
		case f.Pending && !fileExists(s.filePath(f.ID)):
			return errf(400, "File "+f.ID+" has no content: PUT it to the upload URL first")
		}
		f.Pending, f.Processed = false, true
		s.saveFile(f)
		writeJSON(w, http.StatusOK, s.togetherFileJSON(f))
		return nil
	})
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (s *Server) togetherListFiles(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data := []any{}
	for _, f := range s.familyFiles(famTogether, nil) {
		data = append(data, s.togetherFileJSON(f))
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// togetherCreateReq is the body of POST /batches.
type togetherCreateReq struct {
	Endpoint         string `json:"endpoint"`
	InputFileID      string `json:"input_file_id"`
	CompletionWindow string `json:"completion_window"`
	Priority         *int   `json:"priority"`
	ModelID          string `json:"model_id"`
}

func (req *togetherCreateReq) check() error {
	switch {
	case req.InputFileID == "":
		return errf(400, "input_file_id is required")
	case req.Endpoint == "":
		return errf(400, "endpoint is required")
	case !slices.Contains(togetherEndpoints, req.Endpoint):
		return errf(400, "Invalid endpoint %q: supported endpoints are %s", req.Endpoint, strings.Join(togetherEndpoints, ", "))
	case req.CompletionWindow != "" && req.CompletionWindow != "24h":
		return errf(400, "Invalid completion_window: only 24h is supported")
	}
	return nil
}

func (s *Server) togetherCreate(w http.ResponseWriter, r *http.Request) error {
	req, err := decodeChecked[togetherCreateReq](r, 1<<20, togetherFam)
	if err != nil {
		return err
	}
	sp, err := s.spoolFile(req.InputFileID, func(f *fileRec) error {
		switch {
		case f == nil || f.Family != famTogether:
			return errf(400, "Input file "+req.InputFileID+" not found")
		case !f.Processed:
			return errf(400, "Input file "+req.InputFileID+" has not been processed")
		case f.Purpose != "batch-api":
			return errf(400, "Input file "+req.InputFileID+" has purpose "+f.Purpose+", not batch-api")
		}
		return nil
	}, func(seq int64) string { return uuidFrom(s.opts.Seed, "tbatch", "", int(seq)) })
	if err != nil {
		return err
	}
	id, f, now := sp.id, sp.f, sp.now
	sc, err := s.scanBodyLines(s.batchInput(id), f.Bytes, bodyScan{maxBytes: s.opts.TogetherMaxBytes,
		maxRequests: s.opts.TogetherMaxRequests, maxCustomID: 64, jobModel: req.ModelID})
	if err != nil {
		os.Remove(s.batchInput(id))
		return err
	}
	b := &batchRec{ID: id, Family: famTogether, Seq: sp.seq, Created: now, Endpoint: req.Endpoint, Model: sc.model,
		InputFileID: f.ID, CompletionWindow: "24h", JobKey: jobKeyFromFilename(f.Filename),
		N: sc.n, Tokens: sc.tokens, ScanErrors: sc.errs,
		FailInjected: s.fated("vfail", id, 0, s.opts.ValidationFailRate),
		ExpireFate:   s.fated("expire", id, 0, s.opts.ExpireRate),
		Status:       stValidating}
	if req.ModelID != "" {
		b.Model = req.ModelID
	}
	return s.locked(func() error {
		s.register(w, b, http.StatusCreated, func() any {
			return map[string]any{"job": s.togetherJobJSON(b, now), "warning": ""}
		})
		return nil
	})
}

// togetherJobJSON renders a BatchJob as of now (times RFC 3339).
func (s *Server) togetherJobJSON(b *batchRec, now time.Time) map[string]any {
	ts := func(t *time.Time) any {
		return optTime(t, func(t time.Time) any { return t.UTC().Format(time.RFC3339) })
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

// togetherCancel cancels a VALIDATING or IN_PROGRESS batch at once: the
// requests done so far stay in its output, the others are in no file.
func (s *Server) togetherCancel(w http.ResponseWriter, r *http.Request) error {
	return s.withBatch(togetherFam, r.PathValue("id"), func(b *batchRec, now time.Time) error {
		if b.Status != stValidating && b.Status != stInProgress {
			return errf(http.StatusBadRequest, "Batch job %s is %s and cannot be cancelled", b.ID, togetherStatuses[b.Status])
		}
		if s.cancel(b, now) {
			s.apply(b, evCancelled, now)
		}
		writeJSON(w, http.StatusOK, s.togetherJobJSON(b, now))
		return nil
	})
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
