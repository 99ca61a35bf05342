package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/jsonscan"
	"github.com/sluice-batch/sluice/provider"
)

// outputLine is one line of a batch output or error file.
type outputLine struct {
	ID       string  `json:"id"`
	CustomID *string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		RequestID  string          `json:"request_id"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *lineError `json:"error"`
}

// lineError is a line's error: {"code","message"}, or a bare string
// (seen in Together's batch errors; docs/providers/together.md).
type lineError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *lineError) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		e.Message = s
		return nil
	}
	var o struct {
		Code    json.RawMessage `json:"code"`
		Message string          `json:"message"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return err
	}
	e.Message = o.Message
	if json.Unmarshal(o.Code, &e.Code) != nil && len(o.Code) > 0 && string(o.Code) != "null" {
		e.Code = string(o.Code) // a numeric code, as its text
	}
	return nil
}

// Decode streams the output and error files, one line at a time (lines of
// tens of MB are fine; nothing is loaded whole), and calls fn once per
// line:
//   - a response with a 2xx status_code: ResultSucceeded;
//   - a response with 408, 429 or 5xx: ResultRetryable; other statuses:
//     ResultFailed;
//   - no response, an error: ResultRetryable for batch_expired,
//     batch_cancelled, cancelled, rate_limit_exceeded, server_error (see
//     provider.CodeKind), else ResultFailed.
//
// Usage comes from response.body.usage (prompt_tokens/completion_tokens,
// or input_tokens/output_tokens for /v1/responses). A line that does not
// parse (not JSON, no custom_id, neither a response nor an error, cut
// short, over the line bound) is skipped and Decode goes on; it then
// returns a *sluice.MalformedLines naming each skipped file:line. Any
// other error (a file that cannot be read) ends Decode.
// lookup is not needed: every line carries its custom_id.
func (c *Client) Decode(ctx context.Context, ref sluice.BatchRef, files []string, lookup func(int) (string, bool), fn func(sluice.Result) error) error {
	return provider.DecodeJSONL(ctx, files, c.maxLine, DecodeLine, fn)
}

// DecodeLine turns one output or error file line into a Result.
func DecodeLine(line []byte) (sluice.Result, error) {
	if res, ok := decodeResponse(line); ok {
		return res, nil
	}
	return decodeLineStd(line)
}

// decodeResponse is DecodeLine's fast path for the common line, a response
// and no error, read without encoding/json (a million lines a run:
// BENCHMARKS.md, "End to end"). It answers only what encoding/json would
// answer the same: a line with anything unusual (a key spelled in another
// case or escaped, a key twice, a value of another type, an escaped
// custom_id, an error) is left to decodeLineStd.
func decodeResponse(line []byte) (res sluice.Result, ok bool) {
	var id, resp []byte
	if !members(jsonscan.Object, line, []string{"custom_id", "response", "error", "id"}, func(k int, v []byte) bool {
		switch k {
		case 0:
			id = v
			return plainString(v) && len(v) > 2
		case 1:
			resp = v
			return v[0] == '{'
		case 2:
			return string(v) == "null"
		}
		return v[0] == '"' || string(v) == "null"
	}) || id == nil || resp == nil {
		return res, false
	}
	var status, reqID, body []byte
	if !members(jsonscan.Members, resp, []string{"status_code", "request_id", "body"}, func(k int, v []byte) bool {
		switch k {
		case 0:
			status = v
		case 1:
			reqID = v
			return plainString(v)
		case 2:
			body = v
		}
		return true
	}) || status == nil || body == nil {
		return res, false
	}
	code, err := strconv.Atoi(string(status))
	if err != nil || code == 0 {
		return res, false
	}
	cid := string(id[1 : len(id)-1])
	r := &sluice.Response{StatusCode: code, Body: append(json.RawMessage(nil), body...)}
	if reqID != nil {
		r.RequestID = string(reqID[1 : len(reqID)-1])
	}
	return sluice.Result{CustomID: cid, Line: sluice.OutputLine{CustomID: cid, Response: r},
		Kind: provider.StatusKind(code), Usage: usage(r.Body)}, true
}

// members walks the members of the object obj with walk (jsonscan.Object,
// which also validates it, or jsonscan.Members for a part of a line
// validated already), calling fn with the index in keys of each member
// whose key is one of keys. It reports false
// (the caller falls back to encoding/json) when fn does, or when a key
// appears twice or matches one of keys only as encoding/json matches
// (another case, escapes, non-ASCII).
func members(walk func([]byte, func(k, v []byte) bool) bool, obj []byte, keys []string, fn func(k int, v []byte) bool) bool {
	var seen uint
	ok := true
	walked := walk(obj, func(key, v []byte) bool {
		for i, k := range keys {
			if string(key) == k {
				if seen&(1<<i) != 0 {
					ok = false
					return false
				}
				seen |= 1 << i
				ok = fn(i, v)
				return ok
			}
		}
		for _, c := range key {
			if c == '\\' || c >= utf8.RuneSelf {
				ok = false
				return false
			}
		}
		for _, k := range keys {
			if strings.EqualFold(string(key), k) {
				ok = false
				return false
			}
		}
		return true
	})
	return walked && ok
}

// plainString reports whether the raw JSON value v is a string that
// decodes to its bytes as written (no escapes, valid UTF-8).
func plainString(v []byte) bool {
	return len(v) >= 2 && v[0] == '"' && bytes.IndexByte(v[1:len(v)-1], '\\') < 0 && utf8.Valid(v)
}

// decodeLineStd is DecodeLine by encoding/json: every line the fast path
// leaves.
func decodeLineStd(line []byte) (sluice.Result, error) {
	var w outputLine
	if err := json.Unmarshal(line, &w); err != nil {
		return sluice.Result{}, err
	}
	if w.CustomID == nil || *w.CustomID == "" {
		return sluice.Result{}, errors.New("no custom_id")
	}
	res := sluice.Result{CustomID: *w.CustomID, Line: sluice.OutputLine{CustomID: *w.CustomID}}
	if w.Error != nil && (w.Error.Code != "" || w.Error.Message != "") {
		res.Line.Error = &sluice.LineError{Code: sluice.ErrorCode(w.Error.Code), Message: w.Error.Message}
	}
	switch {
	case w.Response != nil && w.Response.StatusCode != 0:
		r := w.Response
		res.Line.Response = &sluice.Response{StatusCode: r.StatusCode, RequestID: r.RequestID, Body: r.Body}
		res.Kind = provider.StatusKind(r.StatusCode)
		res.Usage = usage(r.Body)
	case res.Line.Error != nil:
		res.Kind = provider.CodeKind(string(res.Line.Error.Code))
	default:
		return sluice.Result{}, errors.New("neither a response nor an error")
	}
	return res, nil
}

// usage reads body.usage in either vocabulary. body is valid JSON.
func usage(body []byte) sluice.Usage {
	if u, ok := usageFast(body); ok {
		return u
	}
	return usageGJSON(body)
}

// usageFast is usage for the common body: it answers only where gjson
// answers the same (the first member of a name, whose value is an integer
// or null), and reports false otherwise.
func usageFast(body []byte) (u sluice.Usage, ok bool) {
	var us []byte
	ok = true
	jsonscan.Members(body, func(k, v []byte) bool {
		if bytes.IndexByte(k, '\\') >= 0 {
			ok = false // gjson unescapes keys
			return false
		}
		if string(k) == "usage" {
			us = v
			return false
		}
		return true
	})
	if !ok || us == nil || us[0] != '{' {
		return sluice.Usage{}, ok
	}
	var vals [4][]byte // prompt_tokens, input_tokens, completion_tokens, output_tokens
	jsonscan.Members(us, func(k, v []byte) bool {
		if bytes.IndexByte(k, '\\') >= 0 {
			ok = false
			return false
		}
		for i, name := range []string{"prompt_tokens", "input_tokens", "completion_tokens", "output_tokens"} {
			if string(k) == name && vals[i] == nil {
				vals[i] = v
			}
		}
		return true
	})
	num := func(a, b []byte) int64 {
		v := a
		if v == nil {
			v = b
		}
		if v == nil || string(v) == "null" {
			return 0
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || n > 1<<53 || n < -(1<<53) {
			ok = false
		}
		return n
	}
	u = sluice.Usage{InputTokens: num(vals[0], vals[1]), OutputTokens: num(vals[2], vals[3])}
	return u, ok
}

// usageGJSON is usage by gjson: every body usageFast leaves.
func usageGJSON(body []byte) sluice.Usage {
	u := gjson.GetBytes(body, "usage")
	if !u.IsObject() {
		return sluice.Usage{}
	}
	in := u.Get("prompt_tokens")
	if !in.Exists() {
		in = u.Get("input_tokens")
	}
	out := u.Get("completion_tokens")
	if !out.Exists() {
		out = u.Get("output_tokens")
	}
	return sluice.Usage{InputTokens: in.Int(), OutputTokens: out.Int()}
}
