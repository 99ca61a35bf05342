package emulator

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-batch/sluice/internal/atomicfile"
)

// The Gemini Developer API family (Batch Mode + Files API), served under
// /gemini so its paths do not collide with OpenAI's: the SDK base URL is
// http://HOST:PORT/gemini and every route exists under both API versions,
// v1beta (the docs, go-genai, python) and v1 (@google/genai 3.x).

const famGemini = "gemini"

// geminiPrefix is the path of the Gemini family's base URL.
const geminiPrefix = "/gemini"

var geminiVersions = []string{"v1beta", "v1"}

// geminiExpiry is how long a Gemini batch may stay pending or running
// before it expires, and how long an uploaded file lives.
const geminiExpiry = 48 * time.Hour

func (s *Server) geminiRoutes(mux *http.ServeMux) {
	for _, v := range geminiVersions {
		p := geminiPrefix + "/" + v
		mux.HandleFunc("POST "+geminiPrefix+"/upload/"+v+"/files", s.gemUpload)
		mux.HandleFunc("GET "+p+"/files", s.gemListFiles)
		mux.HandleFunc("GET "+p+"/files/{name}", s.gemGetFile)
		mux.HandleFunc("DELETE "+p+"/files/{name}", s.gemDeleteFile)
		mux.HandleFunc("GET "+geminiPrefix+"/download/"+v+"/files/{name}", s.gemDownload)
		mux.HandleFunc("POST "+p+"/models/{name}", s.gemModelCall)
		mux.HandleFunc("POST "+p+"/tunedModels/{name}", s.gemModelCall)
		mux.HandleFunc("GET "+p+"/batches", s.gemListBatches)
		mux.HandleFunc("GET "+p+"/batches/{name}", s.gemGetBatch)
		mux.HandleFunc("POST "+p+"/batches/{name}", s.gemBatchAction)
		mux.HandleFunc("DELETE "+p+"/batches/{name}", s.gemDeleteBatch)
	}
}

// gemVersion is the API version of a request path (/gemini/v1/… or
// /gemini/upload/v1beta/…).
func gemVersion(path string) string {
	for _, seg := range strings.Split(path, "/") {
		if slices.Contains(geminiVersions, seg) {
			return seg
		}
	}
	return "v1beta"
}

// gemID is n characters of [a-z0-9] derived from (seed, tag, i): Gemini's
// file ids (12) and batch ids (36) look like that.
func gemID(seed int64, tag string, i, n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	out := make([]byte, n)
	x := h64(seed, tag, "", i)
	for k := range out {
		if k%10 == 9 {
			x = splitmix(x + uint64(k))
		}
		out[k] = alphabet[x%36]
		x /= 36
	}
	if out[0] >= '0' && out[0] <= '9' {
		out[0] = 'a' + out[0] - '0'
	}
	return string(out)
}

func gemTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ---- Files API: resumable upload ----

// gemUploadRec is one resumable upload session; its bytes so far are in
// uploads/<id>.data.
type gemUploadRec struct {
	ID          string    `json:"id"`
	Version     string    `json:"version"`
	Name        string    `json:"name,omitempty"` // files/<id> asked for at start
	DisplayName string    `json:"display_name,omitempty"`
	MimeType    string    `json:"mime_type,omitempty"`
	Declared    int64     `json:"declared"` // X-Goog-Upload-Header-Content-Length, -1 unknown
	Received    int64     `json:"received"`
	Created     time.Time `json:"created"`
	FileID      string    `json:"file_id,omitempty"` // set once finalized
	Cancelled   bool      `json:"cancelled,omitempty"`
}

func (s *Server) uploadPath(id, ext string) string { return filepath.Join(s.dir, "uploads", id+ext) }

func (s *Server) saveUpload(u *gemUploadRec) {
	if !s.persist {
		return
	}
	if err := writeJSONAtomic(s.uploadPath(u.ID, ".json"), u); err != nil {
		s.logf("emulator: saving upload %s: %v", u.ID, err)
	}
}

// uploadLock serialises the calls of one upload session (a query waits for
// a chunk still being received on a broken connection).
func (s *Server) uploadLock(id string) *sync.Mutex {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.upLocks[id]
	if l == nil {
		l = &sync.Mutex{}
		s.upLocks[id] = l
	}
	return l
}

var gemFileIDRe = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$`)

// gemUpload serves POST /upload/{v}/files: with upload_id it is a command
// on a session (upload, finalize, query, cancel), without it a start.
func (s *Server) gemUpload(w http.ResponseWriter, r *http.Request) {
	if id := r.URL.Query().Get("upload_id"); id != "" {
		s.gemUploadCommand(w, r, id)
		return
	}
	proto := strings.ToLower(r.Header.Get("X-Goog-Upload-Protocol"))
	cmd := strings.ToLower(strings.TrimSpace(r.Header.Get("X-Goog-Upload-Command")))
	if proto != "resumable" || cmd != "start" {
		gemError(w, http.StatusBadRequest, "The emulator serves the resumable upload protocol only: send X-Goog-Upload-Protocol: resumable and X-Goog-Upload-Command: start.")
		return
	}
	declared := int64(-1)
	if v := r.Header.Get("X-Goog-Upload-Header-Content-Length"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			gemError(w, http.StatusBadRequest, "Invalid X-Goog-Upload-Header-Content-Length: "+v)
			return
		}
		declared = n
	}
	if declared > s.opts.GeminiMaxFileBytes {
		gemError(w, http.StatusBadRequest, fmt.Sprintf("File size %d bytes exceeds the maximum of %d bytes.", declared, s.opts.GeminiMaxFileBytes))
		return
	}
	body, err := readLimited(r, 1<<20)
	if err != nil {
		gemError(w, http.StatusBadRequest, err.Error())
		return
	}
	var req struct {
		File *struct {
			Name             string `json:"name"`
			DisplayName      string `json:"displayName"`
			DisplayNameSnake string `json:"display_name"`
			MimeType         string `json:"mimeType"`
			MimeTypeSnake    string `json:"mime_type"`
		} `json:"file"`
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			gemError(w, http.StatusBadRequest, "Invalid JSON payload received. "+err.Error())
			return
		}
	}
	u := &gemUploadRec{Version: gemVersion(r.URL.Path), Declared: declared, Created: s.now(),
		MimeType: r.Header.Get("X-Goog-Upload-Header-Content-Type")}
	if f := req.File; f != nil {
		u.DisplayName = cmp(f.DisplayName, f.DisplayNameSnake)
		if u.MimeType == "" {
			u.MimeType = cmp(f.MimeType, f.MimeTypeSnake)
		}
		if f.Name != "" {
			id := strings.TrimPrefix(f.Name, "files/")
			if !gemFileIDRe.MatchString(id) {
				gemError(w, http.StatusBadRequest, "Invalid file name "+f.Name+": ids are up to 40 characters of [a-z0-9-], not starting or ending with '-'.")
				return
			}
			u.Name = "files/" + id
		}
	}
	s.mu.Lock()
	if u.Name != "" && s.files[strings.TrimPrefix(u.Name, "files/")] != nil {
		s.mu.Unlock()
		gemError(w, http.StatusConflict, "File "+u.Name+" already exists.")
		return
	}
	seq := s.nextSeq()
	u.ID = "ABgVH" + b58ID(s.opts.Seed, "gemupload", "", int(seq), 40)
	s.uploads[u.ID] = u
	if err := os.WriteFile(s.uploadPath(u.ID, ".data"), nil, 0o644); err != nil {
		delete(s.uploads, u.ID)
		s.mu.Unlock()
		gemError(w, http.StatusInternalServerError, err.Error())
		return
	}
	s.saveUpload(u)
	s.saveState()
	s.mu.Unlock()
	w.Header().Set("X-Goog-Upload-URL", baseURL(r)+geminiPrefix+"/upload/"+u.Version+"/files?upload_id="+u.ID+"&upload_protocol=resumable")
	w.Header().Set("X-Goog-Upload-Status", "active")
	w.Header().Set("X-Goog-Upload-Chunk-Granularity", strconv.FormatInt(s.opts.GeminiUploadGranularity, 10))
	writeJSON(w, http.StatusOK, map[string]any{})
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// gemUploadCommand runs X-Goog-Upload-Command on an upload session.
func (s *Server) gemUploadCommand(w http.ResponseWriter, r *http.Request, id string) {
	lock := s.uploadLock(id)
	lock.Lock()
	defer lock.Unlock()
	s.mu.Lock()
	u := s.uploads[id]
	s.mu.Unlock()
	if u == nil {
		gemError(w, http.StatusNotFound, "Upload session "+id+" not found (it expired, was cancelled, or never existed).")
		return
	}
	var cmds []string
	for _, c := range strings.Split(strings.ToLower(r.Header.Get("X-Goog-Upload-Command")), ",") {
		if c = strings.TrimSpace(c); c != "" {
			cmds = append(cmds, c)
		}
	}
	status := func(st string) {
		w.Header().Set("X-Goog-Upload-Status", st)
		w.Header().Set("X-Goog-Upload-Size-Received", strconv.FormatInt(u.Received, 10))
	}
	final := func() {
		s.mu.Lock()
		f := s.files[u.FileID]
		s.mu.Unlock()
		status("final")
		if f == nil {
			writeJSON(w, http.StatusOK, map[string]any{})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"file": s.gemFileJSON(f, r, u.Version)})
	}
	switch {
	case len(cmds) == 0:
		gemError(w, http.StatusBadRequest, "Missing X-Goog-Upload-Command.")
		return
	case u.Cancelled:
		status("cancelled")
		gemError(w, http.StatusBadRequest, "Upload session "+id+" was cancelled.")
		return
	case u.FileID != "":
		io.Copy(io.Discard, r.Body)
		final()
		return
	}
	var upload, finalize bool
	for _, c := range cmds {
		switch c {
		case "query":
			status("active")
			w.WriteHeader(http.StatusOK)
			return
		case "cancel":
			u.Cancelled = true
			s.saveUpload(u)
			os.Remove(s.uploadPath(id, ".data"))
			status("cancelled")
			w.WriteHeader(http.StatusOK)
			return
		case "upload":
			upload = true
		case "finalize":
			finalize = true
		default:
			status("active")
			gemError(w, http.StatusBadRequest, "Unknown X-Goog-Upload-Command "+c+".")
			return
		}
	}
	if upload {
		off, err := strconv.ParseInt(r.Header.Get("X-Goog-Upload-Offset"), 10, 64)
		if err != nil {
			status("active")
			gemError(w, http.StatusBadRequest, "Missing or invalid X-Goog-Upload-Offset.")
			return
		}
		if off != u.Received {
			io.Copy(io.Discard, r.Body)
			status("active")
			gemError(w, http.StatusBadRequest, fmt.Sprintf("X-Goog-Upload-Offset %d does not match the %d bytes received so far; query the session and resume from there.", off, u.Received))
			return
		}
		n, err := s.gemReceive(u, r.Body, finalize)
		if err != nil {
			status("active")
			var te *tooLargeErr
			switch {
			case errors.As(err, &te):
				gemError(w, http.StatusRequestEntityTooLarge, te.Error())
			case errors.Is(err, errGranularity):
				gemError(w, http.StatusBadRequest, fmt.Sprintf("Upload chunks other than the last must be a multiple of %d bytes.", s.opts.GeminiUploadGranularity))
			default:
				gemError(w, http.StatusBadRequest, "Reading the upload chunk failed after "+strconv.FormatInt(n, 10)+" bytes: "+err.Error())
			}
			return
		}
	}
	if !finalize {
		status("active")
		w.WriteHeader(http.StatusOK)
		return
	}
	if u.Declared >= 0 && u.Received != u.Declared {
		status("active")
		gemError(w, http.StatusBadRequest, fmt.Sprintf("Finalized with %d bytes received, but X-Goog-Upload-Header-Content-Length announced %d.", u.Received, u.Declared))
		return
	}
	if err := s.gemFinalize(u); err != nil {
		status("active")
		gemError(w, http.StatusInternalServerError, err.Error())
		return
	}
	final()
}

type tooLargeErr struct{ max int64 }

func (e *tooLargeErr) Error() string {
	return fmt.Sprintf("File exceeds the maximum size of %d bytes.", e.max)
}

var errGranularity = errors.New("chunk is not a multiple of the granularity")

// gemReceive appends a chunk to the session's data. A chunk cut short (a
// broken connection) keeps what arrived rounded down to the granularity,
// as a resumable upload server does: the client queries and resumes from
// there. Caller holds the session lock.
func (s *Server) gemReceive(u *gemUploadRec, body io.Reader, last bool) (int64, error) {
	f, err := os.OpenFile(s.uploadPath(u.ID, ".data"), os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if _, err := f.Seek(u.Received, io.SeekStart); err != nil {
		return 0, err
	}
	room := s.opts.GeminiMaxFileBytes - u.Received
	n, rerr := io.Copy(f, io.LimitReader(body, room+1))
	keep := n
	gran := s.opts.GeminiUploadGranularity
	switch {
	case n > room:
		keep, rerr = 0, &tooLargeErr{s.opts.GeminiMaxFileBytes}
	case rerr != nil:
		keep = n / gran * gran
	case !last && n%gran != 0:
		keep, rerr = 0, errGranularity
	}
	if err := f.Truncate(u.Received + keep); err != nil && rerr == nil {
		rerr = err
	}
	if s.persist {
		f.Sync()
	}
	u.Received += keep
	s.mu.Lock()
	s.saveUpload(u)
	s.mu.Unlock()
	return n, rerr
}

// gemFinalize turns a complete session into an ACTIVE file.
func (s *Server) gemFinalize(u *gemUploadRec) error {
	data := s.uploadPath(u.ID, ".data")
	sum, err := fileSHA256(data)
	if err != nil {
		return err
	}
	lc := &lineCounter{}
	if in, err := os.Open(data); err == nil {
		io.Copy(lc, in)
		in.Close()
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := s.nextSeq()
	id := strings.TrimPrefix(u.Name, "files/")
	if id == "" {
		id = gemID(s.opts.Seed, "gemfile", int(seq), 12)
	}
	if s.files[id] != nil {
		return fmt.Errorf("file files/%s already exists", id)
	}
	exp := now.Add(geminiExpiry).Unix()
	f := &fileRec{ID: id, Seq: seq, Bytes: u.Received, Lines: lc.lines(), CreatedAt: now.Unix(), ExpiresAt: &exp,
		Filename: u.DisplayName, Purpose: "gemini", Family: famGemini, MimeType: u.MimeType,
		SHA256: sum, Source: "UPLOADED", Created: now}
	if err := os.Rename(data, s.filePath(id)); err != nil {
		return err
	}
	u.FileID = id
	s.saveUpload(u)
	s.files[id] = f
	s.saveFile(f)
	s.bump(func(st *Stats) { st.FilesUploaded++ })
	s.saveState()
	return nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(h.Sum(nil)), nil
}

// ---- Files API: objects ----

func (s *Server) gemFileJSON(f *fileRec, r *http.Request, version string) map[string]any {
	created := f.Created
	if created.IsZero() {
		created = time.Unix(f.CreatedAt, 0)
	}
	m := map[string]any{"name": "files/" + f.ID, "mimeType": f.MimeType, "sizeBytes": strconv.FormatInt(f.Bytes, 10),
		"createTime": gemTime(created), "updateTime": gemTime(created),
		"sha256Hash": f.SHA256, "uri": baseURL(r) + geminiPrefix + "/" + version + "/files/" + f.ID,
		"state": "ACTIVE", "source": f.Source}
	if f.Filename != "" {
		m["displayName"] = f.Filename
	}
	if f.ExpiresAt != nil {
		m["expirationTime"] = gemTime(time.Unix(*f.ExpiresAt, 0))
	}
	if f.Source == "GENERATED" {
		m["downloadUri"] = baseURL(r) + geminiPrefix + "/download/" + version + "/files/" + f.ID + ":download?alt=media"
	}
	return m
}

// gemLookupFile finds a Gemini file by id, writing NOT_FOUND if absent.
// Caller holds s.mu.
func (s *Server) gemLookupFile(w http.ResponseWriter, id string) *fileRec {
	if f := s.files[id]; f != nil && f.Family == famGemini {
		return f
	}
	gemErrorStatus(w, http.StatusForbidden, "PERMISSION_DENIED",
		"You do not have permission to access the File "+id+" or it may not exist.")
	return nil
}

func (s *Server) gemGetFile(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if id, ok := strings.CutSuffix(name, ":download"); ok {
		s.gemServeFile(w, r, id)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.gemLookupFile(w, name); f != nil {
		writeJSON(w, http.StatusOK, s.gemFileJSON(f, r, gemVersion(r.URL.Path)))
	}
}

// gemDownload serves GET /download/{v}/files/{id}:download?alt=media, the
// path of the docs' curl; the SDKs call /{v}/files/{id}:download.
func (s *Server) gemDownload(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutSuffix(r.PathValue("name"), ":download")
	if !ok {
		gemError(w, http.StatusNotFound, "Unknown download path "+r.URL.Path+".")
		return
	}
	s.gemServeFile(w, r, id)
}

func (s *Server) gemServeFile(w http.ResponseWriter, r *http.Request, id string) {
	if r.URL.Query().Get("alt") != "media" {
		gemError(w, http.StatusBadRequest, "Downloads need alt=media.")
		return
	}
	s.mu.Lock()
	f := s.gemLookupFile(w, id)
	if f == nil {
		s.mu.Unlock()
		return
	}
	if f.Lost {
		s.mu.Unlock()
		gemError(w, http.StatusNotFound, "File files/"+id+" not found.")
		return
	}
	cut := f.Source == "GENERATED" && s.truncates(f.ID)
	in, err := os.Open(s.filePath(f.ID))
	size := f.Bytes
	s.mu.Unlock()
	if err != nil {
		gemError(w, http.StatusInternalServerError, err.Error())
		return
	}
	defer in.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	if cut && size > 0 {
		s.serveCut(w, size, in)
	}
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	io.Copy(w, in)
}

func (s *Server) gemDeleteFile(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.gemLookupFile(w, r.PathValue("name"))
	if f == nil {
		return
	}
	delete(s.files, f.ID)
	os.Remove(filepath.Join(s.dir, "files", f.ID+".json"))
	os.Remove(s.filePath(f.ID))
	writeJSON(w, http.StatusOK, map[string]any{})
}

// gemPage reads pageSize (default def, at most maxv) and pageToken.
func gemPage(w http.ResponseWriter, r *http.Request, def, maxv int) (size int, token string, ok bool) {
	q := r.URL.Query()
	size = def
	if v := q.Get("pageSize"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			gemError(w, http.StatusBadRequest, "Invalid pageSize "+v+".")
			return 0, "", false
		}
		if n > 0 {
			size = min(n, maxv)
		}
	}
	tok := q.Get("pageToken")
	if tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			gemError(w, http.StatusBadRequest, "Invalid pageToken.")
			return 0, "", false
		}
		tok = string(b)
	}
	return size, tok, true
}

// gemPaginate returns the page starting at the item whose id is token.
func gemPaginate[T any](all []T, token string, size int, id func(T) string) ([]T, string) {
	start := 0
	if token != "" {
		start = slices.IndexFunc(all, func(x T) bool { return id(x) == token })
		if start < 0 {
			start = len(all)
		}
	}
	end := min(start+size, len(all))
	next := ""
	if end < len(all) {
		next = base64.RawURLEncoding.EncodeToString([]byte(id(all[end])))
	}
	return all[start:end], next
}

func (s *Server) gemListFiles(w http.ResponseWriter, r *http.Request) {
	size, token, ok := gemPage(w, r, 10, 100)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*fileRec
	for _, f := range s.files {
		if f.Family == famGemini {
			all = append(all, f)
		}
	}
	slices.SortFunc(all, func(a, b *fileRec) int { return int(b.Seq - a.Seq) })
	page, next := gemPaginate(all, token, size, func(f *fileRec) string { return f.ID })
	files := make([]any, len(page))
	for i, f := range page {
		files[i] = s.gemFileJSON(f, r, gemVersion(r.URL.Path))
	}
	out := map[string]any{}
	if len(files) > 0 {
		out["files"] = files
	}
	if next != "" {
		out["nextPageToken"] = next
	}
	writeJSON(w, http.StatusOK, out)
}

// ---- Batches ----

// gemModelCall serves POST /{v}/models/{model}:batchGenerateContent (create
// a batch) and :generateContent (one direct call).
func (s *Server) gemModelCall(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	coll := "models/"
	if strings.Contains(r.URL.Path, "/tunedModels/") {
		coll = "tunedModels/"
	}
	model, method, _ := strings.Cut(name, ":")
	switch method {
	case "batchGenerateContent":
		s.gemCreateBatch(w, r, coll+model)
	case "generateContent":
		body, err := readLimited(r, 32<<20)
		if err != nil {
			gemError(w, http.StatusRequestEntityTooLarge, err.Error())
			return
		}
		m, status := s.runGemini(coll+model, body)
		s.countSync(famGemini, syncJobKey(famGemini, r.Header.Get(HeaderSyncJob)), r, m.status)
		if s.syncWait(r) != nil {
			return
		}
		if m.status != 200 {
			var st struct{ Message string }
			json.Unmarshal(m.body, &st)
			gemErrorStatus(w, m.status, status, st.Message)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(m.body)
	default:
		gemError(w, http.StatusNotFound, "Method "+method+" of "+coll+model+" is not served by the emulator.")
	}
}

func (s *Server) gemCreateBatch(w http.ResponseWriter, r *http.Request, model string) {
	body, err := readLimited(r, gemInlineMaxBytes+1)
	if err != nil || len(body) > gemInlineMaxBytes {
		gemError(w, http.StatusBadRequest, fmt.Sprintf("The request is larger than the %s bytes inlined batches may carry; upload the requests as a file.", commas(gemInlineMaxBytes)))
		return
	}
	type inputConfig struct {
		FileName      string          `json:"fileName"`
		FileNameSnake string          `json:"file_name"`
		Requests      json.RawMessage `json:"requests"`
	}
	type batch struct {
		DisplayName      string       `json:"displayName"`
		DisplayNameSnake string       `json:"display_name"`
		InputConfig      *inputConfig `json:"inputConfig"`
		InputConfigSnake *inputConfig `json:"input_config"`
	}
	var req struct {
		Batch *batch `json:"batch"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		gemError(w, http.StatusBadRequest, "Invalid JSON payload received. "+err.Error())
		return
	}
	if req.Batch == nil {
		gemError(w, http.StatusBadRequest, "* BatchGenerateContentRequest.batch: batch is required\n")
		return
	}
	ic := req.Batch.InputConfig
	if ic == nil {
		ic = req.Batch.InputConfigSnake
	}
	if ic == nil {
		gemError(w, http.StatusBadRequest, "* GenerateContentBatch.input_config: input_config is required\n")
		return
	}
	fileName := cmp(ic.FileName, ic.FileNameSnake)
	dn := cmp(req.Batch.DisplayName, req.Batch.DisplayNameSnake)
	if (fileName == "") == (len(ic.Requests) == 0) {
		gemError(w, http.StatusBadRequest, "* GenerateContentBatch.input_config: exactly one of file_name and requests is required\n")
		return
	}
	if fileName == "" {
		s.gemCreateInline(w, model, dn, ic.Requests)
		return
	}
	fid := strings.TrimPrefix(fileName, "files/")
	now := s.now()
	s.mu.Lock()
	s.tick(now)
	f := s.files[fid]
	if f == nil || f.Family != famGemini {
		s.mu.Unlock()
		gemError(w, http.StatusNotFound, "Requested entity was not found: "+fileName+".")
		return
	}
	if lim := s.opts.GeminiMaxActiveBatches; lim > 0 && s.activeOf(famGemini) >= lim {
		s.mu.Unlock()
		gemError(w, http.StatusTooManyRequests, fmt.Sprintf("You have reached the limit of %d concurrent batch jobs. Wait for some to finish.", lim))
		return
	}
	seq := s.nextSeq()
	id := gemID(s.opts.Seed, "gembatch", int(seq), 36)
	err = linkOrCopy(s.filePath(f.ID), s.batchInput(id))
	s.mu.Unlock()
	if err != nil {
		gemError(w, http.StatusInternalServerError, err.Error())
		return
	}
	sc, err := s.scanGemini(s.batchInput(id), f.Bytes)
	if err != nil {
		os.Remove(s.batchInput(id))
		gemError(w, http.StatusInternalServerError, err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if lim := s.opts.EnqueuedTokenLimit; lim > 0 && s.enqueued(famGemini, model, "")+sc.tokens > lim {
		os.Remove(s.batchInput(id))
		gemError(w, http.StatusTooManyRequests, fmt.Sprintf(
			"Enqueued tokens for %s would exceed the limit of %s. Try again once some batches have ended.", model, commas(lim)))
		return
	}
	b := &batchRec{ID: id, Family: famGemini, Seq: seq, Created: now, Model: model, InputFileID: "files/" + f.ID,
		DisplayName: dn, JobKey: jobKeyFromFilename(dn), N: sc.n, Tokens: sc.tokens, ScanErrors: sc.errs,
		FailInjected: unit(h64(s.opts.Seed, "vfail", id, 0)) < s.opts.ValidationFailRate,
		ExpireFate:   unit(h64(s.opts.Seed, "expire", id, 0)) < s.opts.ExpireRate,
		Status:       stValidating}
	s.drawBatchFates(b)
	s.batches[id], s.active[id] = b, b
	s.saveBatch(b)
	s.bump(func(st *Stats) {
		st.BatchesCreated++
		fs := st.family(famGemini)
		fs.BatchesCreated++
		st.ByFamily[famGemini] = fs
	})
	s.saveState()
	s.logf("emulator: gemini batch %s created: %d requests for %s, %d scan errors", id, b.N, model, len(b.ScanErrors))
	answer := s.gemBatchJSON(b, now)
	if s.forgets(b) {
		s.forget(b)
	}
	writeJSON(w, http.StatusOK, answer)
}

// gemInlineMaxBytes bounds a create request with inlined requests (the
// docs: inline requests total under 20 MB).
const gemInlineMaxBytes = 20_000_000

// gemCreateInline creates a batch from inputConfig.requests
// ({"requests":[{"request":…,"metadata":{"key":…}}]}): the requests are
// spooled as {"key","request","metadata"} lines, and their responses come
// back in the Operation, in request order, as
// output.inlinedResponses.inlinedResponses [{"response"|"error","metadata"}].
func (s *Server) gemCreateInline(w http.ResponseWriter, model, displayName string, raw json.RawMessage) {
	var in struct {
		Requests []struct {
			Request  json.RawMessage   `json:"request"`
			Metadata map[string]string `json:"metadata"`
		} `json:"requests"`
	}
	if err := json.Unmarshal(raw, &in); err != nil || len(in.Requests) == 0 {
		gemError(w, http.StatusBadRequest, "* GenerateContentBatch.input_config.requests.requests: at least one request is required\n")
		return
	}
	var buf bytes.Buffer
	var tokens int64
	for i, it := range in.Requests {
		if len(it.Request) == 0 || it.Request[0] != '{' {
			gemError(w, http.StatusBadRequest, fmt.Sprintf("* GenerateContentBatch.input_config.requests.requests[%d].request: request is required\n", i))
			return
		}
		buf.Write(mustJSON(map[string]any{"key": it.Metadata["key"], "request": it.Request, "metadata": it.Metadata}))
		buf.WriteByte('\n')
		tokens += approxTokens(len(it.Request))
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tick(now)
	if lim := s.opts.GeminiMaxActiveBatches; lim > 0 && s.activeOf(famGemini) >= lim {
		gemError(w, http.StatusTooManyRequests, fmt.Sprintf("You have reached the limit of %d concurrent batch jobs. Wait for some to finish.", lim))
		return
	}
	if lim := s.opts.EnqueuedTokenLimit; lim > 0 && s.enqueued(famGemini, model, "")+tokens > lim {
		gemError(w, http.StatusTooManyRequests, fmt.Sprintf(
			"Enqueued tokens for %s would exceed the limit of %s. Try again once some batches have ended.", model, commas(lim)))
		return
	}
	seq := s.nextSeq()
	id := gemID(s.opts.Seed, "gembatch", int(seq), 36)
	if err := atomicfile.WriteFile(s.batchInput(id), buf.Bytes()); err != nil {
		gemError(w, http.StatusInternalServerError, err.Error())
		return
	}
	b := &batchRec{ID: id, Family: famGemini, Seq: seq, Created: now, Model: model, Inline: true,
		DisplayName: displayName, JobKey: jobKeyFromFilename(displayName), N: len(in.Requests), Tokens: tokens,
		FailInjected: unit(h64(s.opts.Seed, "vfail", id, 0)) < s.opts.ValidationFailRate,
		ExpireFate:   unit(h64(s.opts.Seed, "expire", id, 0)) < s.opts.ExpireRate,
		Status:       stValidating}
	s.drawBatchFates(b)
	s.batches[id], s.active[id] = b, b
	s.saveBatch(b)
	s.bump(func(st *Stats) {
		st.BatchesCreated++
		fs := st.family(famGemini)
		fs.BatchesCreated++
		st.ByFamily[famGemini] = fs
	})
	s.saveState()
	s.logf("emulator: gemini batch %s created: %d inlined requests for %s", id, b.N, model)
	answer := s.gemBatchJSON(b, now)
	if s.forgets(b) {
		s.forget(b)
	}
	writeJSON(w, http.StatusOK, answer)
}

// gemInlined reads the inlined responses of an ended inline batch.
func (s *Server) gemInlined(b *batchRec) []json.RawMessage {
	data, err := os.ReadFile(s.batchResults(b.ID))
	if err != nil {
		return nil
	}
	var out []json.RawMessage
	for _, l := range bytes.Split(data, []byte("\n")) {
		if l = bytes.TrimSpace(l); len(l) > 0 {
			out = append(out, json.RawMessage(l))
		}
	}
	return out
}

// activeOf counts a family's batches that have not ended. Caller holds s.mu.
func (s *Server) activeOf(family string) int {
	n := 0
	for _, b := range s.active {
		if b.Family == family {
			n++
		}
	}
	return n
}

// scanGemini checks a batch input file ({"key","request"} lines) and counts
// its requests and estimated tokens. A line that is not such an object
// fails the batch when it leaves PENDING.
func (s *Server) scanGemini(path string, size int64) (scanResult, error) {
	var sc scanResult
	if size > s.opts.GeminiMaxFileBytes {
		sc.errs = []batchError{{Code: "INVALID_ARGUMENT", Message: fmt.Sprintf(
			"The batch input file is %s bytes; the maximum is %s bytes.", commas(size), commas(s.opts.GeminiMaxFileBytes))}}
		return sc, nil
	}
	in, err := os.Open(path)
	if err != nil {
		return sc, err
	}
	defer in.Close()
	br := bufio.NewReaderSize(in, 1<<20)
	for lineNo := 1; ; lineNo++ {
		line, rerr := br.ReadBytes('\n')
		if t := bytes.TrimSpace(line); len(t) > 0 {
			sc.n++
			var ln struct {
				Key     *string         `json:"key"`
				Request json.RawMessage `json:"request"`
			}
			switch err := json.Unmarshal(t, &ln); {
			case err != nil:
				sc.add(fmt.Sprintf("line %d is not valid JSON: %v", lineNo, err))
			case ln.Key == nil:
				sc.add(fmt.Sprintf("line %d has no \"key\"", lineNo))
			case len(ln.Request) == 0 || ln.Request[0] != '{':
				sc.add(fmt.Sprintf("line %d: \"request\" must be a GenerateContentRequest object", lineNo))
			default:
				sc.tokens += approxTokens(len(ln.Request))
			}
		}
		if rerr == io.EOF {
			break
		} else if rerr != nil {
			return sc, rerr
		}
	}
	if sc.n == 0 {
		sc.add("the batch input file is empty")
	}
	return sc, nil
}

func (sc *scanResult) add(msg string) {
	if len(sc.errs) < maxReportedErrors {
		sc.errs = append(sc.errs, batchError{Code: "INVALID_ARGUMENT", Message: msg})
	}
}

// validateGemini is the end of PENDING: the input scan's errors or an
// injected validation failure fail the batch.
func (s *Server) validateGemini(b *batchRec, t time.Time) {
	switch {
	case len(b.ScanErrors) > 0:
		s.fail(b, t, b.ScanErrors...)
	case b.FailInjected:
		s.fail(b, t, batchError{Code: "INVALID_ARGUMENT",
			Message: "The batch input file failed validation (injected by the emulator's ValidationFailRate)."})
	}
}

// gemState is the wire state of a batch. Cancel ends a Gemini batch at
// once, so cancelling is never shown.
func gemState(b *batchRec) string {
	switch b.Status {
	case stValidating:
		return "BATCH_STATE_PENDING"
	case stInProgress, stFinalizing, stCancelling:
		return "BATCH_STATE_RUNNING"
	case stCompleted:
		return "BATCH_STATE_SUCCEEDED"
	case stFailed:
		return "BATCH_STATE_FAILED"
	case stExpired:
		return "BATCH_STATE_EXPIRED"
	case stCancelled:
		return "BATCH_STATE_CANCELLED"
	}
	return "BATCH_STATE_UNSPECIFIED"
}

const (
	gemBatchType  = "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch"
	gemOutputType = "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatchOutput"
)

// gemBatchJSON renders a batch as the Operation the API answers: the
// GenerateContentBatch in metadata (what the SDKs read), plus done,
// response and error at the top (what the docs' curl reads).
func (s *Server) gemBatchJSON(b *batchRec, now time.Time) map[string]any {
	stats := map[string]any{}
	put := func(k string, n int) {
		if n > 0 {
			stats[k] = strconv.Itoa(n)
		}
	}
	put("requestCount", b.N)
	updated := b.Created
	switch b.Status {
	case stValidating:
		put("pendingRequestCount", b.N)
	case stInProgress, stFinalizing, stCancelling:
		ok, failed := s.liveCounts(b, now)
		put("successfulRequestCount", ok)
		put("failedRequestCount", failed)
		put("pendingRequestCount", b.N-ok-failed)
		if b.InProgressAt != nil {
			updated = *b.InProgressAt
		}
	default:
		if b.Status != stFailed {
			put("successfulRequestCount", b.Counts.Succeeded)
			put("failedRequestCount", b.Counts.Errored+b.Counts.Expired+b.Counts.Cancelled)
		}
		if t := b.endedAt(); t != nil {
			updated = *t
		}
	}
	md := map[string]any{"@type": gemBatchType, "model": b.Model, "name": "batches/" + b.ID,
		"createTime": gemTime(b.Created), "updateTime": gemTime(updated), "batchStats": stats, "state": gemState(b)}
	if !b.Inline {
		md["inputConfig"] = map[string]any{"fileName": b.InputFileID} // omitted for inlined requests (obs)
	}
	if b.DisplayName != "" {
		md["displayName"] = b.DisplayName
	}
	op := map[string]any{"name": "batches/" + b.ID, "metadata": md}
	if !terminal(b.Status) {
		return op
	}
	md["endTime"] = gemTime(updated)
	op["done"] = true
	if b.OutputFileID != "" {
		md["output"] = map[string]any{"responsesFile": "files/" + b.OutputFileID}
		op["response"] = map[string]any{"@type": gemOutputType, "responsesFile": "files/" + b.OutputFileID}
	}
	if b.Inline && b.Status != stFailed {
		inl := map[string]any{"inlinedResponses": s.gemInlined(b)}
		md["output"] = map[string]any{"inlinedResponses": inl}
		op["response"] = map[string]any{"@type": gemOutputType, "inlinedResponses": inl}
	}
	if b.Status == stFailed && len(b.Errors) > 0 {
		msgs := make([]string, len(b.Errors))
		for i, e := range b.Errors {
			msgs[i] = e.Message
		}
		code := gemGRPCCode[b.Errors[0].Code]
		if code == 0 {
			code = gemGRPCCode["INTERNAL"]
		}
		op["error"] = map[string]any{"code": code, "message": strings.Join(msgs, "; ")}
	}
	return op
}

// gemLookupBatch finds a Gemini batch, writing NOT_FOUND if absent.
func (s *Server) gemLookupBatch(w http.ResponseWriter, id string) *batchRec {
	if b := s.batches[id]; b != nil && b.Family == famGemini {
		return b
	}
	gemError(w, http.StatusNotFound, "Batch batches/"+id+" not found.")
	return nil
}

func (s *Server) gemGetBatch(w http.ResponseWriter, r *http.Request) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tick(now)
	if b := s.gemLookupBatch(w, r.PathValue("name")); b != nil {
		writeJSON(w, http.StatusOK, s.gemBatchJSON(b, now))
	}
}

// gemBatchAction serves POST /batches/{id}:cancel. Cancel ends the batch
// at once: requests already run keep their responses, the rest never run.
func (s *Server) gemBatchAction(w http.ResponseWriter, r *http.Request) {
	id, action, _ := strings.Cut(r.PathValue("name"), ":")
	if action != "cancel" {
		gemError(w, http.StatusNotFound, "Unknown batch method "+action+".")
		return
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tick(now)
	b := s.gemLookupBatch(w, id)
	if b == nil {
		return
	}
	if !s.cancel(b, now) {
		gemErrorStatus(w, http.StatusBadRequest, "FAILED_PRECONDITION", "Batch batches/"+id+" has already ended ("+gemState(b)+") and cannot be cancelled.")
		return
	}
	s.apply(b, evCancelled, now)
	writeJSON(w, http.StatusOK, map[string]any{})
}

func (s *Server) gemDeleteBatch(w http.ResponseWriter, r *http.Request) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tick(now)
	b := s.gemLookupBatch(w, r.PathValue("name"))
	if b == nil {
		return
	}
	if !terminal(b.Status) {
		gemErrorStatus(w, http.StatusBadRequest, "FAILED_PRECONDITION", "Batch batches/"+b.ID+" has not ended; cancel it first.")
		return
	}
	delete(s.batches, b.ID)
	s.deleteBatchFiles(b.ID)
	writeJSON(w, http.StatusOK, map[string]any{})
}

func (s *Server) gemListBatches(w http.ResponseWriter, r *http.Request) {
	size, token, ok := gemPage(w, r, 50, 1000)
	if !ok {
		return
	}
	if r.URL.Query().Get("filter") != "" {
		gemError(w, http.StatusBadRequest, "filter is not supported for batches of the Gemini Developer API.")
		return
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tick(now)
	page, next := gemPaginate(s.sortedBatches(famGemini), token, size, func(b *batchRec) string { return b.ID })
	ops := make([]any, len(page))
	for i, b := range page {
		ops[i] = s.gemBatchJSON(b, now)
	}
	out := map[string]any{}
	if len(ops) > 0 {
		out["operations"] = ops
	}
	if next != "" {
		out["nextPageToken"] = next
	}
	writeJSON(w, http.StatusOK, out)
}

// commitGeminiOutput makes the responses file of a Gemini batch: a
// GENERATED file named files/batch-<id>, or none when no line was written.
func (s *Server) commitGeminiOutput(b *batchRec, rf *resultFile, t time.Time) error {
	if rf.err != nil {
		return rf.err
	}
	if rf.lines == 0 {
		rf.discard()
		return nil
	}
	id := "batch-" + b.ID
	exp := t.Add(geminiExpiry).Unix()
	f := &fileRec{ID: id, Seq: s.nextSeq(), Bytes: rf.bytes, Lines: rf.lines, CreatedAt: t.Unix(), ExpiresAt: &exp,
		Purpose: "gemini", Family: famGemini, MimeType: "application/jsonl", Source: "GENERATED", Created: t,
		Lost: b.OutputLost}
	if err := rf.commit(s.filePath(id)); err != nil {
		return err
	}
	if sum, err := fileSHA256(s.filePath(id)); err == nil {
		f.SHA256 = sum
	}
	s.files[id] = f
	s.saveFile(f)
	b.OutputFileID = id
	return nil
}

// loadUploads reads the upload sessions of a DataDir.
func (s *Server) loadUploads() error {
	ents, err := os.ReadDir(filepath.Join(s.dir, "uploads"))
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		var u gemUploadRec
		if err := readJSON(filepath.Join(s.dir, "uploads", e.Name()), &u); err != nil {
			return err
		}
		s.uploads[u.ID] = &u
	}
	return nil
}
