package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
)

// ErrorStatus is the HTTP status of each Anthropic error type, used to
// give an errored result the status_code its request would have had. An
// unknown type counts as 500 (retryable).
var ErrorStatus = map[string]int{
	"invalid_request_error": 400,
	"authentication_error":  401,
	"billing_error":         402,
	"permission_error":      403,
	"not_found_error":       404,
	"request_too_large":     413,
	"rate_limit_error":      429,
	"api_error":             500,
	"timeout_error":         504,
	"overloaded_error":      529,
}

type resultLine struct {
	CustomID string `json:"custom_id"`
	Result   *struct {
		Type    string          `json:"type"`
		Message json.RawMessage `json:"message"`
		Error   json.RawMessage `json:"error"`
	} `json:"result"`
}

// Decode streams the results file(s), one JSONL line at a time, and calls
// fn once per line, in the canonical OpenAI output shape:
//   - succeeded: response {status_code 200, body: the Message};
//     ResultSucceeded; usage from message.usage (input_tokens plus cache
//     creation and cache read input tokens; output_tokens);
//   - errored: response {status_code from the error type (ErrorStatus),
//     request_id, body: the error object}; 429 and 5xx retryable, other
//     statuses failed;
//   - canceled: error {code "batch_cancelled"}; expired: error {code
//     "batch_expired"}; both retryable.
//
// A line that does not parse is skipped and Decode goes on; it then
// returns a *sluice.MalformedLines naming each skipped file:line. Any other
// error (a file that cannot be read) ends Decode.
func (c *Client) Decode(ctx context.Context, ref sluice.BatchRef, files []string, lookup func(int) (string, bool), fn func(sluice.Result) error) error {
	return provider.DecodeJSONL(ctx, files, c.MaxLine, DecodeLine, fn)
}

// DecodeLine turns one results line into a Result.
func DecodeLine(line []byte) (sluice.Result, error) {
	var w resultLine
	if err := json.Unmarshal(line, &w); err != nil {
		return sluice.Result{}, err
	}
	if w.CustomID == "" {
		return sluice.Result{}, errors.New("no custom_id")
	}
	if w.Result == nil {
		return sluice.Result{}, errors.New("no result")
	}
	res := sluice.Result{CustomID: w.CustomID, Line: sluice.OutputLine{CustomID: w.CustomID}}
	switch r := w.Result; r.Type {
	case "succeeded":
		if len(r.Message) == 0 || string(r.Message) == "null" {
			return sluice.Result{}, errors.New("succeeded without a message")
		}
		res.Kind = sluice.ResultSucceeded
		res.Line.Response = &sluice.Response{StatusCode: 200, Body: r.Message}
		res.Usage = messageUsage(r.Message)
	case "errored":
		if len(r.Error) == 0 || string(r.Error) == "null" {
			return sluice.Result{}, errors.New("errored without an error")
		}
		typ := gjson.GetBytes(r.Error, "error.type").String()
		if typ == "" {
			typ = gjson.GetBytes(r.Error, "type").String()
		}
		status, ok := ErrorStatus[typ]
		if !ok {
			status = 500
		}
		res.Kind = provider.StatusKind(status)
		res.Line.Response = &sluice.Response{StatusCode: status, RequestID: gjson.GetBytes(r.Error, "request_id").String(), Body: r.Error}
	case "canceled":
		res.Kind = sluice.ResultRetryable
		res.Line.Error = &sluice.LineError{Code: sluice.CodeBatchCancelled, Message: "the batch was cancelled before this request ran"}
	case "expired":
		res.Kind = sluice.ResultRetryable
		res.Line.Error = &sluice.LineError{Code: sluice.CodeBatchExpired, Message: "the batch expired before this request ran"}
	default:
		return sluice.Result{}, fmt.Errorf("unknown result type %q", r.Type)
	}
	return res, nil
}

// messageUsage is a Message's usage: input_tokens plus the cache's
// creation and read tokens in, output_tokens out.
func messageUsage(msg []byte) sluice.Usage {
	u := gjson.GetBytes(msg, "usage")
	return sluice.Usage{
		InputTokens: u.Get("input_tokens").Int() + u.Get("cache_creation_input_tokens").Int() +
			u.Get("cache_read_input_tokens").Int(),
		OutputTokens: u.Get("output_tokens").Int(),
	}
}
