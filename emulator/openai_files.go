package emulator

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

var filePurposes = []string{"assistants", "batch", "fine-tune", "vision", "user_data", "evals"}

func (s *Server) fileJSON(f *fileRec) map[string]any {
	var exp any
	if f.ExpiresAt != nil {
		exp = *f.ExpiresAt
	}
	return map[string]any{"id": f.ID, "object": "file", "bytes": f.Bytes, "created_at": f.CreatedAt,
		"expires_at": exp, "filename": f.Filename, "purpose": f.Purpose, "status": "processed",
		"status_details": nil}
}

// lineCounter counts newline-terminated and trailing lines.
type lineCounter struct {
	n    int64
	last byte
	size int64
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.n += int64(bytes.Count(p, []byte{'\n'}))
	if len(p) > 0 {
		c.last = p[len(p)-1]
	}
	c.size += int64(len(p))
	return len(p), nil
}

func (c *lineCounter) lines() int64 {
	if c.size > 0 && c.last != '\n' {
		return c.n + 1
	}
	return c.n
}

var errTooLarge = errors.New("too large")

// oaiUploadFile streams the multipart "file" part to disk (never into
// memory), counting lines on the way.
func (s *Server) oaiUploadFile(w http.ResponseWriter, r *http.Request) {
	mr, err := r.MultipartReader()
	if err != nil {
		oaiError(w, 400, "invalid_request_error", "Expected a multipart/form-data request body: "+err.Error(), "", "")
		return
	}
	var tmp *os.File
	defer func() {
		if tmp != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	var filename, purpose, anchor, secs string
	var lc lineCounter
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			oaiError(w, 400, "invalid_request_error", "Malformed multipart body: "+err.Error(), "", "")
			return
		}
		switch part.FormName() {
		case "file":
			if tmp != nil {
				oaiError(w, 400, "invalid_request_error", "Only one 'file' part is allowed.", "file", "")
				return
			}
			if tmp, err = os.CreateTemp(filepath.Join(s.dir, "tmp"), "upload-*"); err != nil {
				oaiError(w, 500, "server_error", err.Error(), "", "")
				return
			}
			filename = part.FileName()
			n, err := io.Copy(io.MultiWriter(tmp, &lc), io.LimitReader(part, s.opts.MaxFileBytes+1))
			if err != nil {
				oaiError(w, 400, "invalid_request_error", "Reading the uploaded file failed: "+err.Error(), "file", "")
				return
			}
			if n > s.opts.MaxFileBytes {
				oaiError(w, http.StatusRequestEntityTooLarge, "invalid_request_error",
					"File is too large: the maximum size is "+commas(s.opts.MaxFileBytes)+" bytes.", "file", "file_too_large")
				return
			}
		case "purpose":
			purpose = smallField(part)
		case "expires_after[anchor]":
			anchor = smallField(part)
		case "expires_after[seconds]":
			secs = smallField(part)
		default:
			io.Copy(io.Discard, part)
		}
	}
	switch {
	case tmp == nil:
		oaiError(w, 400, "invalid_request_error", "Missing required parameter: 'file'.", "file", "missing_required_parameter")
		return
	case purpose == "":
		oaiError(w, 400, "invalid_request_error", "Missing required parameter: 'purpose'.", "purpose", "missing_required_parameter")
		return
	case !slices.Contains(filePurposes, purpose):
		oaiError(w, 400, "invalid_request_error", "Invalid value for 'purpose': '"+purpose+"'.", "purpose", "invalid_value")
		return
	case purpose == "batch" && !strings.HasSuffix(strings.ToLower(filename), ".jsonl"):
		oaiError(w, 400, "invalid_request_error", "Invalid file format for Batch API. Must be .jsonl", "file", "invalid_file_format")
		return
	}
	now := s.now().Unix()
	var exp *int64
	if purpose == "batch" {
		e := now + 30*24*3600
		exp = &e
	}
	if secs != "" || anchor != "" {
		n, err := strconv.ParseInt(secs, 10, 64)
		if err != nil || n < 3600 || n > 2592000 || anchor != "created_at" {
			oaiError(w, 400, "invalid_request_error",
				"Invalid 'expires_after': anchor must be 'created_at' and seconds between 3600 and 2592000.", "expires_after", "invalid_value")
			return
		}
		e := now + n
		exp = &e
	}
	if s.persist {
		if err := tmp.Sync(); err != nil {
			oaiError(w, 500, "server_error", err.Error(), "", "")
			return
		}
	}
	tmp.Close()

	s.mu.Lock()
	defer s.mu.Unlock()
	seq := s.nextSeq()
	f := &fileRec{ID: s.fileID(seq), Seq: seq, Bytes: lc.size, Lines: lc.lines(), CreatedAt: now,
		ExpiresAt: exp, Filename: filename, Purpose: purpose}
	if err := os.Rename(tmp.Name(), s.filePath(f.ID)); err != nil {
		oaiError(w, 500, "server_error", err.Error(), "", "")
		return
	}
	tmp = nil
	s.files[f.ID] = f
	s.saveFile(f)
	s.bump(func(st *Stats) { st.FilesUploaded++ })
	s.saveState()
	writeJSON(w, http.StatusOK, s.fileJSON(f))
}

func smallField(part io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(part, 4096))
	io.Copy(io.Discard, part)
	return strings.TrimSpace(string(b))
}

func (s *Server) lookupFile(w http.ResponseWriter, r *http.Request) *fileRec {
	id := r.PathValue("id")
	f := s.files[id]
	if f != nil && f.Family != "" {
		f = nil // another family's file
	}
	if f == nil {
		oaiError(w, http.StatusNotFound, "invalid_request_error", "No such File object: "+id, "id", "")
	}
	return f
}

func (s *Server) oaiGetFile(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.lookupFile(w, r); f != nil {
		writeJSON(w, http.StatusOK, s.fileJSON(f))
	}
}

func (s *Server) oaiFileContent(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	f := s.lookupFile(w, r)
	var in *os.File
	var err error
	var cut bool
	switch {
	case f != nil && f.Lost:
		s.mu.Unlock()
		oaiError(w, http.StatusNotFound, "invalid_request_error", "No such File object: "+f.ID, "id", "")
		return
	case f != nil:
		in, err = os.Open(s.filePath(f.ID))
		cut = f.Purpose == "batch_output" && s.truncates(f.ID)
	}
	s.mu.Unlock()
	if f == nil {
		return
	}
	if err != nil {
		oaiError(w, http.StatusInternalServerError, "server_error", err.Error(), "", "")
		return
	}
	defer in.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	if cut && f.Bytes > 0 {
		s.serveCut(w, f.Bytes, in)
	}
	w.Header().Set("Content-Length", strconv.FormatInt(f.Bytes, 10))
	w.WriteHeader(http.StatusOK)
	io.Copy(w, in)
}

func (s *Server) oaiDeleteFile(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.lookupFile(w, r)
	if f == nil {
		return
	}
	delete(s.files, f.ID)
	os.Remove(filepath.Join(s.dir, "files", f.ID+".json"))
	os.Remove(s.filePath(f.ID))
	writeJSON(w, http.StatusOK, map[string]any{"id": f.ID, "object": "file", "deleted": true})
}

func (s *Server) oaiListFiles(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, ok := queryLimit(q.Get("limit"), 10000, 10000)
	if !ok {
		oaiError(w, 400, "invalid_request_error", "Invalid 'limit': must be between 1 and 10000.", "limit", "invalid_value")
		return
	}
	order := q.Get("order")
	if order == "" {
		order = "desc"
	}
	if order != "asc" && order != "desc" {
		oaiError(w, 400, "invalid_request_error", "Invalid 'order': must be 'asc' or 'desc'.", "order", "invalid_value")
		return
	}
	purpose := q.Get("purpose")
	s.mu.Lock()
	defer s.mu.Unlock()
	all := make([]*fileRec, 0, len(s.files))
	for _, f := range s.files {
		if f.Family == "" && (purpose == "" || f.Purpose == purpose) {
			all = append(all, f)
		}
	}
	slices.SortFunc(all, func(a, b *fileRec) int {
		if order == "asc" {
			return int(a.Seq - b.Seq)
		}
		return int(b.Seq - a.Seq)
	})
	page, more := paginateAfter(all, q.Get("after"), limit, func(f *fileRec) string { return f.ID })
	data := make([]any, len(page))
	for i, f := range page {
		data[i] = s.fileJSON(f)
	}
	writeJSON(w, http.StatusOK, listJSON(data, page, more, func(f *fileRec) string { return f.ID }))
}

func queryLimit(v string, def, maxv int) (int, bool) {
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxv {
		return 0, false
	}
	return n, true
}

// paginateAfter returns at most limit items following the one whose id is
// after (from the start when after is ""; none when after is unknown).
func paginateAfter[T any](all []T, after string, limit int, id func(T) string) ([]T, bool) {
	if after != "" {
		i := slices.IndexFunc(all, func(x T) bool { return id(x) == after })
		all = all[i+1:]
		if i < 0 {
			all = nil
		}
	}
	if len(all) > limit {
		return all[:limit], true
	}
	return all, false
}

// listJSON is the OpenAI list envelope {object,data,first_id,last_id,has_more}.
func listJSON[T any](data []any, page []T, more bool, id func(T) string) map[string]any {
	var first, last any
	if len(page) > 0 {
		first, last = id(page[0]), id(page[len(page)-1])
	}
	return map[string]any{"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": more}
}
