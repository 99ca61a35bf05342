package compat

import (
	"bytes"
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
	var sc respScan
	if !jsonscan.Walk(line, 4, sc.visit) || sc.id == nil || sc.resp == nil || sc.status == nil || sc.body == nil {
		return res, false
	}
	return sc.result()
}

// respScan is what decodeResponse's walk found of a line.
type respScan struct {
	id, resp, status, reqID, body []byte
	bodyCompact                   bool
	top, inResp                   uint // keys seen, by index in topKeys and respKeys
	us                            []byte
	usDone                        bool
	uvals                         [4][]byte // of usageKeys
	path                          [3][]byte // the keys of the objects Walk is in
}

// visit is the jsonscan.Walk callback: false ends the walk, leaving the
// line to decodeLineStd.
func (sc *respScan) visit(depth int, key, v []byte, canonical bool) bool {
	if v == nil { // entering key's object
		sc.path[depth-1] = key
		return true
	}
	switch depth {
	case 1:
		return sc.topMember(key, v)
	case 2:
		if string(sc.path[0]) != "response" {
			return true
		}
		return sc.respMember(key, v, canonical)
	case 3:
		if sc.usDone || string(sc.path[0]) != "response" || string(sc.path[1]) != "body" {
			return true
		}
		if bytes.IndexByte(key, '\\') >= 0 {
			return false // usage unescapes keys: encoding/json's path decides
		}
		if string(key) == "usage" {
			sc.us, sc.usDone = v, true
		}
	case 4:
		if sc.usDone || string(sc.path[0]) != "response" || string(sc.path[1]) != "body" || string(sc.path[2]) != "usage" {
			return true
		}
		if bytes.IndexByte(key, '\\') >= 0 {
			return false
		}
		for i, name := range usageKeys {
			if string(key) == name && sc.uvals[i] == nil {
				sc.uvals[i] = v
			}
		}
	}
	return true
}

// topMember reads a member of the line's object.
func (sc *respScan) topMember(key, v []byte) bool {
	switch k := member(key, topKeys, &sc.top); k {
	case 0: // custom_id
		sc.id = v
		return plainString(v) && len(v) > 2
	case 1: // response
		sc.resp = v
		return v[0] == '{'
	case 2: // error
		return string(v) == "null"
	case 3: // id
		return v[0] == '"' || string(v) == "null"
	default:
		return k == noMember
	}
}

// respMember reads a member of the line's response.
func (sc *respScan) respMember(key, v []byte, canonical bool) bool {
	switch k := member(key, respKeys, &sc.inResp); k {
	case 0:
		sc.status = v
	case 1:
		sc.reqID = v
		return plainString(v)
	case 2:
		sc.body, sc.bodyCompact = v, canonical
	default:
		return k == noMember
	}
	return true
}

// result is the Result of a walk that found the line's parts.
func (sc *respScan) result() (res sluice.Result, ok bool) {
	code, err := strconv.Atoi(string(sc.status))
	if err != nil || code == 0 {
		return res, false
	}
	cid := string(sc.id[1 : len(sc.id)-1])
	r := &sluice.Response{StatusCode: code, Body: sc.body} // line's bytes: DecodeLine copies them
	if sc.reqID != nil {
		r.RequestID = string(sc.reqID[1 : len(sc.reqID)-1])
	}
	if sc.bodyCompact {
		r.MarkCompact()
	}
	u := sluice.Usage{}
	if sc.us != nil && sc.us[0] == '{' {
		var uok bool
		if u, uok = usageOf(sc.uvals); !uok {
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
	return provider.OpenAIUsage(gjson.GetBytes(body, "usage"))
}
