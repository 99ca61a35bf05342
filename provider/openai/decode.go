package openai

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
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

// usage reads body.usage in either vocabulary.
func usage(body []byte) sluice.Usage {
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
