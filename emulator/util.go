package emulator

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-batch/sluice/internal/atomicfile"
	"github.com/sluice-batch/sluice/internal/iobuf"
)

const (
	famOpenAI     = "openai"
	famAnthropic  = "anthropic"
	famCloudflare = "cloudflare"
	famMistral    = "mistral"
	famTogether   = "together"
	famInternal   = "internal"
)

// Family is one API family the emulator serves and the path of its base
// URL: what that family's official SDK and sluice's --base-url take,
// relative to the server's root.
type Family struct {
	Name string
	Path string
	// Env is the variable the family's SDKs (and sluice) read the base URL
	// from.
	Env string
}

// Families lists every family served, in banner order. GET /_emulator/info
// and the banner of `sluice emulate` are both made from it.
var Families = []Family{
	{"openai", "/v1", "OPENAI_BASE_URL"},
	{"anthropic", "", "ANTHROPIC_BASE_URL"},
	{"cloudflare", "/client/v4", "CLOUDFLARE_BASE_URL"},
	{famGemini, geminiPrefix, "GOOGLE_GEMINI_BASE_URL"},
	{"azure", "/openai/v1", "AZURE_OPENAI_BASE_URL"},
	{famMistral, "/mistral", "MISTRAL_BASE_URL"},
	{famTogether, "/together/v1", "TOGETHER_BASE_URL"},
	{famXAI, xaiPrefix, "XAI_BASE_URL"},
	{famVertex, "", "GOOGLE_VERTEX_BASE_URL"}, // at the root: /v1/projects/...
	{famBedrock, bedrockPrefix, "AWS_ENDPOINT_URL_BEDROCK"},
	{famBedrock + "-runtime", bedrockRuntimePrefix, "AWS_ENDPOINT_URL_BEDROCK_RUNTIME"},
}

// BaseURLs maps each family to its base URL on a server reached at root
// (http://HOST:PORT).
func BaseURLs(root string) map[string]string {
	m := make(map[string]string, len(Families))
	for _, f := range Families {
		m[f.Name] = root + f.Path
	}
	return m
}

// familyOf tells which API family a request path belongs to. /v1/messages is
// Anthropic; every other /v1 path (and Azure's /openai/v1) is OpenAI.
func familyOf(path string) string {
	switch {
	case strings.HasPrefix(path, "/_emulator/"):
		return famInternal
	case strings.HasPrefix(path, "/client/v4/"):
		return famCloudflare
	case strings.HasPrefix(path, "/mistral/"):
		return famMistral
	case strings.HasPrefix(path, "/together/"):
		return famTogether
	case strings.HasPrefix(path, "/xai/"):
		return famXAI
	case strings.HasPrefix(path, geminiPrefix+"/"):
		return famGemini
	case strings.HasPrefix(path, "/v1/projects/") || strings.HasPrefix(path, "/v1beta1/projects/"):
		return famVertex
	case strings.HasPrefix(path, bedrockPrefix+"/"), strings.HasPrefix(path, bedrockRuntimePrefix+"/"):
		return famBedrock
	case path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/"):
		return famAnthropic
	default:
		return famOpenAI
	}
}

// h64 is a stable 64-bit hash of (seed, tag, id, i), finished with splitmix64.
func h64(seed int64, tag, id string, i int) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	h.Write([]byte(tag))
	h.Write([]byte{0})
	h.Write([]byte(id))
	binary.LittleEndian.PutUint64(b[:], uint64(i))
	h.Write(b[:])
	return splitmix(h.Sum64())
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// unit maps a hash to [0,1).
func unit(h uint64) float64 { return float64(h>>11) / float64(uint64(1)<<53) }

// hexID is 2*n hex characters derived from (seed, tag, id, i).
func hexID(seed int64, tag, id string, i, n int) string {
	var b []byte
	for k := 0; len(b) < n; k++ {
		var x [8]byte
		binary.BigEndian.PutUint64(x[:], h64(seed, tag, id, i*7919+k))
		b = append(b, x[:]...)
	}
	return hex.EncodeToString(b[:n])
}

const base58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"

// b58ID is n base58 characters derived from (seed, tag, id, i).
func b58ID(seed int64, tag, id string, i, n int) string {
	out := make([]byte, n)
	x := h64(seed, tag, id, i)
	for k := 0; k < n; k++ {
		if k%8 == 7 {
			x = splitmix(x + uint64(k))
		}
		out[k] = base58[x%58]
		x /= 58
	}
	return string(out)
}

// uuidFrom formats 16 derived bytes as an RFC 4122 version-4 UUID.
func uuidFrom(seed int64, tag, id string, i int) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], h64(seed, tag, id, i))
	binary.BigEndian.PutUint64(b[8:], h64(seed, tag, id, i+1<<20))
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// oaiError writes the OpenAI error envelope {"error":{message,type,param,code}}.
func oaiError(w http.ResponseWriter, status int, typ, msg, param, code string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"message": msg, "type": typ, "param": nullable(param), "code": nullable(code),
	}})
}

// antError writes the Anthropic envelope {"type":"error","error":{type,message},"request_id"}.
func antError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{
		"type":       "error",
		"error":      map[string]any{"type": typ, "message": msg},
		"request_id": w.Header().Get("request-id"),
	})
}

// cfError writes the Cloudflare v4 envelope with one error.
func cfError(w http.ResponseWriter, status, code int, msg string) {
	writeJSON(w, status, map[string]any{
		"result":   nil,
		"success":  false,
		"errors":   []any{map[string]any{"code": code, "message": msg}},
		"messages": []any{},
	})
}

// filesFamily reports whether a family's batches read an uploaded input
// file and write output and error files.
func filesFamily(fam string) bool {
	return fam == famOpenAI || fam == famMistral || fam == famTogether
}

// errorFamily is the envelope family of a request: Together's batch
// endpoints answer {"error":"text"}, its other endpoints the OpenAI shape.
func errorFamily(path string) string {
	fam := familyOf(path)
	if fam == famTogether && !strings.HasPrefix(path, "/together/v1/batches") {
		return famOpenAI
	}
	return fam
}

// mistralError writes {"object":"error","message","type","param","code"}
// (docs/providers/mistral.md).
func mistralError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{"object": "error", "message": msg, "type": typ, "param": nil, "code": nil})
}

// togetherError writes the batch error envelope {"error":"text"}.
func togetherError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": msg})
}

// optTime renders t with render, or null when t is nil.
func optTime(t *time.Time, render func(time.Time) any) any {
	if t == nil {
		return nil
	}
	return render(*t)
}

// eachLine calls fn with each non-blank line of r, trimmed, and its line
// number (from 1), until fn returns false or r ends.
func eachLine(r io.Reader, fn func(t []byte, lineNo int) bool) error {
	br := bufio.NewReaderSize(r, iobuf.Size(r, 1<<20))
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadBytes('\n')
		if t := bytes.TrimSpace(line); len(t) > 0 && !fn(t, lineNo) {
			return nil
		}
		if err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// writeJSONAtomic writes v as JSON to path through a synced temp file.
func writeJSONAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, b)
}

// approxTokens is the emulator's token count: bytes/4 rounded up.
func approxTokens(n int) int64 { return int64((n + 3) / 4) }

func clamp01(f float64) float64 {
	if math.IsNaN(f) || f < 0 {
		return 0
	}
	if f > 1 {
		return 1
	}
	return f
}
