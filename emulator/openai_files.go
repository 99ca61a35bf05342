package emulator

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
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

// received is a multipart upload received into tmp/: the "file" part
// streamed to disk (never into memory) with its lines counted, and the
// other parts as small fields.
type received struct {
	tmp      *os.File
	filename string
	lc       lineCounter
	fields   map[string]string
}

// discard removes the upload's file unless it was stored.
func (u *received) discard() {
	if u != nil && u.tmp != nil {
		u.tmp.Close()
		os.Remove(u.tmp.Name())
	}
}

// readUpload receives a multipart/form-data body whose "file" part is at
// most maxBytes. A body without a file part is no error (u.tmp is nil).
func (s *Server) readUpload(r *http.Request, maxBytes int64) (*received, *apiError) {
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, errf(400, "Expected a multipart/form-data request body: "+err.Error())
	}
	u := &received{fields: map[string]string{}}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return u, nil
		}
		if err != nil {
			u.discard()
			return nil, errf(400, "Malformed multipart body: "+err.Error())
		}
		if part.FormName() != "file" {
			u.fields[part.FormName()] = smallField(part)
			continue
		}
		if u.tmp != nil {
			u.discard()
			return nil, &apiError{Status: 400, Msg: "Only one 'file' part is allowed.", Param: "file"}
		}
		if u.tmp, err = os.CreateTemp(filepath.Join(s.dir, "tmp"), "upload-*"); err != nil {
			return nil, errf(500, err.Error())
		}
		u.filename = part.FileName()
		n, err := io.Copy(io.MultiWriter(u.tmp, &u.lc), io.LimitReader(part, maxBytes+1))
		if err != nil {
			u.discard()
			return nil, &apiError{Status: 400, Msg: "Reading the uploaded file failed: " + err.Error(), Param: "file"}
		}
		if n > maxBytes {
			u.discard()
			return nil, &apiError{Status: http.StatusRequestEntityTooLarge,
				Msg: "File is too large: the maximum size is " + commas(maxBytes) + " bytes.", Param: "file", Code: "file_too_large"}
		}
	}
}

// storeUpload makes the received file the content of f (which it fills
// with the size and line count) and registers f. Caller holds s.mu.
func (s *Server) storeUpload(u *received, f *fileRec) error {
	if s.persist {
		if err := u.tmp.Sync(); err != nil {
			return err
		}
	}
	u.tmp.Close()
	if err := os.Rename(u.tmp.Name(), s.filePath(f.ID)); err != nil {
		os.Remove(u.tmp.Name())
		u.tmp = nil
		return err
	}
	u.tmp = nil
	f.Bytes, f.Lines = u.lc.size, u.lc.lines()
	s.files[f.ID] = f
	s.saveFile(f)
	s.bump(func(st *Stats) { st.FilesUploaded++ })
	s.saveState()
	return nil
}

// oaiUploadFile stores a multipart upload (CreateFileRequest).
func (s *Server) oaiUploadFile(w http.ResponseWriter, r *http.Request) error {
	u, uerr := s.readUpload(r, s.opts.MaxFileBytes)
	if uerr != nil {
		return uerr
	}
	defer u.discard()
	purpose, anchor, secs := u.fields["purpose"], u.fields["expires_after[anchor]"], u.fields["expires_after[seconds]"]
	switch {
	case u.tmp == nil:
		return oaiBad("Missing required parameter: 'file'.", "file", "missing_required_parameter")
	case purpose == "":
		return oaiBad("Missing required parameter: 'purpose'.", "purpose", "missing_required_parameter")
	case !slices.Contains(filePurposes, purpose):
		return oaiBad("Invalid value for 'purpose': '"+purpose+"'.", "purpose", "invalid_value")
	case purpose == "batch" && !strings.HasSuffix(strings.ToLower(u.filename), ".jsonl"):
		return oaiBad("Invalid file format for Batch API. Must be .jsonl", "file", "invalid_file_format")
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
			return oaiBad("Invalid 'expires_after': anchor must be 'created_at' and seconds between 3600 and 2592000.", "expires_after", "invalid_value")
		}
		e := now + n
		exp = &e
	}
	return s.newFile(w, u, func(seq int64) *fileRec {
		return &fileRec{ID: s.fileID(seq), Seq: seq, CreatedAt: now, ExpiresAt: exp, Filename: u.filename, Purpose: purpose}
	}, func(f *fileRec) any { return s.fileJSON(f) })
}

// newFile stores an upload as a new file (made by mk from its sequence
// number) and answers it (render).
func (s *Server) newFile(w http.ResponseWriter, u *received, mk func(seq int64) *fileRec, render func(*fileRec) any) error {
	return s.locked(func() error {
		f := mk(s.nextSeq())
		if err := s.storeUpload(u, f); err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, render(f))
		return nil
	})
}

func smallField(part io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(part, 4096))
	io.Copy(io.Discard, part)
	return strings.TrimSpace(string(b))
}

// fileAPI is how a family answers about its files: the file object, the
// 404 for an id it does not know (missingFile makes one from an error),
// and the answer to a delete.
type fileAPI struct {
	fam     string
	render  func(*fileRec) any
	missing func(w http.ResponseWriter, id string)
	deleted func(*fileRec) any
}

// missingFile is a fileAPI's missing: the error notFound makes, in the
// envelope of family f.
func missingFile(f *family, notFound func(id string) *apiError) func(w http.ResponseWriter, id string) {
	return func(w http.ResponseWriter, id string) { f.write(w, notFound(id)) }
}

// fileRoutes serves GET and DELETE p/files/{id} and GET
// p/files/{id}/content for a family; each family sees only its own files.
func (s *Server) fileRoutes(mux *http.ServeMux, p string, a fileAPI) {
	// withFile runs fn on the file named in the path, with s.mu held,
	// or answers missing.
	withFile := func(w http.ResponseWriter, r *http.Request, fn func(f *fileRec)) {
		id := r.PathValue("id")
		if s.locked(func() error {
			f := s.files[id]
			if f != nil && fileFamily(f) == a.fam && !s.expired(f) {
				fn(f)
				return nil
			}
			if f != nil && s.expired(f) {
				s.bump(func(st *Stats) { st.ResultsExpired++ })
			}
			return errNoFile
		}) != nil {
			a.missing(w, id)
		}
	}
	mux.HandleFunc("GET "+p+"/files/{id}", func(w http.ResponseWriter, r *http.Request) {
		withFile(w, r, func(f *fileRec) { writeJSON(w, http.StatusOK, a.render(f)) })
	})
	mux.HandleFunc("DELETE "+p+"/files/{id}", func(w http.ResponseWriter, r *http.Request) {
		withFile(w, r, func(f *fileRec) {
			s.deleteFile(f)
			writeJSON(w, http.StatusOK, a.deleted(f))
		})
	})
	mux.HandleFunc("GET "+p+"/files/{id}/content", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if err := s.serveContent(w, id, a.fam); errors.Is(err, errNoFile) {
			a.missing(w, id)
		} else if err != nil {
			familyByName(a.fam).fail(w, err)
		}
	})
}

// deleteFile removes a file and its content. Caller holds s.mu.
func (s *Server) deleteFile(f *fileRec) {
	delete(s.files, f.ID)
	os.Remove(filepath.Join(s.dir, "files", f.ID+".json"))
	os.Remove(s.filePath(f.ID))
}

// oaiFiles is the OpenAI family's fileAPI.
func (s *Server) oaiFiles() fileAPI {
	return fileAPI{fam: famOpenAI, render: func(f *fileRec) any { return s.fileJSON(f) },
		missing: missingFile(openaiFam, func(id string) *apiError {
			return &apiError{Status: http.StatusNotFound, Msg: "No such File object: " + id, Param: "id"}
		}),
		deleted: func(f *fileRec) any { return map[string]any{"id": f.ID, "object": "file", "deleted": true} }}
}

// errNoFile: serveContent found no such file of the family.
var errNoFile = errors.New("no such file")

// serveContent streams the content of file id of family fam as
// application/octet-stream (errNoFile when there is no such file). A lost
// result file is no file; a result download may be cut short
// (TruncateDownloadRate).
func (s *Server) serveContent(w http.ResponseWriter, id, fam string) error {
	var d content
	err := s.locked(func() error {
		f := s.files[id]
		if f != nil && s.expired(f) {
			s.bump(func(st *Stats) { st.ResultsExpired++ })
			f = nil
		}
		if f == nil || fileFamily(f) != fam || f.Lost || f.Pending {
			return errNoFile
		}
		if f.Result {
			s.bump(func(st *Stats) { st.noteDownload(f.BatchID) })
		}
		var err error
		d, err = s.openContent(f, (f.Purpose == "batch_output" || f.Result) && s.truncates(f.ID))
		return err
	})
	return s.serveOpened(w, d, err)
}

// content is a file opened under s.mu, answered after it is released.
type content struct {
	in   *os.File
	size int64
	cut  bool // the answer is cut short (TruncateDownloadRate)
}

// openContent opens the content of f. Caller holds s.mu.
func (s *Server) openContent(f *fileRec, cut bool) (content, error) {
	in, err := os.Open(s.filePath(f.ID))
	return content{in: in, size: f.Bytes, cut: cut}, err
}

// serveOpened answers d as application/octet-stream, unless err (the
// lookup's or openContent's) is to be answered instead.
func (s *Server) serveOpened(w http.ResponseWriter, d content, err error) error {
	if err != nil {
		return err
	}
	defer d.in.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	if d.cut && d.size > 0 {
		s.serveCut(w, d.size, d.in)
	}
	w.Header().Set("Content-Length", strconv.FormatInt(d.size, 10))
	w.WriteHeader(http.StatusOK)
	io.Copy(w, d.in)
	return nil
}

func (s *Server) oaiListFiles(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit, err := oaiLimit(q, 10000, 10000)
	if err != nil {
		return err
	}
	order := q.Get("order")
	if order == "" {
		order = "desc"
	}
	if order != "asc" && order != "desc" {
		return oaiBad("Invalid 'order': must be 'asc' or 'desc'.", "order", "invalid_value")
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
	return nil
}

// oaiLimit is an OpenAI list's limit parameter (def when absent), or the
// 400 OpenAI answers to one out of 1..maxv.
func oaiLimit(q url.Values, def, maxv int) (int, error) {
	limit, ok := queryLimit(q.Get("limit"), def, maxv)
	if !ok {
		return 0, oaiBad(fmt.Sprintf("Invalid 'limit': must be between 1 and %d.", maxv), "limit", "invalid_value")
	}
	return limit, nil
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
