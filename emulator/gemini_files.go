package emulator

import (
	"encoding/base64"
	"net/http"
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

// gemErr is a Google error with an explicit status name (FAILED_PRECONDITION
// answers 400 like INVALID_ARGUMENT).
func gemErr(status int, name, msg string) *apiError {
	return &apiError{Status: status, Type: name, Msg: msg}
}

// withGemFile runs fn on Gemini file id with s.mu held; an unknown id is
// PERMISSION_DENIED, as the API answers.
func (s *Server) withGemFile(id string, fn func(f *fileRec) error) error {
	return s.locked(func() error {
		if f := s.files[id]; f != nil && f.Family == famGemini {
			return fn(f)
		}
		return gemErr(http.StatusForbidden, "PERMISSION_DENIED",
			"You do not have permission to access the File "+id+" or it may not exist.")
	})
}

func (s *Server) gemGetFile(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if id, ok := strings.CutSuffix(name, ":download"); ok {
		return s.gemServeFile(w, r, id)
	}
	return s.withGemFile(name, func(f *fileRec) error {
		writeJSON(w, http.StatusOK, s.gemFileJSON(f, r, gemVersion(r.URL.Path)))
		return nil
	})
}

// gemDownload serves GET /download/{v}/files/{id}:download?alt=media, the
// path of the docs' curl; the SDKs call /{v}/files/{id}:download.
func (s *Server) gemDownload(w http.ResponseWriter, r *http.Request) error {
	id, ok := strings.CutSuffix(r.PathValue("name"), ":download")
	if !ok {
		return errf(http.StatusNotFound, "Unknown download path "+r.URL.Path+".")
	}
	return s.gemServeFile(w, r, id)
}

func (s *Server) gemServeFile(w http.ResponseWriter, r *http.Request, id string) error {
	if r.URL.Query().Get("alt") != "media" {
		return errf(http.StatusBadRequest, "Downloads need alt=media.")
	}
	var d content
	err := s.withGemFile(id, func(f *fileRec) error {
		if f.Lost {
			return errf(http.StatusNotFound, "File files/"+id+" not found.")
		}
		var err error
		d, err = s.openContent(f, f.Source == "GENERATED" && s.truncates(f.ID))
		return err
	})
	return s.serveOpened(w, d, err)
}

func (s *Server) gemDeleteFile(w http.ResponseWriter, r *http.Request) error {
	return s.withGemFile(r.PathValue("name"), func(f *fileRec) error {
		s.deleteFile(f)
		writeJSON(w, http.StatusOK, map[string]any{})
		return nil
	})
}

// gemPage reads pageSize (default def, at most maxv) and pageToken.
func gemPage(r *http.Request, def, maxv int) (size int, token string, err error) {
	q := r.URL.Query()
	size = def
	if v := q.Get("pageSize"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, "", errf(http.StatusBadRequest, "Invalid pageSize "+v+".")
		}
		if n > 0 {
			size = min(n, maxv)
		}
	}
	tok := q.Get("pageToken")
	if tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			return 0, "", errf(http.StatusBadRequest, "Invalid pageToken.")
		}
		tok = string(b)
	}
	return size, tok, nil
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

func (s *Server) gemListFiles(w http.ResponseWriter, r *http.Request) error {
	size, token, err := gemPage(r, 10, 100)
	if err != nil {
		return err
	}
	return s.locked(func() error {
		writeJSON(w, http.StatusOK, gemList(s.familyFiles(famGemini, nil), token, size, "files",
			func(f *fileRec) string { return f.ID }, func(f *fileRec) any { return s.gemFileJSON(f, r, gemVersion(r.URL.Path)) }))
		return nil
	})
}

// gemList is the page of all starting at token, as a list answer: the
// items (rendered) under key, omitted when none, and nextPageToken.
func gemList[T any](all []T, token string, size int, key string, id func(T) string, render func(T) any) map[string]any {
	page, next := gemPaginate(all, token, size, id)
	out := map[string]any{}
	if len(page) > 0 {
		items := make([]any, len(page))
		for i, x := range page {
			items[i] = render(x)
		}
		out[key] = items
	}
	if next != "" {
		out["nextPageToken"] = next
	}
	return out
}
