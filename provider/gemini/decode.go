package gemini

import (
	"context"
	"errors"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
)

// Decode streams the responses file(s), one JSONL line at a time, and
// calls fn once per line, in the canonical OpenAI output shape, custom_id
// from the line's key:
//   - {"key","response"}: response {status_code 200, body: the
//     GenerateContentResponse}; ResultSucceeded; usage from usageMetadata
//     (promptTokenCount plus toolUsePromptTokenCount in; candidatesTokenCount
//     plus thoughtsTokenCount out);
//   - {"key","status"} (or "error"): a google.rpc.Status; an error line
//     {code: the status name (RESOURCE_EXHAUSTED, ...), message}, retryable
//     when the HTTP status that name stands for is (429, 5xx, 408) and for
//     CANCELLED and ABORTED, else failed for good.
//
// A line that does not parse is skipped and Decode goes on; it then
// returns a *sluice.MalformedLines naming each skipped file:line.
func (c *Client) Decode(ctx context.Context, ref sluice.BatchRef, files []string, lookup func(int) (string, bool), fn func(sluice.Result) error) error {
	return provider.DecodeJSONL(ctx, files, c.MaxLine, DecodeLine, fn)
}

// Succeeded is the result of request id answered by the
// GenerateContentResponse r: status 200, usage from usageMetadata
// (promptTokenCount plus toolUsePromptTokenCount in, candidatesTokenCount
// plus thoughtsTokenCount out). Vertex AI's predictions use it too.
func Succeeded(id string, r gjson.Result) sluice.Result {
	return sluice.Result{CustomID: id, Kind: sluice.ResultSucceeded, Line: sluice.OutputLine{CustomID: id,
		Response: &sluice.Response{StatusCode: 200, Body: []byte(r.Raw)}},
		Usage: usageOf(r.Get("usageMetadata"))}
}

// DecodeLine turns one responses-file line into a Result.
func DecodeLine(line []byte) (sluice.Result, error) {
	if !gjson.ValidBytes(line) {
		return sluice.Result{}, errors.New("not JSON")
	}
	l := gjson.ParseBytes(line)
	if !l.IsObject() {
		return sluice.Result{}, errors.New("not a JSON object")
	}
	key := l.Get("key")
	if key.Type != gjson.String || key.String() == "" {
		return sluice.Result{}, errors.New("no key")
	}
	id := key.String()
	if r := l.Get("response"); r.IsObject() {
		return Succeeded(id, r), nil
	}
	res := sluice.Result{CustomID: id, Line: sluice.OutputLine{CustomID: id}}
	st := l.Get("status")
	if !st.IsObject() {
		st = l.Get("error")
	}
	if !st.IsObject() {
		return sluice.Result{}, errors.New("neither response nor status")
	}
	name, status := StatusOf(st)
	res.Kind = provider.StatusKind(status)
	if name == "CANCELLED" || name == "ABORTED" {
		res.Kind = sluice.ResultRetryable // not a verdict on the request
	}
	msg := st.Get("message").String()
	if msg == "" {
		msg = "the request failed with " + name
	}
	res.Line.Error = &sluice.LineError{Code: sluice.ErrorCode(name), Message: msg}
	return res, nil
}

// usageOf reads a GenerateContentResponse's usageMetadata: the prompt and
// tool-use prompt tokens in, the candidates' and thoughts' tokens out.
func usageOf(u gjson.Result) sluice.Usage {
	return sluice.Usage{
		InputTokens:  u.Get("promptTokenCount").Int() + u.Get("toolUsePromptTokenCount").Int(),
		OutputTokens: u.Get("candidatesTokenCount").Int() + u.Get("thoughtsTokenCount").Int(),
	}
}
