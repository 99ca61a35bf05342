package emulator

import (
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The Gemini Files API's file objects: get, download, delete, list.

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
