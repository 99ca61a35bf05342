package bedrock

import (
	"context"
	"errors"
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
)

// Decode streams the job's output files, one record a line, and calls fn
// once per record of the chunk, in the canonical OpenAI output shape,
// custom_id from the record's recordId:
//   - {"recordId","modelInput","modelOutput"}: response {status_code 200,
//     body: modelOutput}; ResultSucceeded; usage from the body as each
//     model reports it (Anthropic's usage.input_tokens, Converse's and
//     Nova's usage.inputTokens, Llama's prompt_token_count, Titan's
//     inputTextTokenCount, and their output counterparts);
//   - {"recordId","modelInput","error":{"errorCode","errorMessage"}}: an
//     error line, retryable for 408, 429 and 5xx, failed for good for any
//     other code.
//
// A recordId that is not one of the chunk's custom_ids proves nothing
// about which request the record answers: such a line is skipped as
// malformed, as is a line that does not parse; Decode then returns a
// *sluice.MalformedLines naming each.
func (c *Client) Decode(ctx context.Context, ref sluice.BatchRef, files []string, lookup func(int) (string, bool), fn func(sluice.Result) error) error {
	ids := make(map[string]struct{}, ref.Requests)
	for i := 0; ; i++ {
		id, ok := lookup(i)
		if !ok {
			break
		}
		ids[id] = struct{}{}
	}
	return provider.DecodeJSONL(ctx, files, c.MaxLine, func(line []byte) (sluice.Result, error) {
		res, err := DecodeLine(line)
		if err != nil {
			return res, err
		}
		if _, ok := ids[res.CustomID]; !ok {
			return sluice.Result{}, errors.New("recordId " + strconv.Quote(res.CustomID) + " is not in this batch")
		}
		return res, nil
	}, fn)
}

// DecodeLine turns one output record into a Result.
func DecodeLine(line []byte) (sluice.Result, error) {
	if !gjson.ValidBytes(line) {
		return sluice.Result{}, errors.New("not JSON")
	}
	l := gjson.ParseBytes(line)
	id := l.Get("recordId")
	if id.Type != gjson.String || id.Str == "" {
		return sluice.Result{}, errors.New("no recordId")
	}
	res := sluice.Result{CustomID: id.Str, Line: sluice.OutputLine{CustomID: id.Str}}
	if out := l.Get("modelOutput"); out.IsObject() {
		res.Kind = sluice.ResultSucceeded
		res.Line.Response = &sluice.Response{StatusCode: 200, Body: []byte(out.Raw)}
		res.Usage = usageOf(out)
		return res, nil
	}
	e := l.Get("error")
	if !e.IsObject() {
		return sluice.Result{}, errors.New("neither modelOutput nor error")
	}
	code := int(e.Get("errorCode").Int())
	res.Kind = provider.StatusKind(code)
	if code == 0 {
		res.Kind = sluice.ResultRetryable // no verdict on the request
	}
	msg := e.Get("errorMessage").String()
	if msg == "" {
		msg = "the record failed with error code " + strconv.Itoa(code)
	}
	res.Line.Error = &sluice.LineError{Code: sluice.ErrorCode("bedrock_" + strconv.Itoa(code)), Message: msg}
	return res, nil
}

// usageOf reads the token counts of a model's answer, whichever shape.
func usageOf(out gjson.Result) sluice.Usage {
	r := gjson.GetMany(out.Raw, "usage.input_tokens", "usage.output_tokens", "usage.inputTokens", "usage.outputTokens",
		"prompt_token_count", "generation_token_count", "inputTextTokenCount",
		"usage.cache_creation_input_tokens", "usage.cache_read_input_tokens")
	return sluice.Usage{
		InputTokens:  r[0].Int() + r[2].Int() + r[4].Int() + r[6].Int() + r[7].Int() + r[8].Int(),
		OutputTokens: r[1].Int() + r[3].Int() + r[5].Int(),
	}
}
