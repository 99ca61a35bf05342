package cloudflare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
)

// CodeStatus maps Workers AI error codes to the HTTP status they come with
// (docs/providers.md, Cloudflare).
var CodeStatus = map[int64]int{
	5007: 400, 3003: 400, 5004: 400, // no such model, incomplete request, invalid data
	3042: 404,                                  // invalid model id
	5016: 403, 5018: 403, 3041: 403, 3023: 403, // terms, private model, account blocked
	5035: 403,            // paid plan required
	3007: 408, 3008: 408, // timeout, aborted
	3006: 413,            // too large
	3036: 429, 3040: 429, // daily free allocation used, out of capacity
}

// item is one element of result.responses.
type item struct {
	ID                *int            `json:"id"`
	Result            json.RawMessage `json:"result"`
	Success           *bool           `json:"success"`
	ExternalReference json.RawMessage `json:"external_reference"`
	Error             json.RawMessage `json:"error"`
	Errors            json.RawMessage `json:"errors"`
}

// Decode streams each final answer's result.responses, one item at a
// time, and calls fn once per item:
//   - the custom_id is the item's external_reference, else lookup(id) (id
//     is the item's index in the chunk);
//   - success true: response {status_code 200, body: the item's result};
//   - success false: the shape of a failed item is undocumented; sluice
//     reads "error" as a string or {code, message}, or "errors" as an
//     array of them. The status_code is the error's own status when it
//     carries one, else that of its Workers AI code (CodeStatus), else the
//     code itself when it is an HTTP status, else 500. So an item fails
//     for good only when its error names a 4xx (other than 408/429); a
//     bare message is retryable. The body is {"error": …} or {"errors": …}
//     as received.
//
// Items of the chunk missing from the responses are not emitted (the
// dispatcher retries them). An item that is valid JSON but not a result
// (no external_reference and no known id, not an object) is skipped and
// Decode goes on; an answer that stops parsing (cut short, not JSON) keeps
// the items read before the break. Either way Decode then returns a
// *sluice.MalformedLines naming file and item. Cloudflare reports usage for
// the whole batch only: it is put on one result (the first item), the
// others carry none.
func (c *Client) Decode(ctx context.Context, ref sluice.BatchRef, files []string, lookup func(int) (string, bool), fn func(sluice.Result) error) error {
	var bad sluice.MalformedLines
	for _, path := range files {
		if err := decodeFile(ctx, path, lookup, &bad, fn); err != nil {
			return err
		}
	}
	return bad.Err()
}

func decodeFile(ctx context.Context, path string, lookup func(int) (string, bool), bad *sluice.MalformedLines, fn func(sluice.Result) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var held *sluice.Result // the first result, emitted last with the batch's usage
	visit := func(dec *json.Decoder, i int) error {
		if i%1024 == 1023 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		// Read the item whole first: a syntax error ends the answer, but an
		// item of the wrong shape is skipped and the stream goes on.
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return &provider.MalformedError{File: path, Line: i + 1, Err: err}
		}
		var it item
		if err := json.Unmarshal(raw, &it); err != nil {
			bad.Add(&provider.MalformedError{File: path, Line: i + 1, Err: err})
			return nil
		}
		res, err := decodeItem(&it, i, lookup)
		if err != nil {
			bad.Add(&provider.MalformedError{File: path, Line: i + 1, Err: err})
			return nil
		}
		if held == nil {
			held = &res
			return nil
		}
		if err := fn(res); err != nil {
			return &fnError{err}
		}
		return nil
	}
	fr := &fileReader{r: f}
	env, err := scanEnvelope(fr, visit)
	var fe *fnError
	switch {
	case errors.As(err, &fe):
		return fe.err // the caller's own error
	case fr.err != nil:
		return fmt.Errorf("read %s: %w", path, fr.err)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return err
	case err != nil:
		// The answer stops parsing here: the items before the break stand,
		// the rest are missing.
		var me *provider.MalformedError
		if !errors.As(err, &me) {
			me = &provider.MalformedError{File: path, Err: err}
		}
		me.Err = fmt.Errorf("answer unreadable from here on: %w", me.Err)
		bad.Add(me)
	case !env.Final:
		bad.Add(&provider.MalformedError{File: path, Err: errors.New("no result.responses")})
	}
	if held == nil {
		return nil
	}
	held.Usage = provider.OpenAIUsage(gjson.ParseBytes(env.Usage))
	if err := fn(*held); err != nil {
		return err
	}
	return nil
}

// fnError carries the caller's callback error through scanEnvelope.
type fnError struct{ err error }

func (e *fnError) Error() string { return e.err.Error() }

// fileReader remembers a read error of the file itself, so it is not taken
// for a malformed answer.
type fileReader struct {
	r   io.Reader
	err error
}

func (f *fileReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err != nil && err != io.EOF {
		f.err = err
	}
	return n, err
}

// decodeItem turns one response item (at position pos of the answer) into
// a Result.
func decodeItem(it *item, pos int, lookup func(int) (string, bool)) (sluice.Result, error) {
	var id string
	if len(it.ExternalReference) > 0 {
		json.Unmarshal(it.ExternalReference, &id) // a non-string reference is not ours
	}
	if id == "" && it.ID != nil && lookup != nil {
		if s, ok := lookup(*it.ID); ok {
			id = s
		}
	}
	if id == "" {
		return sluice.Result{}, fmt.Errorf("item %d has no external_reference and no known id", pos)
	}
	res := sluice.Result{CustomID: id, Line: sluice.OutputLine{CustomID: id}}
	failed := len(it.Error) > 0 && string(it.Error) != "null" || len(it.Errors) > 0 && string(it.Errors) != "null" && string(it.Errors) != "[]"
	ok := !failed
	if it.Success != nil {
		ok = *it.Success
	}
	if ok {
		body := it.Result
		if len(body) == 0 {
			body = json.RawMessage("null")
		}
		res.Kind = sluice.ResultSucceeded
		res.Line.Response = &sluice.Response{StatusCode: 200, Body: body}
		return res, nil
	}
	status := 500
	var body []byte
	var e gjson.Result
	switch {
	case len(it.Error) > 0 && string(it.Error) != "null":
		body = append(append([]byte(`{"error":`), it.Error...), '}')
		e = gjson.ParseBytes(it.Error)
	case len(it.Errors) > 0:
		body = append(append([]byte(`{"errors":`), it.Errors...), '}')
		e = gjson.ParseBytes(it.Errors).Get("0")
	default:
		body = []byte(`{"error":{"message":"the item failed without an error"}}`)
	}
	if e.IsObject() {
		status = errorStatus(e)
	}
	res.Kind = provider.StatusKind(status)
	res.Line.Response = &sluice.Response{StatusCode: status, Body: body}
	return res, nil
}

// errorStatus derives an HTTP status from an error object.
func errorStatus(e gjson.Result) int {
	for _, k := range []string{"status", "status_code", "http_status"} {
		if s := e.Get(k).Int(); s >= 400 && s < 600 {
			return int(s)
		}
	}
	code := e.Get("code")
	n := code.Int()
	if code.Type == gjson.String {
		n, _ = strconv.ParseInt(code.String(), 10, 64)
	}
	if s, ok := CodeStatus[n]; ok {
		return s
	}
	if n >= 400 && n < 600 {
		return int(n)
	}
	return 500
}
