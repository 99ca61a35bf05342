// Package emutest holds the test helpers that the emulator's own tests
// (emulator/*_test.go) and its SDK round-trip tests (the nested module
// sdktest/, sdktest/emulator) share: a fake clock, raw HTTP calls and
// the Workers AI wire shapes. It imports no emulator code, so that the
// emulator's in-package tests can use it too.
package emutest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Clock is a fake clock that moves only when told to.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock starts a Clock at a fixed instant.
func NewClock() *Clock {
	return &Clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Serve serves h behind a real loopback HTTP server, closed (and then
// closer, whose error fails the test) when the test ends.
func Serve(t testing.TB, h http.Handler, closer func() error) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.Close()
		if err := closer(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return ts
}

// Do sends one HTTP request and returns status, headers and body.
func Do(t testing.TB, method, url string, body []byte, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return resp.StatusCode, resp.Header, b
}

// MustUnmarshal decodes b into v or fails the test.
func MustUnmarshal(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
}

// ExpectedAnswer is the fake model's answer for a user message: "echo: "
// and the first 40 runes reversed.
func ExpectedAnswer(prompt string) string {
	r := []rune(prompt)
	if len(r) > 40 {
		r = r[:40]
	}
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return "echo: " + string(r)
}

// ChatLines is n OpenAI batch lines of chat completions for model,
// custom_ids req-0 to req-(n-1), each asking question number i.
func ChatLines(n int, model string) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"req-%d","method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"Question number %d: what is the meaning of life?"}]}}`+"\n", i, model, i)
	}
	return b.Bytes()
}

// MultipartUpload builds a files upload body by hand: the body and its
// Content-Type.
func MultipartUpload(name, purpose string, data []byte) ([]byte, string) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", name)
	fw.Write(data)
	mw.WriteField("purpose", purpose)
	mw.Close()
	return buf.Bytes(), mw.FormDataContentType()
}

// AnthropicError is the body of an Anthropic error answer.
type AnthropicError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	RequestID string `json:"request_id"`
}

// CFLlama is a Workers AI text model the emulator serves.
const CFLlama = "@cf/meta/llama-3.3-70b-instruct-fp8-fast"

// CFURL is the Workers AI run URL for model on ts; queue asks for the
// asynchronous batch API.
func CFURL(ts *httptest.Server, model string, queue bool) string {
	u := ts.URL + "/client/v4/accounts/acc123/ai/run/" + model
	if queue {
		u += "?queueRequest=true"
	}
	return u
}

// CFEnvelope is the Cloudflare API envelope.
type CFEnvelope struct {
	Result  json.RawMessage `json:"result"`
	Success bool            `json:"success"`
	Errors  []struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"errors"`
	Messages []any `json:"messages"`
}

// CFFinal is a Workers AI batch: queued, running or with its responses.
type CFFinal struct {
	Status    string `json:"status"`
	RequestID string `json:"request_id"`
	Model     string `json:"model"`
	Responses []struct {
		ID        int             `json:"id"`
		Result    json.RawMessage `json:"result"`
		Success   bool            `json:"success"`
		Error     json.RawMessage `json:"error"`
		Reference *string         `json:"external_reference"`
	} `json:"responses"`
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		TotalTokens      int64 `json:"total_tokens"`
	} `json:"usage"`
}

// CFCall posts body to a Workers AI URL with the test token and decodes
// the envelope (which must carry its errors and messages arrays) and its
// result.
func CFCall(t testing.TB, url string, body any) (int, CFEnvelope, CFFinal) {
	t.Helper()
	b, _ := json.Marshal(body)
	code, _, raw := Do(t, "POST", url, b, map[string]string{"Authorization": "Bearer tok"})
	var env CFEnvelope
	MustUnmarshal(t, raw, &env)
	if env.Errors == nil || env.Messages == nil {
		t.Fatalf("envelope lacks errors/messages arrays: %s", raw)
	}
	var fin CFFinal
	if len(env.Result) > 0 && string(env.Result) != "null" {
		MustUnmarshal(t, env.Result, &fin)
	}
	return code, env, fin
}
