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
	return provider.DecodeJSONL(ctx, files, c.maxLine, decodeLent, fn)
}

// DecodeLine turns one output or error file line into a Result that owns
// its bytes.
func DecodeLine(line []byte) (sluice.Result, error) {
	if res, ok := decodeResponse(line); ok {
		return res.Owned(), nil
	}
	return decodeLineStd(line)
}

// decodeLent is DecodeLine for the decoding loops, whose callbacks get
// Results lent for the call (sluice.Result): a response's Body is line's
// own bytes, not a copy (the body is most of a result line: 700 MB of
// copies a million results; BENCHMARKS.md).
func decodeLent(line []byte) (sluice.Result, error) {
	if res, ok := decodeResponse(line); ok {
		return res, nil
	}
	return decodeLineStd(line)
}

// decodeResponse is DecodeLine's fast path for the common line, a response
// and no error, read without encoding/json (a million lines a run:
// BENCHMARKS.md, "End to end"), in one pass that checks the line and finds
// custom_id, the response's members and body.usage (jsonscan.Walk). It
// answers only what encoding/json would answer the same: a line with
// anything unusual (a key spelled in another case or escaped, a key twice,
// a value of another type, an escaped custom_id, an error) is left to
// decodeLineStd. Usage is read as usage reads it.
func decodeResponse(line []byte) (res sluice.Result, ok bool) {
	var (
		id, resp, status, reqID, body []byte
		bodyCompact                   bool
		top, inResp                   uint // keys seen, by index in topKeys and respKeys
		us                            []byte
		usDone                        bool
		uvals                         [4][]byte // of usageKeys
	)
	var path [3][]byte // the keys of the objects Walk is in
	if !jsonscan.Walk(line, 4, func(depth int, key, v []byte, canonical bool) bool {
		if v == nil { // entering key's object
			path[depth-1] = key
			return true
		}
		switch depth {
		case 1:
			switch k := member(key, topKeys, &top); k {
			case 0: // custom_id
				id = v
				return plainString(v) && len(v) > 2
			case 1: // response
				resp = v
				return v[0] == '{'
			case 2: // error
				return string(v) == "null"
			case 3: // id
				return v[0] == '"' || string(v) == "null"
			default:
				return k == noMember
			}
		case 2:
			if string(path[0]) != "response" {
				return true
			}
			switch k := member(key, respKeys, &inResp); k {
			case 0:
				status = v
			case 1:
				reqID = v
				return plainString(v)
			case 2:
				body, bodyCompact = v, canonical
			default:
				return k == noMember
			}
			return true
		case 3:
			if usDone || string(path[0]) != "response" || string(path[1]) != "body" {
				return true
			}
			if bytes.IndexByte(key, '\\') >= 0 {
				return false // usage unescapes keys: encoding/json's path decides
			}
			if string(key) == "usage" {
				us, usDone = v, true
			}
			return true
		case 4:
			if usDone || string(path[0]) != "response" || string(path[1]) != "body" || string(path[2]) != "usage" {
				return true
			}
			if bytes.IndexByte(key, '\\') >= 0 {
				return false
			}
			for i, name := range usageKeys {
				if string(key) == name && uvals[i] == nil {
					uvals[i] = v
				}
			}
		}
		return true
	}) || id == nil || resp == nil || status == nil || body == nil {
		return res, false
	}
	code, err := strconv.Atoi(string(status))
	if err != nil || code == 0 {
		return res, false
	}
	cid := string(id[1 : len(id)-1])
	r := &sluice.Response{StatusCode: code, Body: body} // line's bytes: DecodeLine copies them
	if reqID != nil {
		r.RequestID = string(reqID[1 : len(reqID)-1])
	}
	if bodyCompact {
		r.MarkCompact()
	}
	u := sluice.Usage{}
	if us != nil && us[0] == '{' {
		var uok bool
		if u, uok = usageOf(uvals); !uok {
			u = usageGJSON(r.Body)
		}
	}
	return sluice.Result{CustomID: cid, Line: sluice.OutputLine{CustomID: cid, Response: r},
		Kind: provider.StatusKind(code), Usage: u}, true
}

var (
	topKeys   = []string{"custom_id", "response", "error", "id"}
	respKeys  = []string{"status_code", "request_id", "body"}
	usageKeys = []string{"prompt_tokens", "input_tokens", "completion_tokens", "output_tokens"}
)

// Results of member other than an index in keys.
const (
	noMember  = -1 // a key of no interest
	badMember = -2 // the caller falls back to encoding/json
)

// member returns the index in keys of key, marking it in seen, or
// noMember. It returns badMember (the caller falls back to encoding/json)
// when the key appears twice or matches one of keys only as encoding/json
// matches (another case, escapes, non-ASCII).
func member(key []byte, keys []string, seen *uint) int {
	for i, k := range keys {
		if string(key) == k {
			if *seen&(1<<i) != 0 {
				return badMember
			}
			*seen |= 1 << i
			return i
		}
	}
	for _, c := range key {
		if c == '\\' || c >= utf8.RuneSelf {
			return badMember
		}
	}
	for _, k := range keys {
		if strings.EqualFold(string(key), k) {
			return badMember
		}
	}
	return noMember
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
		if jsonscan.Canonical(r.Body) {
			res.Line.Response.MarkCompact() // as the fast path does
		}
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
		for i, name := range usageKeys {
			if string(k) == name && vals[i] == nil {
				vals[i] = v
			}
		}
		return true
	})
	if !ok {
		return sluice.Usage{}, false
	}
	return usageOf(vals)
}

// usageOf is the usage of the raw values of usageKeys (nil: absent), and
// false where gjson might read them otherwise (a value not an integer or
// null, or beyond 2^53).
func usageOf(vals [4][]byte) (u sluice.Usage, ok bool) {
	ok = true
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
