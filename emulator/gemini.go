package emulator

import (
	"net/http"
	"slices"
	"strings"
	"time"
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
	h := geminiFam.h
	for _, v := range geminiVersions {
		p := geminiPrefix + "/" + v
		mux.HandleFunc("POST "+geminiPrefix+"/upload/"+v+"/files", h(s.gemUpload))
		mux.HandleFunc("GET "+p+"/files", h(s.gemListFiles))
		mux.HandleFunc("GET "+p+"/files/{name}", h(s.gemGetFile))
		mux.HandleFunc("DELETE "+p+"/files/{name}", h(s.gemDeleteFile))
		mux.HandleFunc("GET "+geminiPrefix+"/download/"+v+"/files/{name}", h(s.gemDownload))
		mux.HandleFunc("POST "+p+"/models/{name}", h(s.gemModelCall))
		mux.HandleFunc("POST "+p+"/tunedModels/{name}", h(s.gemModelCall))
		mux.HandleFunc("GET "+p+"/batches", h(s.gemListBatches))
		mux.HandleFunc("GET "+p+"/batches/{name}", s.getBatch(geminiFam, "name", func(b *batchRec, _ *http.Request, now time.Time) any {
			return s.gemBatchJSON(b, now)
		}))
		mux.HandleFunc("POST "+p+"/batches/{name}", h(s.gemBatchAction))
		mux.HandleFunc("DELETE "+p+"/batches/{name}", h(s.gemDeleteBatch))
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
