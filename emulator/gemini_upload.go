package emulator

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The Gemini Files API's resumable upload protocol: sessions, chunks, finalize.

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

// gemStartReq is the body of an upload's start: the file's metadata.
type gemStartReq struct {
	File *struct {
		Name             string `json:"name"`
		DisplayName      string `json:"displayName"`
		DisplayNameSnake string `json:"display_name"`
		MimeType         string `json:"mimeType"`
		MimeTypeSnake    string `json:"mime_type"`
	} `json:"file"`
}

// gemUpload serves POST /upload/{v}/files: with upload_id it is a command
// on a session (upload, finalize, query, cancel), without it a start.
func (s *Server) gemUpload(w http.ResponseWriter, r *http.Request) error {
	if id := r.URL.Query().Get("upload_id"); id != "" {
		return s.gemUploadCommand(w, r, id)
	}
	proto := strings.ToLower(r.Header.Get("X-Goog-Upload-Protocol"))
	cmd := strings.ToLower(strings.TrimSpace(r.Header.Get("X-Goog-Upload-Command")))
	if proto != "resumable" || cmd != "start" {
		return errf(http.StatusBadRequest, "The emulator serves the resumable upload protocol only: send X-Goog-Upload-Protocol: resumable and X-Goog-Upload-Command: start.")
	}
	declared := int64(-1)
	if v := r.Header.Get("X-Goog-Upload-Header-Content-Length"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return errf(http.StatusBadRequest, "Invalid X-Goog-Upload-Header-Content-Length: "+v)
		}
		declared = n
	}
	if declared > s.opts.GeminiMaxFileBytes {
		return errf(http.StatusBadRequest, fmt.Sprintf("File size %d bytes exceeds the maximum of %d bytes.", declared, s.opts.GeminiMaxFileBytes))
	}
	body, err := readLimited(r, 1<<20)
	if err != nil {
		return errf(http.StatusBadRequest, err.Error())
	}
	var req gemStartReq
	if len(bytes.TrimSpace(body)) > 0 {
		if req, err = parse[gemStartReq](body, geminiFam); err != nil {
			return err
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
				return errf(http.StatusBadRequest, "Invalid file name "+f.Name+": ids are up to 40 characters of [a-z0-9-], not starting or ending with '-'.")
			}
			u.Name = "files/" + id
		}
	}
	if err := s.locked(func() error {
		if u.Name != "" && s.files[strings.TrimPrefix(u.Name, "files/")] != nil {
			return errf(http.StatusConflict, "File "+u.Name+" already exists.")
		}
		seq := s.nextSeq()
		u.ID = "ABgVH" + b58ID(s.opts.Seed, "gemupload", "", int(seq), 40)
		s.uploads[u.ID] = u
		if err := os.WriteFile(s.uploadPath(u.ID, ".data"), nil, 0o644); err != nil {
			delete(s.uploads, u.ID)
			return err
		}
		s.saveUpload(u)
		s.saveState()
		return nil
	}); err != nil {
		return err
	}
	w.Header().Set("X-Goog-Upload-URL", baseURL(r)+geminiPrefix+"/upload/"+u.Version+"/files?upload_id="+u.ID+"&upload_protocol=resumable")
	w.Header().Set("X-Goog-Upload-Status", "active")
	w.Header().Set("X-Goog-Upload-Chunk-Granularity", strconv.FormatInt(s.opts.GeminiUploadGranularity, 10))
	writeJSON(w, http.StatusOK, map[string]any{})
	return nil
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// gemUploadCommand runs X-Goog-Upload-Command on an upload session.
func (s *Server) gemUploadCommand(w http.ResponseWriter, r *http.Request, id string) error {
	lock := s.uploadLock(id)
	lock.Lock()
	defer lock.Unlock()
	var u *gemUploadRec
	s.locked(func() error { u = s.uploads[id]; return nil })
	if u == nil {
		return errf(http.StatusNotFound, "Upload session "+id+" not found (it expired, was cancelled, or never existed).")
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
	switch {
	case len(cmds) == 0:
		return errf(http.StatusBadRequest, "Missing X-Goog-Upload-Command.")
	case u.Cancelled:
		status("cancelled")
		return errf(http.StatusBadRequest, "Upload session "+id+" was cancelled.")
	case u.FileID != "":
		io.Copy(io.Discard, r.Body)
		s.gemUploadFinal(w, r, u, status)
		return nil
	}
	var upload, finalize bool
	for _, c := range cmds {
		switch c {
		case "query":
			status("active")
			w.WriteHeader(http.StatusOK)
			return nil
		case "cancel":
			u.Cancelled = true
			s.saveUpload(u)
			os.Remove(s.uploadPath(id, ".data"))
			status("cancelled")
			w.WriteHeader(http.StatusOK)
			return nil
		case "upload":
			upload = true
		case "finalize":
			finalize = true
		default:
			status("active")
			return errf(http.StatusBadRequest, "Unknown X-Goog-Upload-Command "+c+".")
		}
	}
	var err error
	if upload {
		err = s.gemChunk(u, r, finalize)
	}
	switch {
	case err != nil:
	case !finalize:
		status("active")
		w.WriteHeader(http.StatusOK)
		return nil
	case u.Declared >= 0 && u.Received != u.Declared:
		err = errf(http.StatusBadRequest, fmt.Sprintf("Finalized with %d bytes received, but X-Goog-Upload-Header-Content-Length announced %d.", u.Received, u.Declared))
	default:
		err = s.gemFinalize(u)
	}
	if err != nil {
		status("active")
		return err
	}
	s.gemUploadFinal(w, r, u, status)
	return nil
}

// gemUploadFinal answers a finalized session: its file.
func (s *Server) gemUploadFinal(w http.ResponseWriter, r *http.Request, u *gemUploadRec, status func(string)) {
	var f *fileRec
	s.locked(func() error { f = s.files[u.FileID]; return nil })
	status("final")
	if f == nil {
		writeJSON(w, http.StatusOK, map[string]any{})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"file": s.gemFileJSON(f, r, u.Version)})
}

// gemChunk receives the chunk of an upload command at
// X-Goog-Upload-Offset. Caller holds the session lock.
func (s *Server) gemChunk(u *gemUploadRec, r *http.Request, last bool) error {
	off, err := strconv.ParseInt(r.Header.Get("X-Goog-Upload-Offset"), 10, 64)
	if err != nil {
		return errf(http.StatusBadRequest, "Missing or invalid X-Goog-Upload-Offset.")
	}
	if off != u.Received {
		io.Copy(io.Discard, r.Body)
		return errf(http.StatusBadRequest, fmt.Sprintf("X-Goog-Upload-Offset %d does not match the %d bytes received so far; query the session and resume from there.", off, u.Received))
	}
	n, err := s.gemReceive(u, r.Body, last)
	var te *tooLargeErr
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te):
		return errf(http.StatusRequestEntityTooLarge, te.Error())
	case errors.Is(err, errGranularity):
		return errf(http.StatusBadRequest, "Upload chunks other than the last must be a multiple of %d bytes.", s.opts.GeminiUploadGranularity)
	default:
		return errf(http.StatusBadRequest, "Reading the upload chunk failed after "+strconv.FormatInt(n, 10)+" bytes: "+err.Error())
	}
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
	s.locked(func() error { s.saveUpload(u); return nil })
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
