package splitter_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/splitter"
)

func chatLine(id, content string) string {
	return `{"custom_id":` + id + `,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + content + `"}]}}`
}

func col(line, sub string) int { return strings.Index(line, sub) + 1 }

// badLine is one class of bad line: the line, where it goes, and the
// documented outcome.
type badLine struct {
	name     string
	prov     string
	lim      sluice.Limits
	model    string
	line     string
	customID string
	reason   string
}

func badLines() []badLine {
	const openaiURLs = "/v1/responses, /v1/chat/completions, /v1/embeddings, /v1/completions, /v1/moderations, /v1/images/generations, /v1/images/edits, /v1/videos"
	ctrl := chatLine(`"c1"`, "a\x01b")
	utf := chatLine(`"u1"`, "caf\xe9!")
	trailing := chatLine(`"t2"`, "hi") + ` x`
	esc := chatLine(`"e1"`, `a\qb`)
	big := chatLine(`"big"`, strings.Repeat("x", 400))
	return []badLine{
		{name: "truncated JSON", line: `{"custom_id":"t1","method":"POST","url":"/v1/chat/completions","body":{"model":"m"`,
			customID: "t1", reason: "truncated JSON: the line ends before the JSON value is complete"},
		{name: "truncated in a string", line: `{"custom_id":"t3","method":"PO`,
			customID: "t3", reason: "truncated JSON: the line ends before the JSON value is complete"},
		{name: "trailing garbage", line: trailing, customID: "t2",
			reason: fmt.Sprintf("unexpected data after the JSON object at column %d", col(trailing, " x")+1)},
		{name: "second object", line: `{"custom_id":"t4"}{}`, customID: "t4",
			reason: "unexpected data after the JSON object at column 19"},
		{name: "control character", line: ctrl, customID: "c1",
			reason: fmt.Sprintf("control character U+0001 in a string at column %d (must be escaped)", col(ctrl, "\x01"))},
		{name: "invalid UTF-8", line: utf, customID: "u1", reason: fmt.Sprintf("invalid UTF-8 at column %d", col(utf, "\xe9"))},
		{name: "invalid UTF-8 outside strings", line: "{\xff}", reason: "invalid UTF-8 at column 2"},
		{name: "invalid escape", line: esc, customID: "e1",
			reason: fmt.Sprintf(`invalid JSON at column %d: invalid escape sequence "\\q" in a string`, col(esc, `\q`))},
		{name: "unexpected character", line: `{"custom_id":"x1",}`, customID: "x1",
			reason: `invalid JSON at column 19: unexpected character '}'`},
		{name: "not an object", line: `["a"]`, reason: "line is not a JSON object (got an array)"},
		{name: "duplicate key", line: `{"custom_id":"k1","custom_id":"k2"}`, customID: "k1", reason: `duplicate key "custom_id"`},
		{name: "duplicate body.model", line: `{"custom_id":"k3","method":"POST","url":"/v1/embeddings","body":{"model":"a","input":"x","model":"b"}}`,
			customID: "k3", reason: `duplicate key "body.model"`},
		{name: "duplicate custom_id", line: chatLine(`"g1"`, "again"), customID: "g1", reason: "duplicate custom_id, first seen on line 1"},
		{name: "missing custom_id", line: `{"method":"POST","url":"/v1/embeddings","body":{"model":"m","input":"x"}}`, reason: "missing custom_id"},
		{name: "empty custom_id", line: chatLine(`""`, "x"), reason: "custom_id is empty"},
		{name: "non-string custom_id", line: chatLine(`42`, "x"), reason: "custom_id must be a string, got a number"},
		{name: "missing method", line: `{"custom_id":"m1","url":"/v1/embeddings","body":{"model":"m","input":"x"}}`, customID: "m1", reason: "missing method"},
		{name: "wrong method", line: `{"custom_id":"m2","method":"GET","url":"/v1/embeddings","body":{"model":"m","input":"x"}}`,
			customID: "m2", reason: `method must be "POST", got "GET"`},
		{name: "missing url", line: `{"custom_id":"m3","method":"POST","body":{"model":"m","input":"x"}}`, customID: "m3", reason: "missing url"},
		{name: "non-string url", line: `{"custom_id":"m4","method":"POST","url":7,"body":{"model":"m","input":"x"}}`,
			customID: "m4", reason: "url must be a string, got a number"},
		{name: "unknown url", line: `{"custom_id":"m5","method":"POST","url":"/v1/nope","body":{"model":"m","input":"x"}}`,
			customID: "m5", reason: `url "/v1/nope" is not a batch endpoint of provider openai (accepted: ` + openaiURLs + `)`},
		{name: "missing body", line: `{"custom_id":"m6","method":"POST","url":"/v1/embeddings"}`, customID: "m6", reason: "missing body"},
		{name: "non-object body", line: `{"custom_id":"m7","method":"POST","url":"/v1/embeddings","body":"x"}`,
			customID: "m7", reason: "body must be a JSON object, got a string"},
		{name: "missing model", line: `{"custom_id":"m8","method":"POST","url":"/v1/embeddings","body":{"input":"x"}}`,
			customID: "m8", reason: "missing body.model (and no --model given)"},
		{name: "non-string model", line: `{"custom_id":"m9","method":"POST","url":"/v1/embeddings","body":{"model":4,"input":"x"}}`,
			customID: "m9", reason: "body.model must be a string, got a number"},
		{name: "empty model", line: `{"custom_id":"m10","method":"POST","url":"/v1/embeddings","body":{"model":"","input":"x"}}`,
			customID: "m10", reason: "body.model is empty"},
		{name: "line over the batch byte limit", lim: sluice.Limits{MaxBatchBytes: 300}, line: big, customID: "big",
			reason: fmt.Sprintf("request is %d bytes on the provider's wire, over the batch limit of 300 bytes", len(big)+1)},
		{name: "line over the batch token limit", lim: sluice.Limits{MaxBatchTokens: 50}, line: big, customID: "big",
			reason: "request has about 73 input tokens, over the batch limit of 50 tokens"},
		{name: "anthropic custom_id form", prov: "anthropic",
			line:     `{"custom_id":"bad id!","method":"POST","url":"/v1/messages","body":{"model":"claude-x","max_tokens":5,"messages":[]}}`,
			customID: "bad id!", reason: `custom_id "bad id!" does not match Anthropic's ^[a-zA-Z0-9_-]{1,64}$`},
		{name: "anthropic max_tokens", prov: "anthropic",
			line:     `{"custom_id":"a2","method":"POST","url":"/v1/messages","body":{"model":"claude-x","messages":[]}}`,
			customID: "a2", reason: "body.max_tokens must be a number >= 1 for Anthropic"},
		{name: "anthropic url", prov: "anthropic",
			line:     `{"custom_id":"a3","method":"POST","url":"/v1/embeddings","body":{"model":"claude-x","input":"x"}}`,
			customID: "a3", reason: `url "/v1/embeddings" is not a batch endpoint of Anthropic (accepted: /v1/messages, and /v1/chat/completions translated); it is an OpenAI url: use --provider openai (or local, which takes every family)`},
		{name: "anthropic chat line with a parameter it cannot honour", prov: "anthropic",
			line:     `{"custom_id":"a4","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"x"}],"logit_bias":{"50256":-100}}}`,
			customID: "a4", reason: "cannot translate for anthropic: body.logit_bias: anthropic has no logit bias"},
		{name: "anthropic chat line without max_tokens", prov: "anthropic",
			line:     `{"custom_id":"a5","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}]}}`,
			customID: "a5", reason: "cannot translate for anthropic: body.max_tokens: anthropic requires max_tokens (or max_completion_tokens) on every request"},
		{name: "anthropic chat line translated but custom_id refused", prov: "anthropic",
			line:     `{"custom_id":"a 6","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"x"}]}}`,
			customID: "a 6", reason: `translated for anthropic: custom_id "a 6" does not match Anthropic's ^[a-zA-Z0-9_-]{1,64}$`},
		{name: "cloudflare chat line with stop", prov: "cloudflare",
			line:     `{"custom_id":"f3","method":"POST","url":"/v1/chat/completions","body":{"model":"@cf/meta/llama-3.1-8b-instruct","messages":[{"role":"user","content":"x"}],"stop":["\n"]}}`,
			customID: "f3", reason: "cannot translate for cloudflare: body.stop: Workers AI text generation takes no stop sequences"},
		{name: "cloudflare external_reference", prov: "cloudflare",
			line:     `{"custom_id":"f1","method":"POST","url":"/ai/run/@cf/m","body":{"prompt":"x","external_reference":"y"}}`,
			customID: "f1", reason: "body.external_reference is set, but sluice sends custom_id there"},
		{name: "cloudflare /ai/run without model", prov: "cloudflare",
			line:     `{"custom_id":"f2","method":"POST","url":"/ai/run","body":{"prompt":"x"}}`,
			customID: "f2", reason: "url /ai/run needs body.model or --model"},
	}
}

// goodLines are lines 1 and 5 around a bad line 3 (line 2 and 4 blank).
func goodLines(prov string) (string, string) {
	switch prov {
	case "anthropic":
		l := `{"custom_id":"%s","method":"POST","url":"/v1/messages","body":{"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}}`
		return fmt.Sprintf(l, "g1"), fmt.Sprintf(l, "g2")
	case "cloudflare":
		l := `{"custom_id":"%s","method":"POST","url":"/ai/run/@cf/m","body":{"prompt":"hi"}}`
		return fmt.Sprintf(l, "g1"), fmt.Sprintf(l, "g2")
	}
	return chatLine(`"g1"`, "hi"), chatLine(`"g2"`, "hi")
}

func TestBadLines(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i, c := range badLines() {
		if c.prov == "" {
			c.prov = "openai"
		}
		t.Run(c.name, func(t *testing.T) {
			g1, g2 := goodLines(c.prov)
			content := g1 + "\n\n" + c.line + "\r\n \n" + g2 + "\n"
			in := e.write(fmt.Sprintf("bad%d.jsonl", i), []byte(content))
			want := &splitter.LineError{File: in, Line: 3, CustomID: c.customID, Reason: c.reason}

			r := e.split(in, c.prov, c.lim, func(cfg *splitter.Config) { cfg.Model = c.model })
			le, ok := r.err.(*splitter.LineError)
			if !ok || *le != *want {
				t.Fatalf("stop mode:\n got %v\nwant %v", r.err, want)
			}
			wantMsg := in + ":3: " + c.reason
			if c.customID != "" {
				wantMsg = in + ":3: custom_id " + strconv.Quote(c.customID) + ": " + c.reason
			}
			if le.Error() != wantMsg {
				t.Errorf("message %q, want %q", le.Error(), wantMsg)
			}

			r = e.split(in, c.prov, c.lim, func(cfg *splitter.Config) { cfg.Model = c.model; cfg.SkipInvalid = true })
			if r.err != nil || r.res.Requests != 2 || r.res.Rejected != 1 || r.res.Lines != 5 {
				t.Fatalf("skip mode: %v %+v", r.err, r.res)
			}
			checkPlan(t, r, validLines(t, r.cfg, []byte(content)))
			rej, err := os.ReadFile(r.cfg.RejectsPath)
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Line     int64  `json:"line"`
				CustomID string `json:"custom_id"`
				Reason   string `json:"reason"`
				Raw      string `json:"raw"`
			}
			if bytes.Count(rej, []byte{'\n'}) != 1 || json.Unmarshal(rej, &got) != nil {
				t.Fatalf("rejects file: %q", rej)
			}
			wantRaw := strings.ToValidUTF8(c.line, "\ufffd")
			if got.Line != 3 || got.CustomID != c.customID || got.Reason != c.reason || got.Raw != wantRaw {
				t.Errorf("rejects record %+v", got)
			}
		})
	}
}

// TestDuplicateInClosedChunk: the first occurrence is already in SQLite
// (its chunk closed); the error still names its line.
func TestDuplicateInClosedChunk(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	content := chatLine(`"a"`, "1") + "\n" + chatLine(`"b"`, "2") + "\n" + chatLine(`"c"`, "3") + "\n" + chatLine(`"a"`, "4") + "\n"
	in := e.write("dup.jsonl", []byte(content))
	r := e.split(in, "openai", sluice.Limits{MaxBatchRequests: 1}, nil)
	if r.err == nil || r.err.Error() != in+`:4: custom_id "a": duplicate custom_id, first seen on line 1` {
		t.Fatalf("%v", r.err)
	}
	r = e.split(in, "openai", sluice.Limits{MaxBatchRequests: 1}, func(c *splitter.Config) { c.SkipInvalid = true })
	if r.err != nil || r.res.Requests != 3 || r.res.Rejected != 1 {
		t.Fatalf("%v %+v", r.err, r.res)
	}
}

// TestEscapedFields: keys and values with JSON escapes mean what
// encoding/json says they mean.
func TestEscapedFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	content := `{"custom\u005fid":"a\u0062","method":"P\u004fST","url":"\/v1\/embeddings","body":{"mod\u0065l":"m\u00e9","input":"x"}}` + "\n" +
		`{"custom_id":"x","method":"POST","url":"/v1/embeddings","body":{"model":"a","mod\u0065l":"b","input":"x"}}` + "\n"
	in := e.write("esc.jsonl", []byte(content))
	r := e.split(in, "openai", sluice.Limits{}, nil)
	if r.err == nil || r.err.Error() != in+`:2: custom_id "x": duplicate key "body.model"` {
		t.Fatalf("%v", r.err)
	}
	r = e.split(in, "openai", sluice.Limits{}, func(c *splitter.Config) { c.SkipInvalid = true })
	if r.err != nil || len(r.requests) != 1 || r.requests[0].CustomID != "ab" || r.chunks[0].URL != "/v1/embeddings" || r.chunks[0].Model != "mé" {
		t.Fatalf("%v %+v %+v", r.err, r.requests, r.chunks)
	}
	checkPlan(t, r, validLines(t, r.cfg, []byte(content)))
}

// TestLocalMixedChunkBodies: --provider local writes each (url, model)
// group in its family's wire format; an Anthropic or Cloudflare chunk is one
// JSON body, header and footer included (a chunk without its "]}" was sent
// as a cut body and refused by the first create).
func TestLocalMixedChunkBodies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in := e.write("mixed.jsonl", []byte(strings.Join([]string{
		`{"custom_id":"a1","method":"POST","url":"/v1/messages","body":{"model":"claude-haiku-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}}`,
		`{"custom_id":"c1","method":"POST","url":"/ai/run/@cf/meta/llama-3.1-8b-instruct","body":{"prompt":"hi"}}`,
		chatLine(`"o1"`, "hi"),
		`{"custom_id":"a2","method":"POST","url":"/v1/messages","body":{"model":"claude-haiku-4-5","max_tokens":10,"messages":[{"role":"user","content":"ho"}]}}`,
	}, "\n")+"\n"))
	r := e.mustSplit(in, "local", sluice.Limits{}, nil)
	if len(r.chunks) != 3 {
		t.Fatalf("%d chunks, want 3 (one per family)", len(r.chunks))
	}
	for _, c := range r.chunks {
		b, err := os.ReadFile(filepath.Join(r.cfg.Dir, c.Path))
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(b)) != c.Bytes {
			t.Errorf("chunk %d (%s): file %d bytes, row says %d", c.ID, c.URL, len(b), c.Bytes)
		}
		env := sluice.CodecFor(r.cfg.Codec, c.URL).Envelope()
		if n := countItems(t, env, b); n != c.Requests {
			t.Errorf("chunk %d (%s): file holds %d items, row says %d", c.ID, c.URL, n, c.Requests)
		}
	}
}
