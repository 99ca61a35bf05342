package xai

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
)

// resultRow is one entry of GET /batches/{id}/results.
type resultRow struct {
	ID     string `json:"batch_request_id"`
	Result *struct {
		Response *struct {
			Chat json.RawMessage `json:"chat_get_completion"`
		} `json:"response"`
		Error *rpcStatus `json:"error"`
	} `json:"batch_result"`
	// Error at the top level: the REST nesting of error rows is
	// unconfirmed (docs/providers/xai.md); both are read.
	Error *rpcStatus `json:"error"`
}

// rpcStatus is google.rpc.Status.
type rpcStatus struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// rpcHTTP is the HTTP status of each google.rpc.Code, as gRPC-gateway maps
// them; CANCELLED (1) is no answer: the request did not run.
var rpcHTTP = map[int]int{2: 500, 3: 400, 4: 504, 5: 404, 6: 409, 7: 403, 8: 429, 9: 400, 10: 409,
	11: 400, 12: 501, 13: 500, 14: 503, 15: 500, 16: 401}

// DecodeLine turns one results row into a Result: a chat_get_completion
// response is a 200 answer with its body; an error (google.rpc.Status) is
// the answer of the HTTP status its code maps to (retryable for
// DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, INTERNAL, UNAVAILABLE...), and
// CANCELLED a request that never ran, retried.
func DecodeLine(line []byte) (sluice.Result, error) {
	var w resultRow
	if err := json.Unmarshal(line, &w); err != nil {
		return sluice.Result{}, err
	}
	if w.ID == "" {
		return sluice.Result{}, errors.New("no batch_request_id")
	}
	res := sluice.Result{CustomID: w.ID, Line: sluice.OutputLine{CustomID: w.ID}}
	e := w.Error
	if w.Result != nil && w.Result.Error != nil {
		e = w.Result.Error
	}
	switch {
	case e != nil && e.Code == 1:
		res.Kind = sluice.ResultRetryable
		res.Line.Error = &sluice.LineError{Code: sluice.CodeBatchCancelled, Message: "the batch was cancelled before this request ran"}
	case e != nil:
		status, ok := rpcHTTP[e.Code]
		if !ok {
			return sluice.Result{}, fmt.Errorf("unknown error code %d", e.Code)
		}
		body, _ := json.Marshal(map[string]any{"code": e.Code, "message": e.Message})
		res.Kind = provider.StatusKind(status)
		res.Line.Response = &sluice.Response{StatusCode: status, Body: body}
	case w.Result != nil && w.Result.Response != nil && len(w.Result.Response.Chat) > 0 && string(w.Result.Response.Chat) != "null":
		body := w.Result.Response.Chat
		res.Kind = sluice.ResultSucceeded
		res.Line.Response = &sluice.Response{StatusCode: 200, Body: body}
		u := gjson.GetBytes(body, "usage")
		res.Usage = sluice.Usage{InputTokens: u.Get("prompt_tokens").Int(), OutputTokens: u.Get("completion_tokens").Int()}
	default:
		return sluice.Result{}, errors.New("neither a chat_get_completion response nor an error")
	}
	return res, nil
}
