// Package translate turns OpenAI chat completions requests into the native
// request bodies of other providers, and their answers back into OpenAI
// chat.completion objects, so that one request file runs on any provider
// and one parser reads every answer (docs/translation.md).
//
// It is pure: bytes in, bytes out, one request or one answer at a time, no
// state between calls, no I/O. The splitter calls Target.Request once per
// input line when it writes a chunk file; the dispatcher calls
// Target.Result (or Target.Error) once per result line when it reads a
// batch's answers. Reading uses gjson over the raw bytes and writing appends
// to a caller's buffer, so strings are copied as they are written in the
// input (escapes included) rather than decoded and encoded again.
//
// A parameter the target cannot honour is an *Error naming it. A parameter
// the target has no use for, where leaving it out cannot change the answer
// (store, metadata, service_tier, ...), is left out and reported to the
// caller's warn function instead.
package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/tidwall/gjson"
)

// Target translates to and from one provider's native chat API.
type Target struct {
	// Name is the provider family: anthropic, cloudflare, gemini, mistral,
	// together.
	Name string

	request func(dst []byte, c *chat, model string, warn func(Warning)) ([]byte, error)
	result  func(dst []byte, body gjson.Result, m Meta) ([]byte, error)
	errBody func(dst []byte, body gjson.Result, status int) []byte
}

// Warning is a parameter left out of a request because the target has no
// use for it and leaving it out cannot change the answer.
type Warning struct {
	Param  string // the body's key, e.g. "store"
	Reason string
}

// Error is a request the target cannot honour: a parameter it does not
// support, a value outside its range, a message shape it cannot express.
type Error struct {
	Param  string // the body's path, e.g. "logit_bias" or "messages[2].name"; may be empty
	Reason string
}

func (e *Error) Error() string {
	if e.Param == "" {
		return e.Reason
	}
	return "body." + e.Param + ": " + e.Reason
}

func errf(param, format string, args ...any) *Error {
	if len(args) == 0 {
		return &Error{Param: param, Reason: format}
	}
	return &Error{Param: param, Reason: fmt.Sprintf(format, args...)}
}

// Meta fills what a native answer may not carry: the id of the
// chat.completion when the answer has none, the model when the answer does
// not name it, and the created time (Unix seconds) when it has none.
type Meta struct {
	ID      string
	Model   string
	Created int64
}

// Request appends to dst the target's native request body for an OpenAI
// chat completions body. model is the model to send (the line's model,
// possibly mapped); the body's own "model" is not used. warn, which may be
// nil, is called for each parameter left out.
func (t *Target) Request(dst, body []byte, model string, warn func(Warning)) ([]byte, error) {
	return t.Translate(dst, body, Options{Model: model, Warn: warn})
}

// RequestValid is Request for a body already known to be valid JSON (the
// splitter's scanner checks every line), without checking it again.
func (t *Target) RequestValid(dst, body []byte, model string, warn func(Warning)) ([]byte, error) {
	return t.Translate(dst, body, Options{Model: model, Warn: warn, Valid: true})
}

// Options are the caller's choices for Translate.
type Options struct {
	Model string        // the model to send
	Warn  func(Warning) // told of each parameter left out; may be nil
	Valid bool          // body is known to be valid JSON: do not check it again
	// DefaultMaxTokens is the output token limit sent for a body that sets
	// neither max_tokens nor max_completion_tokens (0: none is sent, and
	// targets that require one, Anthropic, reject the body).
	DefaultMaxTokens int64
}

// Translate is Request with every option.
func (t *Target) Translate(dst, body []byte, o Options) ([]byte, error) {
	if !o.Valid && !gjson.ValidBytes(body) {
		return dst, errf("", "body is not valid JSON")
	}
	var c chat
	if err := parseValid(body, &c); err != nil {
		return dst, err
	}
	if !present(c.maxTokens) && o.DefaultMaxTokens > 0 {
		raw := strconv.FormatInt(o.DefaultMaxTokens, 10)
		c.maxTokens = gjson.Result{Type: gjson.Number, Raw: raw, Num: float64(o.DefaultMaxTokens)}
		c.maxTokensName = "max_tokens"
	}
	// Warnings are told only for a request that translates.
	var warns []Warning
	start := len(dst)
	out, err := t.request(dst, &c, o.Model, func(w Warning) { warns = append(warns, w) })
	if err != nil {
		return dst[:start], err
	}
	if o.Warn != nil {
		for _, w := range warns {
			o.Warn(w)
		}
	}
	return out, nil
}

// Result appends to dst the OpenAI chat.completion for a native successful
// answer body. An answer that is not the target's response shape is an
// error; whatever it returns without error is a valid chat.completion.
func (t *Target) Result(dst, body []byte, m Meta) ([]byte, error) {
	if !gjson.ValidBytes(body) {
		return dst, errf("", "the answer is not valid JSON")
	}
	r := gjson.ParseBytes(body)
	if !r.IsObject() {
		return dst, errf("", "the answer is not a JSON object")
	}
	start := len(dst)
	out, err := t.result(dst, r, m)
	if err != nil {
		return dst[:start], err
	}
	return out, nil
}

// Error appends to dst an OpenAI error object,
// {"error":{"message","type","param","code"}}, for a native error body
// answered with HTTP status. It never fails: a body it cannot read becomes
// a message quoting it.
func (t *Target) Error(dst, body []byte, status int) []byte {
	r := gjson.ParseBytes(body)
	if !gjson.ValidBytes(body) {
		r = gjson.Result{}
	}
	return t.errBody(dst, r, status)
}

// Targets are the providers this package translates to, by family name.
var Targets = map[string]*Target{}

func register(t *Target) *Target {
	Targets[t.Name] = t
	return t
}

// Lookup returns the target of a provider family, or nil.
func Lookup(family string) *Target { return Targets[family] }

// ---- writing JSON ----

// appendString appends s as a JSON string.
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			b, _ := json.Marshal(s) // a string always marshals
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// appendJSONString appends raw JSON (an object, say) as a JSON string,
// compacted first.
func appendJSONString(dst []byte, raw string) []byte {
	return appendString(dst, compact(raw))
}

// compact returns raw JSON compacted (as it is if it cannot be).
func compact(raw string) string {
	var buf bytes.Buffer
	if json.Compact(&buf, []byte(raw)) != nil {
		return raw
	}
	return buf.String()
}

// appendStr appends a gjson string value: its raw JSON when it is a
// string, escapes and all, else its text as a JSON string.
func appendStr(dst []byte, r gjson.Result) []byte {
	if r.Type == gjson.String && len(r.Raw) >= 2 && r.Raw[0] == '"' {
		return append(dst, r.Raw...)
	}
	return appendString(dst, r.String())
}

// appendKey appends ,"key": (or "key": first in an object: first reports
// and clears it).
func appendKey(dst []byte, first *bool, key string) []byte {
	if !*first {
		dst = append(dst, ',')
	}
	*first = false
	dst = append(dst, '"')
	dst = append(dst, key...)
	return append(dst, '"', ':')
}

// appendInt appends n.
func appendInt(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }
