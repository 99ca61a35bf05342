package vertex

import (
	"context"
	"errors"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/gemini"
)

// Decode streams the prediction files, one JSONL line at a time, and
// calls fn once per line, in the canonical OpenAI output shape, custom_id
// from the line's key (provider.VertexKeyPrefix removed; a line without
// such a key is malformed, never guessed at):
//   - "status":"" and a response: response {status_code 200, body: the
//     GenerateContentResponse}; ResultSucceeded; usage from usageMetadata;
//   - "status":"<reason>: {"error":{"code","message","status"}}": an error
//     line {code: the status name, message}, retryable when its HTTP code
//     is (429, 5xx, 408), else failed for good; a status whose error does
//     not parse is failed with code UNKNOWN (never retried blind).
//
// Lines that do not parse are skipped; Decode then returns a
// *sluice.MalformedLines naming each file:line.
func (c *Client) Decode(ctx context.Context, ref sluice.BatchRef, files []string, lookup func(int) (string, bool), fn func(sluice.Result) error) error {
	return provider.DecodeJSONL(ctx, files, c.MaxLine, DecodeLine, fn)
}

// DecodeLine turns one predictions line into a Result.
func DecodeLine(line []byte) (sluice.Result, error) {
	if !gjson.ValidBytes(line) {
		return sluice.Result{}, errors.New("not JSON")
	}
	l := gjson.ParseBytes(line)
	if !l.IsObject() {
		return sluice.Result{}, errors.New("not a JSON object")
	}
	key := l.Get("key")
	id, ok := strings.CutPrefix(key.String(), provider.VertexKeyPrefix)
	if key.Type != gjson.String || !ok || id == "" {
		return sluice.Result{}, errors.New("no key written by sluice")
	}
	st := l.Get("status")
	if r := l.Get("response"); r.IsObject() && st.String() == "" {
		return gemini.Succeeded(id, r), nil
	}
	res := sluice.Result{CustomID: id, Line: sluice.OutputLine{CustomID: id}}
	if st.Type != gjson.String || st.String() == "" {
		return sluice.Result{}, errors.New("neither a response nor a status")
	}
	msg := st.String()
	name, kind := "UNKNOWN", sluice.ResultFailed
	if i := strings.IndexByte(msg, '{'); i >= 0 {
		if e := gjson.Get(msg[i:], "error"); e.IsObject() {
			var status int
			name, status = gemini.StatusOf(e)
			kind = provider.StatusKind(status)
			if m := e.Get("message").String(); m != "" {
				msg = m
			}
		}
	}
	res.Kind = kind
	res.Line.Error = &sluice.LineError{Code: sluice.ErrorCode(name), Message: msg}
	return res, nil
}
